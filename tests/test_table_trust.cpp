// The figures people act on in the run table: a speedup above N or an efficiency above 100% is
// marked implausible with the reason, "best" only where the winner is ahead by more than the
// spread (else the rows are tied), threads per worker and predicted against measured memory in
// every row, and one name per figure (reports/schema.h) in the table, CSV and JSON.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "reports/gbjson.h"
#include "reports/schema.h"
#include "reports/table.h"

namespace pb::reports {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

struct Bench {
  std::string name;
  double ms;
  std::map<std::string, double> counters;
};

// One repetition per benchmark, as `parbench run` writes it by default.
RunFile run_file(const std::vector<Bench>& benches) {
  json doc;
  doc["context"] = {{"date", "2026-01-01T00:00:00+00:00"}, {"num_cpus", 2},       {"scaling", "weak"},
                    {"precision", "fp32"},                 {"device_kind", "cpu"}, {"strategy_order", "regular,dp,ddp,mp,tp"}};
  doc["benchmarks"] = json::array();
  int family = 0;
  for (const Bench& b : benches) {
    json j = {{"name", b.name},      {"family_index", family++}, {"per_family_instance_index", 0},
              {"run_name", b.name},  {"run_type", "iteration"},  {"repetitions", 1},
              {"repetition_index", 0}, {"threads", 1},           {"iterations", 10},
              {"real_time", b.ms},   {"cpu_time", b.ms},         {"time_unit", "ms"}};
    for (const auto& [k, v] : b.counters) j[k] = v;
    doc["benchmarks"].push_back(j);
  }
  return parse_run_json(doc.dump(), "synthetic.json");
}

const Row& row(const Group& g, const std::string& strategy, int devices) {
  for (const Row& r : g.rows)
    if (r.strategy == strategy && r.devices == devices) return r;
  throw std::runtime_error("no row " + strategy);
}

TEST(TableTrust, SpeedupAboveNAndEfficiencyAbove100AreMarkedWithTheReason) {
  // The cold start: regular x1 3.81 ms, dp x1 1.28 ms for the same work.
  const Report rep = build_report({run_file({
      {"net/regular/devices:1/batch:4", 3.81, {{"global_batch", 4}, {"iter_cv", 0.02}}},
      {"net/dp/devices:1/batch:4", 1.28, {{"global_batch", 4}, {"iter_cv", 0.02}}},
      {"net/dp/devices:2/batch:4", 2.00, {{"global_batch", 8}, {"iter_cv", 0.02}}},
      {"net/ddp/devices:2/batch:4", 4.00, {{"global_batch", 8}, {"iter_cv", 0.02}}},
  })});
  const Group& g = rep.groups.at(0);
  EXPECT_THAT(row(g, "dp", 1).implausible, HasSubstr("speedup 2.98x on 1 device(s) is above 1x"));
  EXPECT_THAT(row(g, "dp", 1).implausible, HasSubstr("beyond the two rows' spread"));
  EXPECT_THAT(row(g, "dp", 2).implausible, HasSubstr("speedup 3.81x on 2 device(s) is above 2x"));
  EXPECT_THAT(row(g, "dp", 2).implausible, Not(HasSubstr("efficiency")));  // 1.28 / 2.00 x 2 / 2 = 64%
  EXPECT_EQ(row(g, "regular", 1).implausible, "");
  EXPECT_EQ(row(g, "ddp", 2).implausible, "");  // no ddp x1: efficiency 95% of regular's
  const std::string md = report_markdown(rep);
  EXPECT_THAT(md, HasSubstr("| 2.98x ! |"));
  EXPECT_THAT(md, HasSubstr("! implausible: N devices give at most N times"));
  EXPECT_THAT(md, HasSubstr("dp x1: speedup 2.98x"));

  // Efficiency above 100% against the strategy's own one-device row, within the noise.
  const Report eff = build_report({run_file({
      {"net/regular/devices:1/batch:4", 1.0, {{"global_batch", 4}, {"iter_cv", 0.01}}},
      {"net/ddp/devices:1/batch:4", 1.02, {{"global_batch", 4}, {"iter_cv", 0.03}}},
      {"net/ddp/devices:2/batch:4", 1.01, {{"global_batch", 8}, {"iter_cv", 0.03}}},
  })});
  const Row& d2 = row(eff.groups.at(0), "ddp", 2);
  EXPECT_THAT(d2.implausible, HasSubstr("efficiency 101.0% is above 100%"));
  EXPECT_THAT(d2.implausible, HasSubstr("within the two rows' spread, 6.0%: noise"));
  EXPECT_THAT(report_markdown(eff), HasSubstr("101.0% !"));
}

TEST(TableTrust, BestOnlyBeyondTheSpreadOtherwiseTied) {
  const Report rep = build_report({run_file({
      {"net/regular/devices:1/batch:4", 10.0, {{"global_batch", 4}, {"iter_cv", 0.05}}},
      // At N = 2: dp and ddp 4% apart with CVs of 3% each (within 6%), tp far behind.
      {"net/dp/devices:2/batch:4", 10.0, {{"global_batch", 8}, {"iter_cv", 0.03}}},
      {"net/ddp/devices:2/batch:4", 10.4, {{"global_batch", 8}, {"iter_cv", 0.03}}},
      {"net/tp/devices:2/batch:4", 20.0, {{"global_batch", 8}, {"iter_cv", 0.03}}},
      // At N = 4: dp 20% ahead of ddp with 2% CVs: a winner.
      {"net/dp/devices:4/batch:4", 10.0, {{"global_batch", 16}, {"iter_cv", 0.02}}},
      {"net/ddp/devices:4/batch:4", 12.0, {{"global_batch", 16}, {"iter_cv", 0.02}}},
  })});
  const Group& g = rep.groups.at(0);
  EXPECT_TRUE(row(g, "regular", 1).best);  // the only row there
  EXPECT_FALSE(row(g, "dp", 2).best);
  EXPECT_FALSE(row(g, "ddp", 2).best);
  EXPECT_TRUE(row(g, "dp", 2).tied);
  EXPECT_TRUE(row(g, "ddp", 2).tied);
  EXPECT_FALSE(row(g, "tp", 2).tied);
  EXPECT_TRUE(row(g, "dp", 4).best);
  EXPECT_FALSE(row(g, "ddp", 4).tied);
  const std::string md = report_markdown(rep);
  EXPECT_THAT(md, HasSubstr("| tied |"));
  EXPECT_THAT(md, HasSubstr("tied: within the measurement's spread"));
  const json js = json::parse(report_json(rep));
  int tied = 0, best = 0;
  for (const json& r : js["groups"][0]["rows"]) tied += r["tied"].get<bool>(), best += r["best"].get<bool>();
  EXPECT_EQ(tied, 2);
  EXPECT_EQ(best, 2);
}

TEST(TableTrust, ThreadsAndPredictedAgainstMeasuredMemoryInEveryRow) {
  namespace c = schema::counter;
  const double MiB = schema::kMiB;
  const Report rep = build_report({run_file({
      {"net/regular/devices:1/batch:4", 2.0,
       {{"global_batch", 4}, {c::worker_threads.name, 2}, {c::predicted_bytes.name, 9 * MiB}, {c::allocated_bytes.name, 10 * MiB}}},
      {"net/ddp/devices:2/batch:4", 2.0,
       {{"global_batch", 8}, {c::worker_threads.name, 1}, {c::predicted_bytes.name, 15 * MiB}, {c::allocated_bytes.name, 12 * MiB}}},
  })});
  const Group& g = rep.groups.at(0);
  EXPECT_EQ(*row(g, "regular", 1).threads, 2);
  EXPECT_EQ(*row(g, "ddp", 2).threads, 1);
  EXPECT_NEAR(*row(g, "ddp", 2).predicted_mib, 15, 1e-9);
  const std::string md = report_markdown(rep);
  EXPECT_THAT(md, HasSubstr("| threads/worker |"));
  EXPECT_THAT(md, HasSubstr("| regular | 1 | 2.00 | - | 2 |"));  // ms, CV, threads
  EXPECT_THAT(md, HasSubstr("| regular | 1 | 9.00 | 10.00 | -10.0% |"));
  EXPECT_THAT(md, HasSubstr("| ddp | 2 | 15.00 | 12.00 | +25.0% |"));
  const json js = json::parse(report_json(rep));
  EXPECT_NEAR(js["groups"][0]["rows"][1][schema::figure::predicted_error.name].get<double>(), 0.25, 1e-12);
}

TEST(TableTrust, EveryFigureHasOneNameAcrossTableCsvAndJson) {
  const Report rep = build_report({run_file({{"net/regular/devices:1/batch:4", 2.0,
                                              {{"global_batch", 4}, {"device_peak_bytes", 3 * schema::kMiB}}}})});
  const std::string md = report_markdown(rep), csv = report_csv(rep);
  const std::string header = csv.substr(0, csv.find('\n'));
  const json row0 = json::parse(report_json(rep))["groups"][0]["rows"][0];
  for (const schema::Figure& f : schema::kFigures) {
    EXPECT_THAT(header, HasSubstr(std::string(",") + f.name)) << f.name;
    EXPECT_TRUE(row0.contains(f.name)) << f.name;
  }
  EXPECT_THAT(md, HasSubstr(std::string("| ") + schema::figure::device_peak.heading + " |"));
  EXPECT_THAT(md, HasSubstr(std::string("| ") + schema::figure::threads.heading + " |"));
  // One peak: no second column that reads as the peak but holds another figure.
  EXPECT_THAT(header, Not(HasSubstr("peak_mib_max")));
  EXPECT_FALSE(row0.contains("peak_mib_max"));
}

}  // namespace
}  // namespace pb::reports
