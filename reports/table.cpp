// Table arithmetic and its three renderings. Every derived column's formula is written next to
// the line computing it and in docs/reports.md.
#include "reports/table.h"

#include <algorithm>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/check.h"
#include "reports/stats.h"

namespace pb::reports {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

bool parse_int(const std::string& s, int64_t& out) {
  if (s.empty()) return false;
  try {
    std::size_t used = 0;
    out = std::stoll(s, &used);
    return used == s.size();
  } catch (const std::exception&) {
    return false;
  }
}

// Known strategies first, in the order of the seed's comparison; others alphabetically after.
int strategy_rank(const std::string& s) {
  static const char* order[] = {"regular", "dp", "ddp", "mp", "pipeline"};
  for (int i = 0; i < 5; ++i)
    if (s == order[i]) return i;
  return 5;
}

void merge_into(Benchmark& into, const Benchmark& from) {
  if (into.times_s.empty()) into.iterations = from.iterations;
  into.times_s.insert(into.times_s.end(), from.times_s.begin(), from.times_s.end());
  for (const auto& [k, v] : from.counters) into.counters[k].insert(into.counters[k].end(), v.begin(), v.end());
  for (const auto& [k, v] : from.aggregates) into.aggregates.emplace(k, v);
  if (into.error_message.empty()) into.error_message = from.error_message;
  into.error = into.times_s.empty() && into.aggregates.empty() && !into.error_message.empty();
}

struct GroupBuild {
  Group group;
  std::vector<Benchmark> benches;
};

// Plain numbers for tables: a few significant digits, never exponent notation for times.
std::string num(double x) {
  const double a = std::abs(x);
  if (a >= 1000) return fmt::format("{:.0f}", x);
  if (a >= 100) return fmt::format("{:.1f}", x);
  if (a >= 1) return fmt::format("{:.2f}", x);
  if (a == 0) return "0";
  return fmt::format("{:.3g}", x);
}

std::string opt(const std::optional<double>& v, const std::string& suffix = "") {
  return v ? num(*v) + suffix : "-";
}
std::string pct(const std::optional<double>& v) { return v ? fmt::format("{:.1f}%", *v * 100) : "-"; }


std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

std::string csv_num(const std::optional<double>& v) { return v ? fmt::format("{:.9g}", *v) : ""; }

nlohmann::json json_num(const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); }

}  // namespace

std::string md_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '|') out += "\\|";
    else if (c == '\n') out += ' ';
    else out += c;
  }
  return out;
}

std::optional<BenchName> parse_bench_name(const std::string& name) {
  std::vector<std::string> parts;
  std::stringstream ss(name);
  std::string part;
  while (std::getline(ss, part, '/')) parts.push_back(part);
  if (parts.size() < 4 || parts[0].empty() || parts[1].empty()) return std::nullopt;
  BenchName b;
  b.workload = parts[0];
  b.strategy = parts[1];
  bool have_devices = false, have_batch = false;
  for (std::size_t i = 2; i < parts.size(); ++i) {
    int64_t v = 0;
    if (parts[i].rfind("devices:", 0) == 0 && parse_int(parts[i].substr(8), v) && v >= 1) {
      b.devices = static_cast<int>(v);
      have_devices = true;
    } else if (parts[i].rfind("batch:", 0) == 0 && parse_int(parts[i].substr(6), v) && v >= 1) {
      b.batch = v;
      have_batch = true;
    }
  }
  if (!have_devices || !have_batch) return std::nullopt;
  return b;
}

std::string bench_name(const std::string& workload, const std::string& strategy, int devices, int64_t batch) {
  return fmt::format("{}/{}/devices:{}/batch:{}", workload, strategy, devices, batch);
}

std::string Group::title() const {
  std::string t = workload;
  if (!workload_params.empty()) t += " (" + workload_params + ")";
  t += fmt::format(": batch {} {}, {} scaling{}", batch, scaling == "strong" ? "global" : "per device", scaling,
                   scaling_assumed ? " (assumed: the run did not record it)" : "");
  if (!precision.empty()) t += ", " + precision;
  if (!device_kind.empty()) t += ", " + device_kind;
  return t;
}

Report build_report(const std::vector<RunFile>& files) {
  Report report;
  std::vector<GroupBuild> builds;
  for (const RunFile& f : files) {
    report.sources.push_back(f.source);
    std::string scaling = f.context_value("scaling");
    const bool assumed = scaling.empty();
    if (assumed) scaling = "weak";
    if (scaling != "weak" && scaling != "strong")
      throw UsageError(fmt::format("{}: context \"scaling\" must be weak or strong, got \"{}\"", f.source, scaling));
    const double fwd_flops = [&] {
      try {
        return std::stod(f.context_value("forward_flops_per_sample", "0"));
      } catch (const std::exception&) {
        return 0.0;
      }
    }();
    for (Benchmark& b : collect_benchmarks(f)) {
      const auto parsed = parse_bench_name(b.name);
      if (!parsed)
        throw UsageError(fmt::format(
            "{}: benchmark \"{}\" is not a parbench benchmark (expected workload/strategy/devices:N/batch:B); "
            "use 'parbench compare' for other Google Benchmark files",
            f.source, b.name));
      GroupBuild* g = nullptr;
      for (GroupBuild& c : builds)
        if (c.group.workload == parsed->workload && c.group.scaling == scaling && c.group.batch == parsed->batch &&
            c.group.precision == f.context_value("precision") && c.group.device_kind == f.context_value("device_kind"))
          g = &c;
      if (!g) {
        builds.emplace_back();
        g = &builds.back();
        g->group.workload = parsed->workload;
        g->group.scaling = scaling;
        g->group.scaling_assumed = assumed;
        g->group.batch = parsed->batch;
        g->group.precision = f.context_value("precision");
        g->group.device_kind = f.context_value("device_kind");
        g->group.workload_params = f.context_value("workload_params");
      }
      // Throughput needs FLOPs per sample from the file that ran it: keep it as a counter.
      if (fwd_flops > 0 && !b.counters.count("forward_flops_per_sample"))
        b.counters["forward_flops_per_sample"] = std::vector<double>(b.times_s.size(), fwd_flops);
      auto same = std::find_if(g->benches.begin(), g->benches.end(), [&](const Benchmark& o) { return o.name == b.name; });
      if (same != g->benches.end()) merge_into(*same, b);
      else g->benches.push_back(b);
    }
  }

  for (GroupBuild& gb : builds) {
    Group& g = gb.group;
    for (const Benchmark& b : gb.benches) {
      const BenchName n = *parse_bench_name(b.name);
      Row r;
      r.name = b.name;
      r.strategy = n.strategy;
      r.devices = n.devices;
      r.repetitions = b.repetitions();
      r.error = b.error;
      r.error_message = b.error_message;
      const auto med = b.median_s();
      if (!r.error && med && *med > 0) {
        r.median_ms = *med * 1e3;
        if (b.repetitions() >= 2) {
          r.cv = coefficient_of_variation(b.times_s);
        } else if (auto c = b.counter_median("iter_cv")) {
          r.cv = *c;
          r.cv_within_run = true;
        }
        // Samples per iteration: the run's own count, else what the scaling mode implies.
        double samples = static_cast<double>(g.scaling == "weak" ? n.batch * n.devices : n.batch);
        if (auto s = b.counter_median("global_batch")) samples = *s;
        r.samples_per_iteration = samples;
        r.samples_per_s = samples / *med;  // throughput = samples per iteration / seconds per iteration
        if (auto fwd = b.counter_median("forward_flops_per_sample"); fwd && *fwd > 0)
          r.flop_per_s = 3 * *fwd * samples / *med;  // backward ~ 2x forward
        else if (auto fl = b.counter_median("flop_per_s"))
          r.flop_per_s = *fl;
        if (auto p = b.counter_max("peak_bytes_max")) r.peak_mib_max = *p / kMiB;
        if (auto p = b.counter_max("peak_bytes_dev0")) r.peak_mib_dev0 = *p / kMiB;
        if (auto c = b.counter_median("comm_s_per_iter")) r.comm_share = *c / *med;
        if (auto c = b.counter_median("comm_bytes_per_iter")) r.comm_mib_per_iteration = *c / kMiB;
        if (auto bub = b.counter_median("bubble_fraction"); bub && (*bub > 0 || n.strategy == "pipeline")) r.bubble = *bub;
        if (auto w = b.counter_median("workers_used")) r.workers_used = *w;
        if (auto o = b.counter_max("oversubscribed")) r.oversubscribed = *o;
      }
      g.rows.push_back(std::move(r));
    }
    std::stable_sort(g.rows.begin(), g.rows.end(), [](const Row& a, const Row& b) {
      if (a.devices != b.devices) return a.devices < b.devices;
      const int ra = strategy_rank(a.strategy), rb = strategy_rank(b.strategy);
      if (ra != rb) return ra < rb;
      return a.strategy < b.strategy;
    });

    auto one_device = [&](const std::string& strategy) -> const Row* {
      for (const Row& r : g.rows)
        if (r.strategy == strategy && r.devices == 1 && r.samples_per_s) return &r;
      return nullptr;
    };
    const Row* base = one_device("regular");
    if (base) {
      g.baseline = base->name;
      g.ideal_base_samples_per_s = base->samples_per_s;
    }
    for (Row& r : g.rows) {
      if (!r.samples_per_s) continue;
      // Speedup: throughput over regular's on one device (under strong scaling the same as
      // T_regular(1) / T(N), the global batch being equal).
      if (base) r.speedup = *r.samples_per_s / *base->samples_per_s;
      const Row* eb = one_device(r.strategy);
      if (!eb) {
        eb = base;
        r.efficiency_from_regular = true;
      }
      if (!eb) continue;
      r.efficiency_base = eb->name;
      if (g.scaling == "weak")
        r.efficiency = *r.samples_per_s / (r.devices * *eb->samples_per_s);  // thr(N) / (N thr(1))
      else
        r.efficiency = *eb->median_ms / (r.devices * *r.median_ms);  // T(1) / (N T(N))
    }
    if (!g.ideal_base_samples_per_s)
      for (const Row& r : g.rows)
        if (r.devices == 1 && r.samples_per_s) {
          g.ideal_base_samples_per_s = r.samples_per_s;
          break;
        }
    // Best per device count: the highest throughput among the rows that ran.
    std::map<int, Row*> best;
    for (Row& r : g.rows)
      if (r.samples_per_s && (!best.count(r.devices) || *r.samples_per_s > *best[r.devices]->samples_per_s))
        best[r.devices] = &r;
    for (auto& [d, r] : best) r->best = true;
    report.groups.push_back(std::move(g));
  }
  return report;
}

std::string report_markdown(const Report& rep) {
  std::string out;
  for (const Group& g : rep.groups) {
    out += fmt::format("## {}\n\n", g.title());
    out += "| strategy | devices | ms/iteration (median) | CV | samples/s | GFLOP/s | speedup vs regular x1 "
           "| scaling efficiency | peak MiB/device | comm share | bubble | best |\n";
    out += "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|:-:|\n";
    bool within = false, other_base = false;
    for (const Row& r : g.rows) {
      if (r.error || !r.median_ms) {
        out += fmt::format("| {} | {} | error: {} | | | | | | | | | |\n", r.strategy, r.devices,
                           md_escape(r.error_message.empty() ? "no measurement" : r.error_message));
        continue;
      }
      std::string cv = "-";
      if (r.cv) {
        cv = fmt::format("{:.1f}%{}", *r.cv * 100, r.cv_within_run ? "*" : "");
        within |= r.cv_within_run;
      }
      std::string eff = pct(r.efficiency);
      if (r.efficiency && r.efficiency_from_regular) {
        eff += " +";
        other_base = true;
      }
      out += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", r.strategy, r.devices,
                         num(*r.median_ms), cv, opt(r.samples_per_s),
                         r.flop_per_s ? num(*r.flop_per_s / 1e9) : "-", opt(r.speedup, "x"), eff, opt(r.peak_mib_max),
                         pct(r.comm_share), pct(r.bubble), r.best ? "**best**" : "");
    }
    out += "\n";
    out += g.scaling == "weak" ? "Scaling efficiency (weak) = thr(N) / (N x thr(1))"
                               : "Scaling efficiency (strong) = T(1) / (N x T(N))";
    out += ", relative to the same strategy on one device";
    if (g.baseline.empty()) out += "; no regular run on one device, so no speedup";
    out += ". Formulas: docs/reports.md.\n";
    if (other_base) out += "+ this strategy has no one-device run: efficiency relative to regular on one device.\n";
    if (within) out += "\\* one repetition: CV over its iterations (add --benchmark_repetitions=N for CV over repetitions).\n";
    out += "\n";
  }
  if (rep.groups.empty()) out += "No benchmarks.\n";
  return out;
}

std::string report_csv(const Report& rep) {
  std::string out =
      "workload,scaling,batch,precision,device_kind,strategy,devices,repetitions,median_ms,cv,cv_over,"
      "samples_per_iteration,samples_per_s,flop_per_s,speedup,efficiency,efficiency_base,peak_mib_max,peak_mib_dev0,"
      "comm_share,comm_mib_per_iteration,bubble_fraction,workers_used,oversubscribed,best,error\n";
  for (const Group& g : rep.groups)
    for (const Row& r : g.rows) {
      const std::string cv_over = r.cv ? (r.cv_within_run ? "iterations" : "repetitions") : "";
      out += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n",
                         csv_field(g.workload), g.scaling, g.batch, csv_field(g.precision), csv_field(g.device_kind),
                         csv_field(r.strategy), r.devices, r.repetitions, csv_num(r.median_ms), csv_num(r.cv), cv_over,
                         csv_num(r.samples_per_iteration), csv_num(r.samples_per_s), csv_num(r.flop_per_s),
                         csv_num(r.speedup), csv_num(r.efficiency), csv_field(r.efficiency_base),
                         csv_num(r.peak_mib_max), csv_num(r.peak_mib_dev0), csv_num(r.comm_share),
                         csv_num(r.comm_mib_per_iteration), csv_num(r.bubble), csv_num(r.workers_used),
                         csv_num(r.oversubscribed), r.best ? 1 : 0, csv_field(r.error ? r.error_message : ""));
    }
  return out;
}

std::string report_json(const Report& rep) {
  using nlohmann::json;
  json doc;
  doc["parbench_report"] = 1;
  doc["sources"] = rep.sources;
  doc["groups"] = json::array();
  for (const Group& g : rep.groups) {
    json jg;
    jg["title"] = g.title();
    jg["workload"] = g.workload;
    jg["workload_params"] = g.workload_params;
    jg["scaling"] = g.scaling;
    jg["scaling_assumed"] = g.scaling_assumed;
    jg["batch"] = g.batch;
    jg["precision"] = g.precision;
    jg["device_kind"] = g.device_kind;
    jg["baseline"] = g.baseline;
    jg["ideal_base_samples_per_s"] = json_num(g.ideal_base_samples_per_s);
    jg["rows"] = json::array();
    for (const Row& r : g.rows) {
      json jr;
      jr["name"] = r.name;
      jr["strategy"] = r.strategy;
      jr["devices"] = r.devices;
      jr["repetitions"] = r.repetitions;
      jr["error"] = r.error ? json(r.error_message) : json(nullptr);
      jr["median_ms"] = json_num(r.median_ms);
      jr["cv"] = json_num(r.cv);
      jr["cv_over"] = r.cv ? json(r.cv_within_run ? "iterations" : "repetitions") : json(nullptr);
      jr["samples_per_iteration"] = json_num(r.samples_per_iteration);
      jr["samples_per_s"] = json_num(r.samples_per_s);
      jr["flop_per_s"] = json_num(r.flop_per_s);
      jr["speedup"] = json_num(r.speedup);
      jr["efficiency"] = json_num(r.efficiency);
      jr["efficiency_base"] = r.efficiency_base;
      jr["peak_mib_max"] = json_num(r.peak_mib_max);
      jr["peak_mib_dev0"] = json_num(r.peak_mib_dev0);
      jr["comm_share"] = json_num(r.comm_share);
      jr["comm_mib_per_iteration"] = json_num(r.comm_mib_per_iteration);
      jr["bubble_fraction"] = json_num(r.bubble);
      jr["workers_used"] = json_num(r.workers_used);
      jr["oversubscribed"] = json_num(r.oversubscribed);
      jr["best"] = r.best;
      jg["rows"].push_back(std::move(jr));
    }
    doc["groups"].push_back(std::move(jg));
  }
  return doc.dump(2) + "\n";
}

}  // namespace pb::reports
