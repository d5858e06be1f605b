// project --combine: validations written by --validate --out pooled; the validation report
// (table, errors, --out files) that --validate and --combine print.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>

#include <fmt/ranges.h>

#include "bench/cli.h"
#include "bench/project.h"
#include "engine/check.h"
#include "engine/fsutil.h"
#include "reports/gbjson.h"
#include "reports/stats.h"
#include "reports/table.h"

namespace pb {

namespace pj = projection;
using nlohmann::json;

// The table, the mean and worst error, the one-device spread; --out PREFIX.md/.json. `json_extra`
// joins the JSON's top level.
void report_validation(const Flags& f, std::string out, const std::vector<Checked>& got, const std::string& measured_note,
                       const std::string& tail, json json_extra) {
  std::vector<double> errs;
  json rows = json::array();
  double lo = 0, hi = 0;
  for (const Checked& g : got) {
    // The run's own repeatability: on one device regular, dp, ddp and mp do the same arithmetic.
    if (const auto n = reports::parse_bench_name(g.name);
        n && n->devices == 1 && (n->strategy == "regular" || n->strategy == "dp" || n->strategy == "ddp" || n->strategy == "mp")) {
      lo = lo > 0 ? std::min(lo, g.measured_s) : g.measured_s;
      hi = std::max(hi, g.measured_s);
    }
    if (!g.feasible) {
      out += fmt::format("| {} | {} | {:.4g} | not modelled: {} | | | | |\n", g.name, g.threads, g.measured_s * 1e3, g.reason);
      continue;
    }
    const double err = (g.predicted_s - g.measured_s) / g.measured_s;
    out += fmt::format("| {} | {} | {:.4g} | {:.4g} | {} | {:.4g} | {:.4g} | {:.4g} |\n", g.name, g.threads, g.measured_s * 1e3,
                       g.predicted_s * 1e3, g.anchor ? std::string("anchor") : fmt::format("{:+.1f}%", err * 100),
                       g.compute_s * 1e3, g.exposed_comm_s * 1e3, g.idle_s * 1e3);
    if (g.anchor) continue;
    errs.push_back(std::abs(err));
    rows.push_back({{"name", g.name}, {"threads", g.threads}, {"measured_s", g.measured_s}, {"measured_times_s", g.times},
                    {"predicted_s", g.predicted_s}, {"error", err}, {"compute_s", g.compute_s},
                    {"exposed_comm_s", g.exposed_comm_s}, {"idle_s", g.idle_s}});
  }
  double mean = 0, worst = 0;
  for (double e : errs) mean += e / errs.size(), worst = std::max(worst, e);
  out += fmt::format("\nMean absolute error {:.1f}%, worst {:.1f}% over {} configuration(s). "
                     "Error = (predicted - measured) / measured; {}.\n",
                     mean * 100, worst * 100, errs.size(), measured_note);
  const double spread = lo > 0 ? hi / lo - 1 : 0;
  if (spread > 0)
    out += fmt::format("Repeatability: regular, dp, ddp and mp on one device (the same arithmetic) measured {:.4g} to {:.4g} ms, "
                       "{:.1f}% apart; errors of that size are within the measurement's own spread.\n",
                       lo * 1e3, hi * 1e3, spread * 100);
  out += tail;
  std::fputs(out.c_str(), stdout);
  if (f.has("out")) {
    const std::string prefix = f.str("out");
    make_dirs(std::filesystem::path(prefix).parent_path().string());
    json doc = {{"parbench_validation", 1}};
    doc.update(json_extra);
    doc.update({{"mean_abs_error", mean}, {"worst_abs_error", worst}, {"one_device_spread", spread}, {"rows", rows}});
    write_file_atomic(prefix + ".md", out);
    write_file_atomic(prefix + ".json", doc.dump(2) + "\n");
    fmt::print(stderr, "parbench project: wrote {0}.md, {0}.json\n", prefix);
  }
}

// --combine: several validations, each a run and the profile timed right after it, pooled. A
// machine whose speed wanders touches each round's run and profile alike; pooling averages the
// wandering out of both. Each round is a pair, and the error is the median of the pairs':
// predicted = measured x the median over the rounds of predicted / measured, measured = the median
// of the rounds' measured times. A round whose run and profile fell in different speed states of
// the machine (seconds to minutes long) is off either way, and the median leaves it out, where
// pooling runs and profiles apart would set one spell's run against another's profile.
int project_combine(const Flags& f) {
  const std::vector<std::string> paths = split_list(f.str("combine"));
  if (paths.size() < 2) throw UsageError(fmt::format("--combine expects two or more validation JSON files (written by --validate --out), got '{}'", f.str("combine")));
  std::vector<pj::Validation> vs;
  for (const std::string& p : paths) vs.push_back(pj::load_validation(p));
  std::vector<std::string> order;
  std::map<std::string, std::vector<const pj::ValidationRow*>> by_name;
  for (const pj::Validation& v : vs) {
    std::set<std::string> seen;
    for (const pj::ValidationRow& r : v.rows) {
      if (!seen.insert(r.name).second) throw UsageError(fmt::format("{}: configuration \"{}\" appears twice", v.source, r.name));
      if (by_name[r.name].empty()) order.push_back(r.name);
      by_name[r.name].push_back(&r);
    }
  }
  std::vector<Checked> checked;
  std::vector<std::string> partial;
  for (const std::string& name : order) {
    const auto& rs = by_name.at(name);
    if (rs.size() < vs.size()) partial.push_back(fmt::format("{} ({} of {})", name, rs.size(), vs.size()));
    Checked k;
    k.name = name;
    k.threads = rs.front()->threads;
    std::vector<double> measured;
    for (const pj::ValidationRow* r : rs) {
      k.times.insert(k.times.end(), r->measured_times_s.begin(), r->measured_times_s.end());
      measured.push_back(r->measured_s);
    }
    k.measured_s = reports::median(measured);
    // The pooled measured time x the median over the rounds of each one's `part` / measured.
    auto paired = [&](double pj::ValidationRow::*part) {
      std::vector<double> ratio;
      for (const pj::ValidationRow* r : rs) ratio.push_back(r->*part / r->measured_s);
      return k.measured_s * reports::median(std::move(ratio));
    };
    k.predicted_s = paired(&pj::ValidationRow::predicted_s);
    k.compute_s = paired(&pj::ValidationRow::compute_s);
    k.exposed_comm_s = paired(&pj::ValidationRow::exposed_comm_s);
    k.idle_s = paired(&pj::ValidationRow::idle_s);
    checked.push_back(std::move(k));
  }
  std::string out = fmt::format(
      "## Validation pooled from {} rounds (each a run and the profile timed right after it)\n\n{}\n\n"
      "| configuration | threads/worker | measured ms | predicted ms | error | compute ms | exposed comm ms | idle ms |\n"
      "|---|--:|--:|--:|--:|--:|--:|--:|\n",
      vs.size(), fmt::join(paths, ", "));
  const std::string tail =
      partial.empty() ? "" : fmt::format("Not in every round (pooled from those it is in): {}.\n", fmt::join(partial, "; "));
  report_validation(f, out, checked,
                    "measured = the median of the rounds' measured times, predicted = measured x the median of the "
                    "rounds' predicted / measured (each round a run and the profile timed beside it; parts likewise)",
                    tail, {{"combined", paths}, {"rounds", vs.size()}});
  return 0;
}

}  // namespace pb
