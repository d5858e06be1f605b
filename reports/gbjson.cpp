// Parses Google Benchmark's JSON output (the format of --benchmark_out and of `parbench run`)
// with nlohmann/json, checking every field it uses so bad input fails with a clear message.
#include "reports/gbjson.h"

#include <algorithm>
#include <set>

#include <nlohmann/json.hpp>

#include "engine/check.h"
#include "engine/fsutil.h"
#include "engine/json_input.h"
#include "reports/stats.h"

namespace pb::reports {

namespace {

using nlohmann::json;

// Fields GB writes itself; every other numeric field of a benchmark is a user counter.
const std::set<std::string> kKnownFields = {
    "name",          "family_index", "per_family_instance_index", "run_name",   "run_type",
    "repetitions",   "repetition_index", "threads",              "aggregate_name", "aggregate_unit",
    "error_occurred", "error_message", "iterations",            "real_time",  "cpu_time",
    "time_unit",     "label",        "big_o",                     "rms",        "allocs_per_iter",
    "max_bytes_used", "skipped",     "skip_message"};

[[noreturn]] void bad(const std::string& source, const std::string& where, const std::string& what) {
  throw UsageError(fmt::format("{}: {}{}", source, where.empty() ? "" : where + ": ", what));
}

const char* type_name(const json& v) { return v.type_name(); }

double time_unit_seconds(const std::string& unit, const std::string& source, const std::string& where) {
  if (unit == "ns") return 1e-9;
  if (unit == "us") return 1e-6;
  if (unit == "ms") return 1e-3;
  if (unit == "s") return 1.0;
  bad(source, where, fmt::format("field \"time_unit\" must be ns, us, ms or s, got \"{}\"", unit));
}

}  // namespace

std::string nan_to_null(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < text.size()) out += text[++i];
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
      out += c;
      continue;
    }
    const std::size_t j = i + (c == '-' ? 1 : 0);
    std::size_t matched = 0;
    for (const char* token : {"NaN", "Infinity"})
      if (text.compare(j, std::char_traits<char>::length(token), token) == 0) matched = std::char_traits<char>::length(token);
    if (matched) {
      out += "null";
      i = j + matched - 1;
    } else {
      out += c;
    }
  }
  return out;
}

std::string RunFile::context_value(const std::string& key, const std::string& fallback) const {
  auto it = context.find(key);
  return it == context.end() ? fallback : it->second;
}

RunFile parse_run_json(const std::string& text, const std::string& source) {
  const json doc = parse_json_input(nan_to_null(text), source);
  if (!doc.is_object()) bad(source, "", fmt::format("expected a Google Benchmark JSON object, got a JSON {}", type_name(doc)));
  if (!doc.contains("benchmarks"))
    bad(source, "", "not a Google Benchmark JSON file: it has no \"benchmarks\" array");
  const json& list = doc.at("benchmarks");
  if (!list.is_array()) bad(source, "", fmt::format("field \"benchmarks\" must be an array, got a JSON {}", type_name(list)));

  RunFile file;
  file.source = source;
  if (doc.contains("context")) {
    const json& ctx = doc.at("context");
    if (!ctx.is_object()) bad(source, "", fmt::format("field \"context\" must be an object, got a JSON {}", type_name(ctx)));
    for (auto it = ctx.begin(); it != ctx.end(); ++it)
      file.context[it.key()] = it.value().is_string() ? it.value().get<std::string>() : it.value().dump();
  }

  for (std::size_t i = 0; i < list.size(); ++i) {
    const json& b = list[i];
    std::string where = fmt::format("benchmarks[{}]", i);
    if (!b.is_object()) bad(source, where, fmt::format("expected an object, got a JSON {}", type_name(b)));
    auto str = [&](const char* key, bool required, const std::string& fallback = "") -> std::string {
      if (!b.contains(key)) {
        if (required) bad(source, where, fmt::format("missing field \"{}\"", key));
        return fallback;
      }
      const json& v = b.at(key);
      if (!v.is_string()) bad(source, where, fmt::format("field \"{}\" must be a string, got {}", key, v.dump()));
      return v.get<std::string>();
    };
    auto num = [&](const char* key, bool required, double fallback = 0) -> double {
      if (!b.contains(key)) {
        if (required) bad(source, where, fmt::format("missing field \"{}\"", key));
        return fallback;
      }
      const json& v = b.at(key);
      if (!v.is_number()) bad(source, where, fmt::format("field \"{}\" must be a number, got {}", key, v.dump()));
      return v.get<double>();
    };

    BenchRun r;
    r.name = str("name", true);
    where += fmt::format(" (\"{}\")", r.name);
    r.run_name = str("run_name", false, r.name);
    const std::string run_type = str("run_type", false, b.contains("aggregate_name") ? "aggregate" : "iteration");
    if (run_type != "iteration" && run_type != "aggregate")
      bad(source, where, fmt::format("field \"run_type\" must be \"iteration\" or \"aggregate\", got \"{}\"", run_type));
    r.aggregate = run_type == "aggregate";
    if (r.aggregate) {
      r.aggregate_name = str("aggregate_name", true);
      r.percentage = str("aggregate_unit", false, "time") == "percentage";
    }
    r.repetitions = static_cast<int64_t>(num("repetitions", false, 1));
    r.repetition_index = static_cast<int64_t>(num("repetition_index", false, 0));
    if (b.contains("error_occurred")) {
      const json& v = b.at("error_occurred");
      if (!v.is_boolean()) bad(source, where, fmt::format("field \"error_occurred\" must be true or false, got {}", v.dump()));
      r.error = v.get<bool>();
    }
    if (r.error) {
      r.error_message = str("error_message", false, "(no message)");
    } else if (!(r.aggregate && !b.contains("real_time"))) {  // big-O/RMS aggregates have no time
      r.iterations = static_cast<int64_t>(num("iterations", !r.aggregate, 0));
      const double real = num("real_time", true), cpu = num("cpu_time", false, real);
      if (r.percentage) {
        r.real_s = real;
        r.cpu_s = cpu;
      } else {
        const double scale = time_unit_seconds(str("time_unit", true), source, where);
        r.real_s = real * scale;
        r.cpu_s = cpu * scale;
      }
      if (!r.aggregate && !(r.real_s >= 0)) bad(source, where, fmt::format("field \"real_time\" must be >= 0, got {}", real));
    }
    for (auto it = b.begin(); it != b.end(); ++it)
      if (!kKnownFields.count(it.key()) && it.value().is_number()) r.counters[it.key()] = it.value().get<double>();
    file.runs.push_back(std::move(r));
  }
  return file;
}

RunFile load_run_json(const std::string& path) { return parse_run_json(read_file(path), path); }

std::optional<double> Benchmark::median_s() const {
  if (!times_s.empty()) return median(times_s);
  auto it = aggregates.find("median");
  if (it != aggregates.end()) return it->second;
  it = aggregates.find("mean");
  if (it != aggregates.end()) return it->second;
  return std::nullopt;
}

std::optional<double> Benchmark::counter_median(const std::string& key) const {
  auto it = counters.find(key);
  if (it == counters.end() || it->second.empty()) return std::nullopt;
  return median(it->second);
}

std::optional<double> Benchmark::counter_max(const std::string& key) const {
  auto it = counters.find(key);
  if (it == counters.end() || it->second.empty()) return std::nullopt;
  return *std::max_element(it->second.begin(), it->second.end());
}

std::vector<Benchmark> collect_benchmarks(const std::vector<const RunFile*>& files) {
  std::vector<Benchmark> out;
  auto find = [&](const std::string& name) -> Benchmark& {
    for (Benchmark& b : out)
      if (b.name == name) return b;
    out.emplace_back();
    out.back().name = name;
    return out.back();
  };
  for (const RunFile* f : files) {
    for (const BenchRun& r : f->runs) {
      Benchmark& b = find(r.run_name);
      if (r.error) {
        if (b.error_message.empty()) b.error_message = r.error_message;
        continue;
      }
      if (r.aggregate) {
        // GB's own statistics: used only when a file holds aggregates but no repetitions.
        if (!r.percentage) b.aggregates[r.aggregate_name] = r.real_s;
        continue;
      }
      if (b.times_s.empty()) b.iterations = r.iterations;
      b.times_s.push_back(r.real_s);
      for (const auto& [k, v] : r.counters) b.counters[k].push_back(v);
    }
  }
  for (Benchmark& b : out) b.error = b.times_s.empty() && b.aggregates.empty() && !b.error_message.empty();
  return out;
}

std::vector<Benchmark> collect_benchmarks(const RunFile& file) { return collect_benchmarks(std::vector<const RunFile*>{&file}); }

}  // namespace pb::reports
