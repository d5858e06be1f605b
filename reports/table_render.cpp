// The report's three renderings: markdown (printed and report.md), CSV and JSON (what
// scripts/chart.py reads).
#include <cmath>

#include <nlohmann/json.hpp>

#include "engine/check.h"
#include "reports/table.h"

namespace pb::reports {

namespace {

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

// The collective kinds with bandwidth counters (schema algbw_* / busbw_*), in column order.
constexpr const char* kKinds[] = {"all_reduce", "broadcast", "reduce", "send_recv", "all_gather", "reduce_scatter"};

std::optional<double> find(const std::map<std::string, double>& m, const std::string& k) {
  auto it = m.find(k);
  return it == m.end() ? std::nullopt : std::optional<double>(it->second);
}

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

// The device peak with its parts (tensors + workspace + runtime), or the allocators' peak alone
// for runs made before the parts were recorded.
std::string peak_cell(const Row& r) {
  if (!r.device_peak_mib) return opt(r.peak_mib_max);
  if (!r.tensor_mib || !r.workspace_mib || !r.runtime_mib) return num(*r.device_peak_mib);
  return fmt::format("{} ({} + {} + {})", num(*r.device_peak_mib), num(*r.tensor_mib), num(*r.workspace_mib),
                     num(*r.runtime_mib));
}

std::string report_markdown(const Report& rep) {
  std::string out;
  for (const Group& g : rep.groups) {
    out += fmt::format("## {}\n\n", g.title());
    out += "| strategy | devices | ms/iteration (median) | CV | samples/s | GFLOP/s | speedup vs regular x1 "
           "| scaling efficiency | peak MiB/device | compute | transfer | idle | exposed comm "
           "| bubble measured (formula) | busbw GB/s | best |\n";
    out += "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|:--|:-:|\n";
    bool within = false, other_base = false;
    for (const Row& r : g.rows) {
      if (r.error || !r.median_ms) {
        out += fmt::format("| {} | {} | error: {} | | | | | | | | | | | | | |\n", r.strategy, r.devices,
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
      std::string bubble = "-";
      if (r.measured_bubble || r.bubble)
        bubble = r.measured_bubble ? pct(r.measured_bubble) + (r.bubble ? " (" + pct(r.bubble) + ")" : "") : "- (" + pct(r.bubble) + ")";
      std::string bus;
      for (const auto& [kind, v] : r.busbw) bus += fmt::format("{}{} {}", bus.empty() ? "" : ", ", kind, num(v / 1e9));
      out += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", r.strategy,
                         r.devices, num(*r.median_ms), cv, opt(r.samples_per_s),
                         r.flop_per_s ? num(*r.flop_per_s / 1e9) : "-", opt(r.speedup, "x"), eff, peak_cell(r),
                         pct(r.compute_share), pct(r.transfer_share), pct(r.idle_share), pct(r.exposed_comm_share), bubble,
                         bus.empty() ? "-" : bus, r.best ? "**best**" : "");
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
      "compute_share,transfer_share,idle_share,other_share,exposed_comm_share,comm_mib_per_iteration,bubble_fraction,"
      "measured_bubble,workers_used,oversubscribed,best,error,device_peak_mib,tensor_mib,workspace_mib,runtime_mib";
  for (const char* k : kKinds) out += fmt::format(",algbw_{},busbw_{}", k, k);
  out += "\n";
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
      for (const char* k : kKinds) out += fmt::format(",{},{}", csv_num(find(r.algbw, k)), csv_num(find(r.busbw, k)));
      out += "\n";
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
      jr["compute_share"] = json_num(r.compute_share);
      jr["transfer_share"] = json_num(r.transfer_share);
      jr["idle_share"] = json_num(r.idle_share);
      jr["other_share"] = json_num(r.other_share);
      jr["exposed_comm_share"] = json_num(r.exposed_comm_share);
      jr["device_peak_mib"] = json_num(r.device_peak_mib);
      jr["tensor_mib"] = json_num(r.tensor_mib);
      jr["workspace_mib"] = json_num(r.workspace_mib);
      jr["runtime_mib"] = json_num(r.runtime_mib);
      jr["comm_mib_per_iteration"] = json_num(r.comm_mib_per_iteration);
      jr["bubble_fraction"] = json_num(r.bubble);
      jr["measured_bubble"] = json_num(r.measured_bubble);
      jr["algbw"] = r.algbw;
      jr["busbw"] = r.busbw;
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
