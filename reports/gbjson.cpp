// Parses Google Benchmark's JSON output (the format of --benchmark_out and of `parbench run`)
// with nlohmann/json, checking every field it uses so bad input fails with a clear message.
#include "reports/gbjson.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include <nlohmann/json.hpp>

#include "engine/check.h"
#include "engine/fsutil.h"
#include "engine/json_input.h"
#include "reports/schema.h"
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

bool is_gb_suffix(const std::string& part) {
  for (const char* key : {"iterations:", "repeats:", "threads:", "min_time:", "min_warmup_time:"})
    if (part.rfind(key, 0) == 0) return true;
  return part == "manual_time" || part == "real_time" || part == "process_time";
}

}  // namespace

std::string benchmark_identity(const std::string& run_name) {
  std::vector<std::string> parts;
  std::stringstream ss(run_name);
  std::string part;
  while (std::getline(ss, part, '/')) parts.push_back(part);
  while (parts.size() > 1 && is_gb_suffix(parts.back())) parts.pop_back();
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i) out += (i ? "/" : "") + parts[i];
  return out;
}

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

  if (doc.contains(schema::iteration_times.name)) {
    const std::string field = schema::iteration_times.name;
    const json& it = doc.at(field);
    if (!it.is_object()) bad(source, "", fmt::format("field \"{}\" must be an object, got a JSON {}", field, type_name(it)));
    for (auto e = it.begin(); e != it.end(); ++e) {
      const std::string where = fmt::format("{}[\"{}\"]", field, e.key());
      if (!e.value().is_array()) bad(source, where, "expected an array of repetitions");
      std::vector<std::vector<double>> reps;
      for (const json& rep : e.value()) {
        if (!rep.is_array()) bad(source, where, "expected an array of repetitions, each an array of seconds");
        std::vector<double> times;
        for (const json& t : rep) {
          if (!t.is_number() || !(t.get<double>() > 0) || !std::isfinite(t.get<double>()))
            bad(source, where, fmt::format("every iteration time must be a positive finite number, got {}", t.dump()));
          times.push_back(t.get<double>());
        }
        if (!times.empty()) reps.push_back(std::move(times));
      }
      file.iteration_times[benchmark_identity(e.key())] = std::move(reps);
    }
  }

  if (doc.contains(schema::layout.name)) {
    const std::string field = schema::layout.name;
    const json& lay = doc.at(field);
    if (!lay.is_object()) bad(source, "", fmt::format("field \"{}\" must be an object, got a JSON {}", field, type_name(lay)));
    for (auto e = lay.begin(); e != lay.end(); ++e) {
      if (!e.value().is_object() || !e.value().contains("skip_bytes")) continue;
      const std::string where = fmt::format("{}[\"{}\"].skip_bytes", field, e.key());
      const json& sk = e.value().at("skip_bytes");
      if (!sk.is_array()) bad(source, where, "expected an array of bytes per stage");
      std::vector<double> bytes;
      for (const json& v : sk) {
        if (!v.is_number() || !(v.get<double>() >= 0) || !std::isfinite(v.get<double>()))
          bad(source, where, fmt::format("every worker's bytes must be a non-negative finite number, got {}", v.dump()));
        bytes.push_back(v.get<double>());
      }
      file.skip_bytes[benchmark_identity(e.key())] = std::move(bytes);
    }
  }

  std::map<std::tuple<std::string, std::string, int64_t>, std::size_t> seen;  // (benchmark, aggregate, repetition)
  std::map<std::string, int64_t> repetitions_of;                              // benchmark -> its repetitions
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
    // A count is a whole number a 64-bit integer holds; casting a larger double is undefined.
    auto count = [&](const char* key, bool required, int64_t fallback) -> int64_t {
      const double x = num(key, required, static_cast<double>(fallback));
      if (!(x >= 0 && x <= 0x1p62 && x == std::floor(x)))
        bad(source, where, fmt::format("field \"{}\" must be a whole number from 0 to 2^62, got {}", key, b.at(key).dump()));
      return static_cast<int64_t>(x);
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
    r.repetitions = count("repetitions", false, 1);
    r.repetition_index = count("repetition_index", false, 0);
    if (b.contains("error_occurred")) {
      const json& v = b.at("error_occurred");
      if (!v.is_boolean()) bad(source, where, fmt::format("field \"error_occurred\" must be true or false, got {}", v.dump()));
      r.error = v.get<bool>();
    }
    if (r.error) {
      r.error_message = str("error_message", false, "(no message)");
    } else if (!(r.aggregate && !b.contains("real_time"))) {  // big-O/RMS aggregates have no time
      r.iterations = count("iterations", !r.aggregate, 0);
      const double real = num("real_time", true), cpu = num("cpu_time", false, real);
      if (r.percentage) {
        r.real_s = real;
        r.cpu_s = cpu;
      } else {
        const double scale = time_unit_seconds(str("time_unit", true), source, where);
        r.real_s = real * scale;
        r.cpu_s = cpu * scale;
      }
      // A measured time is positive and finite; a zero or an overflow is a broken record, not a
      // fast benchmark. (Aggregates such as stddev may be 0.)
      const bool is_time = !r.aggregate || r.aggregate_name == "mean" || r.aggregate_name == "median";
      if (is_time && !r.percentage && !(r.real_s > 0 && std::isfinite(r.real_s)))
        bad(source, where, fmt::format("field \"real_time\" must be a positive finite time, got {}", b.at("real_time").dump()));
    }
    for (auto it = b.begin(); it != b.end(); ++it)
      if (!kKnownFields.count(it.key()) && it.value().is_number()) r.counters[it.key()] = it.value().get<double>();
    // Each repetition (and each aggregate) of a benchmark once: a copy would count as another
    // repetition and narrow every interval built from them.
    if (!r.error && !r.aggregate) {  // one of its repetitions, numbered as GB numbers them, and all alike in their count
      if (r.repetitions < 1 || r.repetition_index >= r.repetitions)
        bad(source, where, fmt::format("repetition_index {} of {} repetition(s): expected 0 to repetitions - 1",
                                       r.repetition_index, r.repetitions));
      const auto [at, fresh] = repetitions_of.emplace(benchmark_identity(r.run_name), r.repetitions);
      if (!fresh && at->second != r.repetitions)
        bad(source, where, fmt::format("{} repetition(s), where an earlier entry of the same benchmark says {}",
                                       r.repetitions, at->second));
    }
    if (!r.error) {
      const auto key = std::make_tuple(benchmark_identity(r.run_name), r.aggregate_name, r.repetition_index);
      const auto [at, fresh] = seen.emplace(key, i);
      if (!fresh)
        bad(source, where, fmt::format("repeats benchmarks[{}]: the same benchmark, {} {} given twice", at->second,
                                       r.aggregate ? "aggregate" : "repetition",
                                       r.aggregate ? r.aggregate_name : std::to_string(r.repetition_index)));
    }
    file.runs.push_back(std::move(r));
  }
  // Iteration times of at most as many repetitions as the benchmark ran: more would narrow its interval.
  for (const auto& [name, reps] : file.iteration_times) {
    const auto it = repetitions_of.find(name);
    if (it != repetitions_of.end() && static_cast<int64_t>(reps.size()) > it->second)
      bad(source, fmt::format("{}[\"{}\"]", schema::iteration_times.name, name),
          fmt::format("{} repetitions of iteration times, but the benchmark ran {}", reps.size(), it->second));
  }
  return file;
}

RunFile load_run_json(const std::string& path) { return parse_run_json(read_file(path, kResultsFileLimit, "results"), path); }

RunFile with_process_cpu_time(RunFile f) {
  for (BenchRun& r : f.runs) {
    if (r.error || r.percentage) continue;
    if (r.run_name.find("/process_time") == std::string::npos)
      throw UsageError(fmt::format("{}: benchmark \"{}\": its cpu_time is not the process's CPU time (no /process_time "
                                   "in the name); compare wall time instead",
                                   f.source, r.run_name));
    if (!r.aggregate && !(r.cpu_s > 0 && std::isfinite(r.cpu_s)))
      throw UsageError(fmt::format("{}: benchmark \"{}\": cpu_time must be a positive finite time", f.source, r.name));
    r.real_s = r.cpu_s;
  }
  f.iteration_times.clear();
  return f;
}

std::vector<double> Benchmark::samples_s() const {
  std::vector<double> all;
  for (const std::vector<double>& rep : iteration_times_s) all.insert(all.end(), rep.begin(), rep.end());
  return all.empty() ? times_s : all;
}

std::optional<double> Benchmark::median_s() const {
  const std::vector<double> all = samples_s();
  if (!all.empty()) return median(all);
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
  for (std::size_t fi = 0; fi < files.size(); ++fi) {
    const RunFile* f = files[fi];
    // Counters of GB's median (else mean) aggregate: the only ones a file written with
    // --benchmark_report_aggregates_only has.
    std::map<std::string, std::map<std::string, double>> agg_counters;
    std::map<std::string, bool> has_iterations;
    for (const BenchRun& r : f->runs) {
      Benchmark& b = find(benchmark_identity(r.run_name));
      if (r.error) {
        if (b.error_message.empty()) b.error_message = r.error_message;
        continue;
      }
      if (r.aggregate) {
        if (!r.percentage) b.aggregates[r.aggregate_name] = r.real_s;
        b.aggregate_repetitions = std::max(b.aggregate_repetitions, r.repetitions);
        if (r.aggregate_name == "median" || (r.aggregate_name == "mean" && !agg_counters.count(b.name)))
          agg_counters[b.name] = r.counters;
        continue;
      }
      has_iterations[b.name] = true;
      if (b.times_s.empty()) b.iterations = r.iterations;
      b.times_s.push_back(r.real_s);
      b.times_file.push_back(static_cast<int>(fi));
      for (const auto& [k, v] : r.counters) b.counters[k].push_back(v);
    }
    for (const auto& [name, bytes] : f->skip_bytes) find(name).skip_bytes = bytes;
    for (const auto& [name, reps] : f->iteration_times) {
      Benchmark& b = find(name);
      b.iteration_times_s.insert(b.iteration_times_s.end(), reps.begin(), reps.end());
      if (has_iterations[name]) continue;
      // Aggregates only: the repetitions' times are the means of their iterations.
      for (const std::vector<double>& rep : reps) {
        b.times_s.push_back(mean(rep));
        b.times_file.push_back(static_cast<int>(fi));
      }
      if (b.iterations == 0 && !reps.empty()) b.iterations = static_cast<int64_t>(reps.front().size());
    }
    for (const auto& [name, counters] : agg_counters) {
      if (has_iterations[name]) continue;
      Benchmark& b = find(name);
      for (const auto& [k, v] : counters) b.counters[k].push_back(v);
    }
  }
  for (Benchmark& b : out) b.error = b.times_s.empty() && b.aggregates.empty() && !b.error_message.empty();
  return out;
}

std::vector<Benchmark> collect_benchmarks(const RunFile& file) { return collect_benchmarks(std::vector<const RunFile*>{&file}); }

}  // namespace pb::reports
