// The tables `parbench project` prints: run's comparison table with only the columns a
// projection fills, the parts of each step, and the best strategy per device count.
#include "reports/projection_table.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

#include <fmt/format.h>

#include "engine/check.h"
#include "reports/schema.h"
#include "reports/table.h"
#include "strategies/sweep.h"

namespace pb::projection {

using nlohmann::json;

namespace {
constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kGiB = kMiB * 1024.0;
// Rows within this share of the fastest are tied: a projection's own error (docs/projection.md's
// validation: tens of percent on a shared CPU) is far larger, so it cannot rank them.
constexpr double kTie = 0.01;
bool within_tie(double fastest, double v) { return v >= fastest * (1 - kTie); }
}  // namespace

reports::Group as_report_group(const Projected& pr, const Profile& p, const Machine& m, bool family,
                               const std::string& scaled) {
  reports::Group g;
  g.workload = p.context.value("workload", std::string("profile"));
  g.workload_params = p.context.contains("workload_params") && p.context["workload_params"].is_string()
                          ? p.context["workload_params"].get<std::string>()
                          : "";
  g.scaling = pr.scaling;
  g.batch = pr.batch;
  g.precision = p.precision;
  g.device_kind = "projected on " + m.name + (scaled.empty() ? "" : ", " + scaled);
  g.distinction = family ? "fastest variant" : "";
  for (const Prediction& r : pr.rows) {  // the dtypes, as a run's title shows them
    if (r.config.reduce_dtype != "fp32") g.work[reports::schema::context::reduce_dtype.name] = r.config.reduce_dtype;
    if (r.config.param_dtype != "fp32") g.work[reports::schema::context::param_dtype.name] = r.config.param_dtype;
    if (r.config.virtual_stages != 2)  // as run records --virtual-stages
      g.work[reports::schema::context::virtual_stages.name] = std::to_string(r.config.virtual_stages);
  }
  std::map<std::string, double> one;  // label -> samples/s at one device
  double regular1 = 0, regular_t1 = 0;  // the one-device baseline's
  std::string baseline;
  for (const Prediction& r : pr.rows)
    if (r.feasible && r.config.devices == 1) {
      one[r.config.label()] = r.samples_per_s;
      if (is_baseline(r.config.strategy)) regular1 = r.samples_per_s, regular_t1 = r.step_s, baseline = r.config.strategy;
    }
  std::map<std::pair<std::string, int>, const Prediction*> keep;
  for (const Prediction& r : pr.rows) {
    if (!family) continue;
    if (!r.feasible || !r.fits) continue;
    const std::string fam = shown_with(r.config.strategy);
    auto& k = keep[{fam, r.config.devices}];
    if (!k || r.samples_per_s > k->samples_per_s) k = &r;
  }
  std::vector<char> fits;  // per row of g.rows: eligible for best
  for (const Prediction& r : pr.rows) {
    if (family && !r.feasible) continue;
    if (family) {
      const std::string fam = shown_with(r.config.strategy);
      if (keep[{fam, r.config.devices}] != &r) continue;
    }
    reports::Row row;
    row.strategy = family ? shown_with(r.config.strategy) : r.config.label();
    row.devices = r.config.devices;
    row.name = row.strategy;
    if (!r.feasible) {
      row.error = true;
      row.error_message = r.reason;
      g.rows.push_back(row);
      fits.push_back(0);
      continue;
    }
    row.repetitions = 0;
    row.median_ms = r.step_s * 1e3;
    row.samples_per_iteration = static_cast<double>(r.config.global_batch);
    row.samples_per_s = r.samples_per_s;
    row.flop_per_s = 3 * p.forward_flops() * r.config.global_batch / r.step_s;
    if (regular1 > 0) row.speedup = r.samples_per_s / regular1;
    const auto it = one.find(r.config.label());
    const double base = it != one.end() ? it->second : regular1;
    row.efficiency_from_regular = it == one.end();
    if (base > 0) {
      const double t1 = r.config.global_batch / base;  // strong: the same global batch at one device
      row.efficiency = pr.scaling == "weak" ? r.samples_per_s / (r.config.devices * base)
                                            : (it != one.end() ? t1 : regular_t1) / (r.config.devices * r.step_s);
    }
    row.peak_mib_max = r.peak_bytes / kMiB;
    // The critical worker's parts: compute, exposed transfer, idle (the bubble among them).
    row.compute_share = r.compute_s / r.step_s;
    row.exposed_comm_share = r.exposed_comm_s / r.step_s;
    row.idle_share = r.idle_s / r.step_s;
    row.comm_mib_per_iteration = r.comm_bytes / kMiB;
    g.rows.push_back(row);
    fits.push_back(r.fits ? 1 : 0);
  }
  // Best per device count: the highest throughput among the rows that fit in memory.
  std::map<int, std::size_t> best;
  for (std::size_t i = 0; i < g.rows.size(); ++i)
    if (fits[i] && (!best.count(g.rows[i].devices) || *g.rows[i].samples_per_s > *g.rows[best[g.rows[i].devices]].samples_per_s))
      best[g.rows[i].devices] = i;
  for (auto& [d, i] : best) {
    const double top = *g.rows[i].samples_per_s;
    bool tie = false;
    for (std::size_t k = 0; k < g.rows.size(); ++k)
      if (k != i && fits[k] && g.rows[k].devices == d && within_tie(top, *g.rows[k].samples_per_s)) g.rows[k].tied = tie = true;
    g.rows[i].best = !tie;
    g.rows[i].tied = tie;
  }
  if (regular1 > 0) g.ideal_base_samples_per_s = regular1;
  g.baseline = regular1 > 0 ? baseline : "";
  return g;
}

std::string parts_markdown(const Projected& pr, const Machine& m) {
  std::string out = fmt::format(
      "### Parts of the step ({} scaling, batch {} {}), projected on {}\n\n"
      "| strategy | devices | step ms | compute ms | exposed comm ms | idle / bubble ms | predicted {} | fits {:.3g} GiB |\n"
      "|---|--:|--:|--:|--:|--:|--:|:-:|\n",
      pr.scaling, pr.batch, pr.scaling == "weak" ? "per device" : "global", m.name,
      reports::schema::figure::allocated_worker_max.heading, m.memory_bytes / kGiB);
  for (const Prediction& r : pr.rows) {
    if (!r.feasible) {
      out += fmt::format("| {} | {} | not possible: {} | | | | | |\n", reports::md_escape(r.config.label()), r.config.devices,
                         reports::md_escape(r.reason));
      continue;
    }
    out += fmt::format("| {} | {} | {:.4g} | {:.4g} | {:.4g} | {:.4g} | {} | {} |\n", reports::md_escape(r.config.label()),
                       r.config.devices, r.step_s * 1e3, r.compute_s * 1e3, r.exposed_comm_s * 1e3, r.idle_s * 1e3,
                       reports::num(r.peak_bytes / kMiB), r.fits ? "yes" : "**no**");
  }
  return out + "\n";
}

std::string best_markdown(const std::vector<Projected>& all) {
  std::string out = "### Best strategy per device count (projected; only configurations that fit in memory)\n\n"
                    "| scaling | batch | devices | best | samples/s | step ms | next best | its samples/s |\n|---|--:|--:|---|--:|--:|---|--:|\n";
  for (const Projected& pr : all) {
    std::map<int, std::vector<const Prediction*>> by;
    for (const Prediction& r : pr.rows)
      if (r.feasible && r.fits) by[r.config.devices].push_back(&r);
    for (auto& [d, v] : by) {
      std::sort(v.begin(), v.end(), [](auto* a, auto* b) { return a->samples_per_s > b->samples_per_s; });
      // The strategies tied with the fastest (each by its fastest variant), and the next one outside.
      std::vector<std::string> tied = {v[0]->config.label()}, seen = {v[0]->config.strategy};
      const Prediction* second = nullptr;
      for (auto* x : v) {
        if (std::find(seen.begin(), seen.end(), x->config.strategy) != seen.end()) continue;
        seen.push_back(x->config.strategy);
        if (!within_tie(v[0]->samples_per_s, x->samples_per_s)) {
          second = x;
          break;
        }
        tied.push_back(x->config.label());
      }
      std::string best = tied[0];
      if (tied.size() > 1) {
        best = "tied: " + tied[0];
        for (std::size_t k = 1; k < std::min<std::size_t>(tied.size(), 4); ++k) best += ", " + tied[k];
        if (tied.size() > 4) best += fmt::format(" (+{} more)", tied.size() - 4);
      }
      out += fmt::format("| {} | {} | {} | {} | {:.4g} | {:.4g} | {} | {} |\n", pr.scaling, pr.batch, d, best,
                         v[0]->samples_per_s, v[0]->step_s * 1e3, second ? second->config.label() : "-",
                         second ? fmt::format("{:.4g}", second->samples_per_s) : "-");
    }
  }
  return out + "\n";
}

json prediction_json(const Prediction& r) {
  json j = {{"strategy", r.config.strategy},
            {"label", r.config.label()},
            {"options", r.config.options()},
            {"devices", r.config.devices},
            {"global_batch", r.config.global_batch},
            {"feasible", r.feasible}};
  if (!r.feasible) {
    j["reason"] = r.reason;
    return j;
  }
  j.update({{"step_s", r.step_s},
            {"compute_s", r.compute_s},
            {"exposed_comm_s", r.exposed_comm_s},
            {"idle_s", r.idle_s},
            {"peak_bytes_per_device", r.peak_bytes},
            {"fits", r.fits},
            {"comm_bytes_per_step", r.comm_bytes},
            {"samples_per_s", r.samples_per_s}});
  return j;
}


namespace {
using reports::num;
std::string pct(const std::optional<double>& v) { return v ? fmt::format("{:.1f}%", *v * 100) : "-"; }
}  // namespace

std::string projected_markdown(const reports::Report& rep) {
  std::string out;
  for (const reports::Group& g : rep.groups) {
    out += fmt::format("## Projected: {}\n\n", g.title());
    // Memory: the estimate of what the run's allocated_mib_worker_max measures (no runtime beside it).
    out += "| strategy | devices | projected ms/step | samples/s | GFLOP/s | speedup vs regular x1 | scaling efficiency "
           "| predicted " + std::string(reports::schema::figure::allocated_worker_max.heading) +
           " | compute | exposed comm | idle / bubble | comm MiB/step | best |\n"
           "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|:-:|\n";
    bool other_base = false, implausible = false, tied = false;
    for (const reports::Row& r : g.rows) {
      if (r.error || !r.median_ms) {
        out += fmt::format("| {} | {} | not possible: {} | | | | | | | | | | |\n", reports::md_escape(r.strategy), r.devices,
                           reports::md_escape(r.error_message));
        continue;
      }
      // Above N devices' worth of one: the profile's time per sample falls with the batch, which
      // a projection carries over; not a speedup to plan on.
      std::string speed = r.speedup ? num(*r.speedup) + "x" : "-", eff = pct(r.efficiency);
      if (r.speedup && *r.speedup > r.devices * (1 + 1e-9)) speed += " !", implausible = true;
      if (r.efficiency && *r.efficiency > 1 + 1e-9) eff += " !", implausible = true;
      if (r.efficiency && r.efficiency_from_regular) eff += " +", other_base = true;
      out += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", reports::md_escape(r.strategy),
                         r.devices, num(*r.median_ms), r.samples_per_s ? num(*r.samples_per_s) : "-",
                         r.flop_per_s ? num(*r.flop_per_s / 1e9) : "-", speed, eff,
                         r.peak_mib_max ? num(*r.peak_mib_max) : "-", pct(r.compute_share), pct(r.exposed_comm_share),
                         pct(r.idle_share), r.comm_mib_per_iteration ? num(*r.comm_mib_per_iteration) : "-",
                         r.best ? "**best**" : r.tied ? "tied" : "");
      tied |= r.tied;
    }
    out += "\nEvery figure projected from the profile and the machine file, none measured. ";
    out += g.scaling == "weak" ? "Scaling efficiency (weak) = thr(N) / (N x thr(1))"
                               : "Scaling efficiency (strong) = T(1) / (N x T(N))";
    out += ", relative to the same strategy on one device; compute, exposed comm and idle are shares of the busiest "
           "worker's step. Formulas: docs/projection.md.\n";
    if (other_base) out += "+ no one-device row of this strategy: efficiency relative to regular on one device.\n";
    if (tied)
      out += fmt::format("tied: within {:g}% of the fastest at that device count, closer than a projection can rank "
                         "(docs/projection.md), so no best there.\n", kTie * 100);
    if (implausible)
      out += "! above 100% efficiency, or a speedup above the device count: the profile's time per sample falls as "
             "the batch grows within its measured batches, and a device with a larger or thinner share looks faster "
             "than N times one. Not a speedup to plan on; profile larger batches to check.\n";
    out += "\n";
  }
  return out;
}

}  // namespace pb::projection
