// The report's three renderings: markdown (printed and report.md), CSV and JSON (what
// scripts/chart.py reads).
#include <cmath>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "engine/check.h"
#include "reports/schema.h"
#include "reports/table.h"

namespace pb::reports {

std::string num(double x) {
  const double a = std::abs(x);
  if (a >= 1000) return fmt::format("{:.0f}", x);
  if (a >= 100) return fmt::format("{:.1f}", x);
  if (a >= 1) return fmt::format("{:.2f}", x);
  if (a == 0) return "0";
  return fmt::format("{:.3g}", x);
}

std::string mfu_text(const std::optional<double>& mfu) {
  if (!mfu) return "-";
  // At most 5 characters below 10000%: the console line's column is 6 wide.
  const double pct = *mfu * 100;
  if (pct >= 10) return fmt::format("{:.0f}%", pct);
  if (pct >= 0.1 || pct == 0) return fmt::format("{:.1f}%", pct);
  return "<0.1%";
}

namespace {

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

// The collective kinds with bandwidth counters (schema algbw_* / busbw_*), in column order.
constexpr const char* kKinds[] = {"all_reduce", "broadcast", "reduce", "send_recv", "all_gather", "reduce_scatter"};

std::optional<double> find(const std::map<std::string, double>& m, const std::string& k) {
  auto it = m.find(k);
  return it == m.end() ? std::nullopt : std::optional<double>(it->second);
}

}  // namespace

static std::string spread_table(const Group& g);  // below report_markdown

std::string md_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '|') out += "\\|";
    else if (c == '\n') out += ' ';
    else out += c;
  }
  return out;
}

// The device peak with its parts (tensors + workspace + runtime), or the allocators' peak alone
// for runs made before the parts were recorded.
std::string peak_cell(const Row& r) {
  if (!r.device_peak_mib) return opt(r.peak_mib_max);
  if (!r.tensor_mib || !r.workspace_mib || !r.runtime_mib) return num(*r.device_peak_mib);
  return fmt::format("{} ({} + {} + {})", num(*r.device_peak_mib), num(*r.tensor_mib), num(*r.workspace_mib),
                     num(*r.runtime_mib));
}

// Predicted against measured memory, per row that has both (runs that recorded the estimate).
std::string memory_table(const Group& g) {
  namespace fig = schema::figure;
  std::string out;
  for (const Row& r : g.rows) {
    if (!r.predicted_mib || !r.allocated_mib || *r.allocated_mib <= 0) continue;
    if (out.empty())
      out = fmt::format("Memory, predicted before each run against measured:\n\n| strategy | devices | {} | {} | {} |\n"
                        "|---|--:|--:|--:|--:|\n", fig::predicted.heading, fig::allocated.heading, fig::predicted_error.heading);
    out += fmt::format("| {} | {} | {} | {} | {:+.1f}% |\n", r.strategy, r.devices, num(*r.predicted_mib),
                       num(*r.allocated_mib), (*r.predicted_mib / *r.allocated_mib - 1) * 100);
  }
  if (!out.empty())
    out += fmt::format("\n{}: the memory the plan it ran names (plan/memory.h), every worker's tensors and workspace together; "
                       "{}: the workers' allocator peaks, summed; {} = predicted / allocated - 1.\n\n",
                       fig::predicted.heading, fig::allocated.heading, fig::predicted_error.heading);
  return out;
}

// Per worker, the skips it sends (a net with skips cut into stages; a worker of a chunked schedule
// holds several), beside all the row sends.
std::string skip_table(const Group& g) {
  std::string out;
  for (const Row& r : g.rows) {
    if (r.stage_skip_mib.empty()) continue;
    if (out.empty()) out = "Skip traffic between stages, MiB per iteration:\n\n| strategy | devices | per worker | skips | all sent |\n|---|--:|:--|--:|--:|\n";
    double all = 0;
    std::vector<std::string> cells;
    for (std::size_t s = 0; s < r.stage_skip_mib.size(); ++s) all += r.stage_skip_mib[s], cells.push_back(fmt::format("{}: {}", s, num(r.stage_skip_mib[s])));
    out += fmt::format("| {} | {} | {} | {} | {} |\n", r.strategy, r.devices, fmt::join(cells, ", "), num(all), opt(r.comm_mib_per_iteration));
  }
  if (!out.empty())
    out += "\nSkips, per worker (its stage; under pipeline-interleaved and pipeline-zbv its stages together): what a stage sends besides its output to the next stage and the input gradient to the one before -- "
           "values later stages read (a U-Net's encoder features, a residual's input) and their gradients (docs/architecture.md).\n\n";
  return out;
}

std::string report_markdown(const Report& rep) {
  std::string out;
  for (const Group& g : rep.groups) {
    out += fmt::format("## {}\n\n", g.title());
    out += fmt::format("| strategy | devices | ms/iteration (median) | CV | {} | samples/s | GFLOP/s | MFU | speedup vs regular x1 "
                       "| scaling efficiency | {} | compute | transfer | idle | exposed comm "
                       "| bubble measured (formula) | busbw GB/s | best |\n",
                       schema::figure::threads.heading, schema::figure::device_peak.heading);
    out += "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|:--|:-:|\n";
    bool within = false, other_base = false, tied = false;
    std::vector<std::string> implausible;
    for (const Row& r : g.rows) {
      if (r.error || !r.median_ms) {
        out += fmt::format("| {} | {} | error: {} | | | | | | | | | | | | | | | |\n", r.strategy, r.devices,
                           md_escape(r.error_message.empty() ? "no measurement" : r.error_message));
        continue;
      }
      const std::string mark = r.implausible.empty() ? "" : " !";
      if (!r.implausible.empty()) implausible.push_back(fmt::format("{} x{}: {}", r.strategy, r.devices, r.implausible));
      tied |= r.tied;
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
      std::string bubble = "-";
      if (r.measured_bubble || r.bubble)
        bubble = r.measured_bubble ? pct(r.measured_bubble) + (r.bubble ? " (" + pct(r.bubble) + ")" : "") : "- (" + pct(r.bubble) + ")";
      std::string bus;
      for (const auto& [kind, v] : r.busbw) bus += fmt::format("{}{} {}", bus.empty() ? "" : ", ", kind, num(v / 1e9));
      const bool speedup_bad = r.speedup && *r.speedup > r.devices, eff_bad = r.efficiency && *r.efficiency > 1;
      out += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                         r.strategy, r.devices, num(*r.median_ms), cv, r.threads ? fmt::format("{:.0f}", *r.threads) : "-",
                         opt(r.samples_per_s), r.flop_per_s ? num(*r.flop_per_s / 1e9) : "-", mfu_text(r.mfu),
                         opt(r.speedup, "x") + (speedup_bad ? mark : ""), eff + (eff_bad ? mark : ""), peak_cell(r),
                         pct(r.compute_share), pct(r.transfer_share), pct(r.idle_share), pct(r.exposed_comm_share), bubble,
                         bus.empty() ? "-" : bus, r.best ? "**best**" : r.tied ? "tied" : "");
    }
    out += "\n";
    if (!implausible.empty())
      out += fmt::format("! implausible: N devices give at most N times one device's throughput (speedup N, efficiency "
                         "100%). {}. Rerun with more --warmup and --iterations, or --benchmark_repetitions=N.\n",
                         fmt::join(implausible, "; "));
    if (tied)
      out += "tied: within the measurement's spread (the two rows' CVs added) of the fastest at that device count, so "
             "no best there; more --iterations or --benchmark_repetitions=N may separate them.\n";
    out += g.scaling == "weak" ? "Scaling efficiency (weak) = thr(N) / (N x thr(1))"
                               : "Scaling efficiency (strong) = T(1) / (N x T(N))";
    out += ", relative to the same strategy on one device";
    if (g.baseline.empty()) out += "; no regular run on one device, so no speedup";
    out += ". Formulas: docs/reports.md.\n";
    if (other_base) out += "+ this strategy has no one-device run: efficiency relative to regular on one device.\n";
    if (within) out += "\\* one repetition: CV over its iterations (add --benchmark_repetitions=N for CV over repetitions).\n";
    out += spread_table(g);
    out += "\n" + memory_table(g);
    out += skip_table(g);
  }
  if (rep.groups.empty()) out += "No benchmarks.\n";
  return out;
}

// (predicted - allocated) / allocated, where both were recorded.
std::optional<double> predicted_error(const Row& r) {
  if (!r.predicted_mib || !r.allocated_mib || *r.allocated_mib <= 0) return std::nullopt;
  return *r.predicted_mib / *r.allocated_mib - 1;
}

// Spread and stragglers (reports/straggler.h) of the multi-worker rows.
static std::string spread_table(const Group& g) {
  std::string rows;
  for (const Row& r : g.rows)
    if (r.devices > 1 && !r.error && r.iter_p50_ms)
      rows += fmt::format("| {} | {} | {} | {} | {} | {} |\n", r.strategy, r.devices, num(*r.iter_p50_ms), opt(r.iter_p99_ms),
                          r.straggler_ratio ? fmt::format("{:.2f}", *r.straggler_ratio) : "-",
                          r.straggler.empty() ? "none" : "**" + md_escape(r.straggler) + "**");
  if (rows.empty()) return "";
  return "Spread and stragglers:\n\n| strategy | devices | p50 ms | p99 ms | slowest compute / median | straggler |\n"
         "|---|--:|--:|--:|--:|:--|\n" + rows +
         "\np50, p99: of the iteration times. A straggler: a worker whose median compute time per iteration is more "
         "than 10% above the median worker's and by more than its own iterations' spread (docs/reports.md).\n\n";
}

std::string report_csv(const Report& rep) {
  namespace fig = schema::figure;
  std::string out =
      "workload,scaling,batch,precision,device_kind,strategy,devices,repetitions,median_ms,cv,cv_over," +
      fmt::format("samples_per_iteration,samples_per_s,flop_per_s,speedup,efficiency,efficiency_base,{},{},",
                  fig::allocated_worker_max.name, fig::allocated_worker0.name) +
      "compute_share,transfer_share,idle_share,other_share,exposed_comm_share,comm_mib_per_iteration,bubble_fraction,"
      "measured_bubble,workers_used,oversubscribed,best,error," +
      fmt::format("{},tensor_mib,workspace_mib,runtime_mib,{},{},{},{},tied,implausible", fig::device_peak.name,
                  fig::threads.name, fig::predicted.name, fig::allocated.name, fig::predicted_error.name);
  for (const char* k : kKinds) out += fmt::format(",algbw_{},busbw_{}", k, k);
  out += ",mfu,warmup_s";
  out += ",iter_p50_ms,iter_p99_ms,straggler_ratio,straggler";  // spread and stragglers
  out += fmt::format(",{},{},{}\n", fig::benchmark.name, fig::workload_params.name, fig::run.name);
  for (const Group& g : rep.groups)
    for (const Row& r : g.rows) {
      const std::string cv_over = r.cv ? (r.cv_within_run ? "iterations" : "repetitions") : "";
      out += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},", csv_field(g.workload), g.scaling,
                         g.batch, csv_field(g.precision), csv_field(g.device_kind), csv_field(r.strategy), r.devices,
                         r.repetitions, csv_num(r.median_ms), csv_num(r.cv), cv_over, csv_num(r.samples_per_iteration),
                         csv_num(r.samples_per_s), csv_num(r.flop_per_s), csv_num(r.speedup), csv_num(r.efficiency),
                         csv_field(r.efficiency_base), csv_num(r.peak_mib_max), csv_num(r.peak_mib_dev0));
      out += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{}", csv_num(r.compute_share), csv_num(r.transfer_share),
                         csv_num(r.idle_share), csv_num(r.other_share), csv_num(r.exposed_comm_share),
                         csv_num(r.comm_mib_per_iteration), csv_num(r.bubble), csv_num(r.measured_bubble),
                         csv_num(r.workers_used), csv_num(r.oversubscribed), r.best ? 1 : 0,
                         csv_field(r.error ? r.error_message : ""));
      out += fmt::format(",{},{},{},{}", csv_num(r.device_peak_mib), csv_num(r.tensor_mib), csv_num(r.workspace_mib),
                         csv_num(r.runtime_mib));
      out += fmt::format(",{},{},{},{},{},{}", csv_num(r.threads), csv_num(r.predicted_mib), csv_num(r.allocated_mib),
                         csv_num(predicted_error(r)), r.tied ? 1 : 0, csv_field(r.implausible));
      for (const char* k : kKinds) out += fmt::format(",{},{}", csv_num(find(r.algbw, k)), csv_num(find(r.busbw, k)));
      out += fmt::format(",{},{}", csv_num(r.mfu), csv_num(r.warmup_s));
      out += fmt::format(",{},{},{},{}", csv_num(r.iter_p50_ms), csv_num(r.iter_p99_ms), csv_num(r.straggler_ratio),
                         csv_field(r.straggler));
      out += fmt::format(",{},{},{}\n", csv_field(r.name), csv_field(g.workload_params),
                         csv_field(fmt::format("{}", fmt::join(r.runs, ";"))));
    }
  return out;
}

std::string report_json(const Report& rep) {
  using nlohmann::json;
  namespace fig = schema::figure;
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
      jr["name"] = r.name;  // the same as benchmark; kept for readers of older reports
      jr[fig::benchmark.name] = r.name;
      jr[fig::workload_params.name] = g.workload_params;
      jr[fig::run.name] = r.runs;
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
      jr["mfu"] = json_num(r.mfu);
      jr["warmup_s"] = json_num(r.warmup_s);
      jr["speedup"] = json_num(r.speedup);
      jr["efficiency"] = json_num(r.efficiency);
      jr["efficiency_base"] = r.efficiency_base;
      jr[fig::allocated_worker_max.name] = json_num(r.peak_mib_max);
      jr[fig::allocated_worker0.name] = json_num(r.peak_mib_dev0);
      jr[fig::threads.name] = json_num(r.threads);
      jr[fig::predicted.name] = json_num(r.predicted_mib);
      jr[fig::allocated.name] = json_num(r.allocated_mib);
      jr[fig::predicted_error.name] = json_num(predicted_error(r));
      jr["tied"] = r.tied;
      jr["implausible"] = r.implausible.empty() ? json(nullptr) : json(r.implausible);
      jr["compute_share"] = json_num(r.compute_share);
      jr["transfer_share"] = json_num(r.transfer_share);
      jr["idle_share"] = json_num(r.idle_share);
      jr["other_share"] = json_num(r.other_share);
      jr["exposed_comm_share"] = json_num(r.exposed_comm_share);
      jr[fig::device_peak.name] = json_num(r.device_peak_mib);
      jr["tensor_mib"] = json_num(r.tensor_mib);
      jr["workspace_mib"] = json_num(r.workspace_mib);
      jr["runtime_mib"] = json_num(r.runtime_mib);
      jr["comm_mib_per_iteration"] = json_num(r.comm_mib_per_iteration);
      if (!r.stage_skip_mib.empty()) jr["stage_skip_mib"] = r.stage_skip_mib;  // per stage (a net with skips)
      jr["bubble_fraction"] = json_num(r.bubble);
      jr["measured_bubble"] = json_num(r.measured_bubble);
      jr["algbw"] = r.algbw;
      jr["busbw"] = r.busbw;
      jr["workers_used"] = json_num(r.workers_used);
      jr["oversubscribed"] = json_num(r.oversubscribed);
      jr["best"] = r.best;
      // spread and stragglers
      jr["iter_p50_ms"] = json_num(r.iter_p50_ms);
      jr["iter_p99_ms"] = json_num(r.iter_p99_ms);
      jr["straggler_ratio"] = json_num(r.straggler_ratio);
      jr["straggler"] = r.straggler.empty() ? json(nullptr) : json(r.straggler);
      jg["rows"].push_back(std::move(jr));
    }
    doc["groups"].push_back(std::move(jg));
  }
  return doc.dump(2) + "\n";
}

}  // namespace pb::reports
