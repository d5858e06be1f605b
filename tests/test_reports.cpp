// Report arithmetic, the comparison verdicts and the Mann-Whitney U test on synthetic Google
// Benchmark JSON with known answers (p-values checked against scipy.stats.mannwhitneyu 1.10).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/check.h"
#include "reports/compare.h"
#include "reports/gbjson.h"
#include "reports/stats.h"
#include "reports/table.h"

namespace pb::reports {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

// A GB JSON file written the way Google Benchmark writes one: per benchmark, one "iteration"
// entry per repetition (times in ms), then its aggregates when there are several.
class GbJson {
 public:
  explicit GbJson(std::map<std::string, std::string> ctx = {{"scaling", "weak"},
                                                             {"precision", "fp32"},
                                                             {"device_kind", "cpu"},
                                                             {"strategy_order", "regular,dp,ddp,mp,pipeline"}}) {
    doc_["context"] = {{"date", "2025-01-01T00:00:00+00:00"}, {"num_cpus", 2}, {"library_build_type", "release"}};
    for (const auto& [k, v] : ctx) doc_["context"][k] = v;
    doc_["benchmarks"] = json::array();
  }
  // Google Benchmark's run-setting suffix of the names that follow.
  GbJson& suffix(const std::string& s) {
    suffix_ = s;
    return *this;
  }
  // parbench's per-iteration record for a benchmark (seconds).
  GbJson& iteration_times(const std::string& name, const json& reps) {
    doc_["iteration_times_s"][name] = reps;
    return *this;
  }
  json& doc() { return doc_; }
  GbJson& add(const std::string& name, const std::vector<double>& ms, std::map<std::string, double> counters = {}) {
    const std::string run = name + suffix_;
    for (std::size_t i = 0; i < ms.size(); ++i) {
      json b = {{"name", run},        {"family_index", family_},     {"per_family_instance_index", 0},
                {"run_name", run},    {"run_type", "iteration"},     {"repetitions", ms.size()},
                {"repetition_index", i}, {"threads", 1},             {"iterations", 10},
                {"real_time", ms[i]}, {"cpu_time", ms[i] * 1.01},    {"time_unit", "ms"}};
      for (const auto& [k, v] : counters) b[k] = v;
      doc_["benchmarks"].push_back(b);
    }
    if (ms.size() > 1)
      for (const char* agg : {"mean", "median", "stddev"})
        doc_["benchmarks"].push_back({{"name", run + "_" + agg}, {"run_name", run}, {"run_type", "aggregate"},
                                      {"repetitions", ms.size()}, {"threads", 1}, {"aggregate_name", agg},
                                      {"aggregate_unit", "time"}, {"iterations", ms.size()},
                                      {"real_time", 1.0}, {"cpu_time", 1.0}, {"time_unit", "ms"}});
    ++family_;
    return *this;
  }
  GbJson& error(const std::string& name, const std::string& message) {
    const std::string run = name + suffix_;
    doc_["benchmarks"].push_back({{"name", run}, {"run_name", run}, {"run_type", "iteration"}, {"repetitions", 1},
                                  {"repetition_index", 0}, {"threads", 1}, {"error_occurred", true},
                                  {"error_message", message}, {"iterations", 0}, {"real_time", 0.0},
                                  {"cpu_time", 0.0}, {"time_unit", "ms"}});
    ++family_;
    return *this;
  }
  RunFile file(const std::string& source = "synthetic.json") const { return parse_run_json(doc_.dump(2), source); }

 private:
  json doc_;
  int family_ = 0;
  std::string suffix_ = "/iterations:10/process_time/manual_time";
};

const Row& row(const Group& g, const std::string& strategy, int devices) {
  for (const Row& r : g.rows)
    if (r.strategy == strategy && r.devices == devices) return r;
  throw std::runtime_error("no row " + strategy + " x" + std::to_string(devices));
}

// ---- statistics ---------------------------------------------------------------------------

TEST(Stats, MedianMeanCv) {
  EXPECT_DOUBLE_EQ(median({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(median({4, 1, 2, 3}), 2.5);
  EXPECT_DOUBLE_EQ(mean({9, 10, 11}), 10);
  EXPECT_DOUBLE_EQ(stddev({9, 10, 11}), 1);                    // sample stddev, n - 1
  EXPECT_DOUBLE_EQ(coefficient_of_variation({9, 10, 11}), 0.1);
  EXPECT_DOUBLE_EQ(coefficient_of_variation({5}), 0);
}

TEST(Stats, MediansOverPassesOutlastASpellOfTwoPasses) {
  // 12 points timing k + 1 each, but any call within a spell of consecutive calls times 1000 (a
  // VM's core taken away): timed in 5 passes over all the points, a spell of two passes' calls
  // anywhere leaves every median alone, and one of three passes' sets every point it spans.
  const int n = 12, passes = 5;
  for (int spell : {2 * n, 3 * n})
    for (int start = 0; start + spell <= passes * n; ++start) {
      int call = 0;
      std::vector<std::function<double()>> points;
      for (int k = 0; k < n; ++k)
        points.push_back([&call, k, start, spell] {
          const bool slow = call >= start && call < start + spell;
          ++call;
          return slow ? 1000.0 : k + 1.0;
        });
      std::vector<int> seen;
      const std::vector<double> m = medians_over_passes(points, passes, [&](int pass) { seen.push_back(pass); });
      EXPECT_EQ(call, passes * n);
      EXPECT_EQ(seen, (std::vector<int>{0, 1, 2, 3, 4}));
      ASSERT_EQ(m.size(), static_cast<size_t>(n));
      for (int k = 0; k < n; ++k) EXPECT_EQ(m[k], spell == 2 * n ? k + 1.0 : 1000.0) << "spell " << spell << " from call " << start << ", point " << k;
    }
  EXPECT_THROW(medians_over_passes({[] { return 1.0; }}, 0), std::exception);
}

TEST(MannWhitney, ExactSmallSamplesMatchScipy) {
  // scipy.stats.mannwhitneyu(x, y) (method='auto': exact, no ties, a sample of at most 8).
  auto a = mann_whitney_u({1, 2, 3}, {4, 5, 6});
  EXPECT_TRUE(a.exact);
  EXPECT_DOUBLE_EQ(a.u1, 0);
  EXPECT_DOUBLE_EQ(a.u2, 9);
  EXPECT_NEAR(a.p, 0.1, 1e-12);  // 2 / C(6, 3)
  EXPECT_NEAR(mann_whitney_u({1, 2, 3, 4, 5}, {6, 7, 8, 9, 10}).p, 0.007936507936507936, 1e-12);
  // scipy's documentation example (males vs females): U1 = 17, p = 0.1111...
  auto m = mann_whitney_u({19, 22, 16, 29, 24}, {20, 11, 17, 12});
  EXPECT_DOUBLE_EQ(m.u1, 17);
  EXPECT_NEAR(m.p, 0.1111111111111111, 1e-12);
  // Unequal sizes, 5 vs 12.
  auto u = mann_whitney_u({3.1, 4.7, 2.2, 8.9, 5.5}, {6.0, 7.2, 9.1, 10.4, 5.9, 8.0, 11.3, 6.6, 12.0, 4.0, 7.7, 9.9});
  EXPECT_TRUE(u.exact);
  EXPECT_DOUBLE_EQ(u.u1, 9);
  EXPECT_NEAR(u.p, 0.02682611506140918, 1e-12);
}

TEST(MannWhitney, NormalApproximationWithTiesMatchesScipy) {
  // Ties: normal approximation with tie correction and continuity correction.
  auto t = mann_whitney_u({1, 2, 2, 3, 4, 5, 6, 7, 8, 9}, {2, 4, 6, 8, 10, 12, 14, 16, 18, 20});
  EXPECT_FALSE(t.exact);
  EXPECT_DOUBLE_EQ(t.u1, 18.5);
  EXPECT_NEAR(t.p, 0.018795060662434297, 1e-9);
  // Both samples above 8: normal approximation.
  std::vector<double> x, y;
  for (int i = 1; i <= 10; ++i) {
    x.push_back(i);
    y.push_back(i + 0.5);
  }
  auto n = mann_whitney_u(x, y);
  EXPECT_FALSE(n.exact);
  EXPECT_DOUBLE_EQ(n.u1, 45);
  EXPECT_NEAR(n.p, 0.7337299956962472, 1e-9);
  // All equal: no evidence of a difference.
  EXPECT_DOUBLE_EQ(mann_whitney_u({1, 1, 1}, {1, 1, 1}).p, 1.0);
}

TEST(MannWhitney, SmallestPossiblePValue) {
  EXPECT_NEAR(mann_whitney_min_p(2, 2), 2.0 / 6, 1e-12);
  EXPECT_NEAR(mann_whitney_min_p(3, 3), 0.1, 1e-12);
  EXPECT_NEAR(mann_whitney_min_p(4, 4), 2.0 / 70, 1e-12);
}

// ---- report arithmetic --------------------------------------------------------------------

TEST(Report, WeakScalingSpeedupEfficiencyBestAndErrors) {
  constexpr double MiB = 1024.0 * 1024.0;
  const RunFile f = GbJson()
                        .add("great_net/regular/devices:1/batch:1", {10, 11, 9}, {{"global_batch", 1}, {"peak_bytes_max", 2 * MiB}})
                        .add("great_net/ddp/devices:1/batch:1", {12}, {{"global_batch", 1}, {"iter_cv", 0.03}})
                        .add("great_net/ddp/devices:2/batch:1", {15}, {{"global_batch", 2}, {"exposed_comm_s", 0.003}, {"transfer_share", 0.25}, {"busbw_all_reduce", 2e9}})
                        .add("great_net/ddp/devices:4/batch:1", {25}, {{"global_batch", 4}})
                        .add("great_net/pipeline/devices:2/batch:1", {20}, {{"global_batch", 2}, {"bubble_fraction", 0.2}})
                        .error("great_net/mp/devices:2/batch:1", "model has 1 layer, cannot split into 2 stages")
                        .file();
  const Report rep = build_report({f});
  ASSERT_EQ(rep.groups.size(), 1u);
  const Group& g = rep.groups[0];
  EXPECT_EQ(g.scaling, "weak");
  EXPECT_EQ(g.batch, 1);
  ASSERT_EQ(g.rows.size(), 6u);
  // Sorted by devices, then regular, dp, ddp, mp, pipeline.
  EXPECT_EQ(g.rows[0].strategy, "regular");
  EXPECT_EQ(g.rows[1].strategy, "ddp");
  EXPECT_EQ(g.rows[3].strategy, "mp");
  EXPECT_EQ(g.rows[5].devices, 4);

  const Row& reg = row(g, "regular", 1);
  EXPECT_DOUBLE_EQ(*reg.median_ms, 10);
  EXPECT_NEAR(*reg.cv, 0.1, 1e-12);
  EXPECT_FALSE(reg.cv_within_run);
  EXPECT_NEAR(*reg.samples_per_s, 100, 1e-9);
  EXPECT_NEAR(*reg.speedup, 1, 1e-12);
  EXPECT_NEAR(*reg.efficiency, 1, 1e-12);
  EXPECT_NEAR(*reg.peak_mib_max, 2, 1e-12);
  EXPECT_TRUE(reg.best);

  const Row& d1 = row(g, "ddp", 1);
  EXPECT_NEAR(*d1.cv, 0.03, 1e-12);  // one repetition: the run's own iteration CV
  EXPECT_TRUE(d1.cv_within_run);
  EXPECT_FALSE(d1.best);

  const Row& d2 = row(g, "ddp", 2);
  EXPECT_NEAR(*d2.samples_per_s, 2 / 0.015, 1e-9);
  EXPECT_NEAR(*d2.speedup, (2 / 0.015) / 100, 1e-12);
  EXPECT_NEAR(*d2.efficiency, (2 / 0.015) / (2 * (1 / 0.012)), 1e-12);  // thr(2) / (2 thr_ddp(1)) = 0.8
  EXPECT_NEAR(*d2.efficiency, 0.8, 1e-12);
  EXPECT_NEAR(*d2.exposed_comm_share, 0.2, 1e-12);  // exposed_comm_s / median time
  EXPECT_NEAR(*d2.transfer_share, 0.25, 1e-12);
  EXPECT_NEAR(d2.busbw.at("all_reduce"), 2e9, 1e-3);
  EXPECT_TRUE(d2.best);

  const Row& d4 = row(g, "ddp", 4);
  EXPECT_NEAR(*d4.speedup, 1.6, 1e-12);
  EXPECT_NEAR(*d4.efficiency, 0.48, 1e-12);
  EXPECT_TRUE(d4.best);

  const Row& p2 = row(g, "pipeline", 2);  // no one-device pipeline row: relative to regular
  EXPECT_TRUE(p2.efficiency_from_regular);
  EXPECT_NEAR(*p2.efficiency, 100.0 / (2 * 100), 1e-12);
  EXPECT_NEAR(*p2.bubble, 0.2, 1e-12);
  EXPECT_FALSE(p2.best);

  const Row& mp = row(g, "mp", 2);
  EXPECT_TRUE(mp.error);
  EXPECT_THAT(mp.error_message, HasSubstr("cannot split"));
  EXPECT_FALSE(mp.median_ms);
  EXPECT_FALSE(mp.best);

  const std::string md = report_markdown(rep);
  EXPECT_THAT(md, HasSubstr("| mp | 2 | error: model has 1 layer, cannot split into 2 stages |"));
  EXPECT_THAT(md, HasSubstr("| ddp | 2 | 15.00 |"));
  EXPECT_THAT(md, HasSubstr("**best**"));
  EXPECT_THAT(md, HasSubstr("weak scaling"));
  const std::string csv = report_csv(rep);
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 7);  // header + 6 rows
  EXPECT_THAT(csv, HasSubstr("cannot split"));
  const json js = json::parse(report_json(rep));
  ASSERT_EQ(js["groups"][0]["rows"].size(), 6u);
  EXPECT_NEAR(js["groups"][0]["ideal_base_samples_per_s"].get<double>(), 100, 1e-9);
  EXPECT_TRUE(js["groups"][0]["rows"][3]["error"].is_string());
}

TEST(Report, StrongScalingEfficiencyUsesTimes) {
  const RunFile f = GbJson({{"scaling", "strong"}, {"precision", "fp32"}})
                        .add("great_net/regular/devices:1/batch:8", {80})
                        .add("great_net/ddp/devices:1/batch:8", {84})
                        .add("great_net/ddp/devices:2/batch:8", {50})
                        .file();
  const Report rep = build_report({f});
  const Group& g = rep.groups.at(0);
  EXPECT_EQ(g.scaling, "strong");
  const Row& d2 = row(g, "ddp", 2);
  EXPECT_DOUBLE_EQ(*d2.samples_per_iteration, 8);  // the global batch, not 8 x 2
  EXPECT_NEAR(*d2.samples_per_s, 160, 1e-9);
  EXPECT_NEAR(*d2.speedup, 80.0 / 50, 1e-12);           // T_regular(1) / T(2)
  EXPECT_NEAR(*d2.efficiency, 84.0 / (2 * 50), 1e-12);  // T(1) / (N T(N)) = 0.84
  EXPECT_THAT(g.title(), HasSubstr("batch 8 global"));
}

TEST(Report, NoRegularMeansNoSpeedupAndFlopsFromContext) {
  const RunFile f = GbJson({{"scaling", "weak"}, {"forward_flops_per_sample", "1e9"}})
                        .add("linear/ddp/devices:1/batch:2", {10})
                        .add("linear/ddp/devices:2/batch:2", {10})
                        .file();
  const Report rep = build_report({f});
  const Group& g = rep.groups.at(0);
  EXPECT_TRUE(g.baseline.empty());
  EXPECT_FALSE(row(g, "ddp", 2).speedup);
  EXPECT_NEAR(*row(g, "ddp", 2).efficiency, 1.0, 1e-12);
  EXPECT_NEAR(*row(g, "ddp", 1).flop_per_s, 3 * 1e9 * 2 / 0.010, 1e-3);  // 3 x forward x samples / time
  EXPECT_THAT(report_markdown(rep), HasSubstr("no speedup"));
}

TEST(Report, SeveralFilesPoolRepetitions) {
  const RunFile a = GbJson().add("w/regular/devices:1/batch:1", {10, 12}).file("a.json");
  const RunFile b = GbJson().add("w/regular/devices:1/batch:1", {14}).file("b.json");
  const Report rep = build_report({a, b});
  EXPECT_EQ(rep.sources, (std::vector<std::string>{"a.json", "b.json"}));
  EXPECT_EQ(rep.groups.at(0).rows.at(0).repetitions, 3);
  EXPECT_DOUBLE_EQ(*rep.groups.at(0).rows.at(0).median_ms, 12);
}

TEST(Report, ForeignBenchmarkNamesAreRefused) {
  const RunFile f = GbJson().add("BM_memcpy/64", {1}).file("other.json");
  try {
    build_report({f});
    FAIL() << "expected UsageError";
  } catch (const UsageError& e) {
    EXPECT_THAT(e.what(), HasSubstr("other.json"));
    EXPECT_THAT(e.what(), HasSubstr("BM_memcpy/64"));
  }
}

TEST(Report, BenchNames) {
  auto n = parse_bench_name("great_net/image:96/width:0.5/ddp/devices:4/batch:8");
  ASSERT_TRUE(n);
  EXPECT_EQ(n->workload, "great_net");
  EXPECT_EQ(n->workload_params, (std::vector<std::string>{"image:96", "width:0.5"}));
  EXPECT_EQ(n->workload_id(), "great_net/image:96/width:0.5");
  EXPECT_EQ(n->strategy, "ddp");
  EXPECT_EQ(n->devices, 4);
  EXPECT_EQ(n->batch, 8);
  EXPECT_EQ(bench_name(*n), "great_net/image:96/width:0.5/ddp/devices:4/batch:8");
  BenchName plain;
  plain.workload = "linear";
  plain.strategy = "regular";
  plain.devices = 1;
  plain.batch = 2;
  EXPECT_EQ(bench_name(plain), "linear/regular/devices:1/batch:2");
  EXPECT_FALSE(parse_bench_name("BM_x/8"));
  EXPECT_FALSE(parse_bench_name("w/s/devices:0/batch:1"));
  EXPECT_FALSE(parse_bench_name("w/s/devices:1/batch:1/iterations:10/manual_time"));  // identities only
}

TEST(Identity, DropsGoogleBenchmarksRunSettings) {
  EXPECT_EQ(benchmark_identity("linear/ddp/devices:2/batch:1/iterations:10/process_time/manual_time"),
            "linear/ddp/devices:2/batch:1");
  EXPECT_EQ(benchmark_identity("w/s/devices:1/batch:1/iterations:7/manual_time"), "w/s/devices:1/batch:1");
  EXPECT_EQ(benchmark_identity("BM_memcpy/64/repeats:3/threads:2/real_time"), "BM_memcpy/64");
  EXPECT_EQ(benchmark_identity("BM_x/min_time:0.500/min_warmup_time:0.100"), "BM_x");
  EXPECT_EQ(benchmark_identity("BM_plain"), "BM_plain");
}

TEST(Report, GroupsByWorkloadParametersAndWorkSettings) {
  // Two image sizes: two tables, never pooled into one row.
  const RunFile big = GbJson().add("great_net/image:96/width:0.5/regular/devices:1/batch:1", {800}).file("big.json");
  const RunFile small = GbJson().add("great_net/image:16/width:0.5/regular/devices:1/batch:1", {20}).file("small.json");
  const Report rep = build_report({big, small});
  ASSERT_EQ(rep.groups.size(), 2u);
  EXPECT_DOUBLE_EQ(*rep.groups[0].rows.at(0).median_ms, 800);
  EXPECT_DOUBLE_EQ(*rep.groups[1].rows.at(0).median_ms, 20);
  EXPECT_THAT(rep.groups[0].title(), HasSubstr("image:96"));
  EXPECT_THAT(rep.groups[1].title(), HasSubstr("image:16"));
  // Same names, different bucket sizes (a context key that changes the work): two tables whose
  // titles say which is which.
  auto ctx = [](const std::string& mb) {
    return std::map<std::string, std::string>{{"scaling", "weak"}, {"precision", "fp32"}, {"bucket_mb", mb}};
  };
  const RunFile a = GbJson(ctx("25")).add("linear/ddp/devices:2/batch:1", {10}).file("a.json");
  const RunFile b = GbJson(ctx("1")).add("linear/ddp/devices:2/batch:1", {14}).file("b.json");
  const Report two = build_report({a, b});
  ASSERT_EQ(two.groups.size(), 2u);
  EXPECT_EQ(two.groups[0].rows.at(0).repetitions, 1);
  EXPECT_THAT(two.groups[0].title(), HasSubstr("bucket_mb 25"));
  EXPECT_THAT(two.groups[1].title(), HasSubstr("bucket_mb 1"));
  // Informative keys (the commit) do not split a table.
  auto commit = [](const std::string& c) {
    return std::map<std::string, std::string>{{"scaling", "weak"}, {"parbench_commit", c}};
  };
  const Report one = build_report({GbJson(commit("abc")).add("linear/ddp/devices:2/batch:1", {10}).file(),
                                   GbJson(commit("def")).add("linear/ddp/devices:2/batch:1", {12}).file()});
  ASSERT_EQ(one.groups.size(), 1u);
  EXPECT_EQ(one.groups[0].rows.at(0).repetitions, 2);
}

TEST(Report, DisplayOrderAndSpeedupBaseFromTheRunsContext) {
  // The run says which strategies come first and which is the one-device reference.
  const RunFile f = GbJson({{"scaling", "weak"}, {"strategy_order", "solo,zeta,alpha"}, {"single_device_strategies", "solo"}})
                        .add("w/alpha/devices:1/batch:1", {10})
                        .add("w/zeta/devices:1/batch:1", {10})
                        .add("w/solo/devices:1/batch:1", {20})
                        .file();
  const Report rep = build_report({f});
  const Group& g = rep.groups.at(0);
  EXPECT_EQ(g.rows[0].strategy, "solo");
  EXPECT_EQ(g.rows[1].strategy, "zeta");
  EXPECT_EQ(g.rows[2].strategy, "alpha");
  EXPECT_NEAR(*row(g, "alpha", 1).speedup, 2.0, 1e-12);
  // Without the context: order of appearance.
  const RunFile old = GbJson({{"scaling", "weak"}, {"precision", "fp32"}}).add("w/zeta/devices:1/batch:1", {10}).add("w/alpha/devices:1/batch:1", {10}).file();
  EXPECT_EQ(build_report({old}).groups.at(0).rows.at(0).strategy, "zeta");
}

TEST(Report, MedianFromIterationsWithOneRepetitionAndWithAggregatesOnly) {
  // One repetition: GB's real_time is the mean of the iterations (here 40 ms, one slow step);
  // the median comes from the recorded iterations.
  const RunFile one = GbJson()
                          .add("linear/regular/devices:1/batch:1", {40})
                          .iteration_times("linear/regular/devices:1/batch:1", {{0.010, 0.011, 0.009, 0.130, 0.040}})
                          .file();
  const Report rep_one = build_report({one});
  const Row& r = rep_one.groups.at(0).rows.at(0);
  EXPECT_NEAR(*r.median_ms, 11, 1e-9);
  // --benchmark_report_aggregates_only: no repetition entries, counters only on the aggregates.
  GbJson agg;
  agg.iteration_times("linear/ddp/devices:2/batch:1", {{0.010, 0.012}, {0.011, 0.013}, {0.020, 0.022}});
  for (const char* a : {"mean", "median", "stddev"})
    agg.doc()["benchmarks"].push_back({{"name", std::string("linear/ddp/devices:2/batch:1/iterations:2/manual_time_") + a},
                                       {"run_name", "linear/ddp/devices:2/batch:1/iterations:2/manual_time"},
                                       {"run_type", "aggregate"}, {"aggregate_name", a}, {"aggregate_unit", "time"},
                                       {"repetitions", 3}, {"iterations", 3}, {"real_time", 12.0}, {"cpu_time", 12.0},
                                       {"time_unit", "ms"}, {"global_batch", 2}, {"exposed_comm_s", 0.006}});
  const RunFile f = agg.file();
  const Report rep_agg = build_report({f});
  const Row& d = rep_agg.groups.at(0).rows.at(0);
  EXPECT_EQ(d.repetitions, 3);
  EXPECT_NEAR(*d.median_ms, 12.5, 1e-9);  // of the six iterations
  EXPECT_NEAR(*d.exposed_comm_share, 0.006 / 0.0125, 1e-9);  // counters from the median aggregate
  EXPECT_NEAR(*d.cv, coefficient_of_variation({0.011, 0.012, 0.021}), 1e-12);  // over the repetitions' means
  const Comparison c = compare_runs(f, f, {}, false);
  EXPECT_EQ(c.entries.at(0).n_baseline, 3);
  EXPECT_EQ(c.entries.at(0).n_contender, 3);
}

// ---- compare ------------------------------------------------------------------------------

const CompareEntry& entry(const Comparison& c, const std::string& prefix) {
  for (const CompareEntry& e : c.entries)
    if (e.name.rfind(prefix, 0) == 0) return e;
  throw std::runtime_error("no entry " + prefix);
}

TEST(Compare, NoChangePasses) {
  const RunFile f = GbJson().add("w/regular/devices:1/batch:1", {10, 10.2, 9.9, 10.1, 10}).file();
  const Comparison c = compare_runs(f, f, {}, false);
  ASSERT_EQ(c.entries.size(), 1u);
  EXPECT_EQ(c.entries[0].verdict, Verdict::Same);
  EXPECT_DOUBLE_EQ(*c.entries[0].ratio, 1);
  EXPECT_EQ(c.exit_code(), 0);
}

TEST(Compare, TenPercentSlowdownIsSlowerAndSignificant) {
  const RunFile base = GbJson().add("w/ddp/devices:2/batch:1", {10, 10.1, 9.9, 10.2, 9.8}).file();
  const RunFile cont = GbJson().add("w/ddp/devices:2/batch:1", {11, 11.1, 10.9, 11.2, 10.8}).file();
  const Comparison c = compare_runs(base, cont, {}, false);
  const CompareEntry& e = c.entries.at(0);
  EXPECT_EQ(e.verdict, Verdict::Slower);
  EXPECT_NEAR(*e.ratio, 1.1, 0.002);  // of the repetitions' geometric means
  ASSERT_TRUE(e.t);
  EXPECT_LT(e.t->p, 1e-4);
  EXPECT_EQ(c.exit_code(), 1);
  EXPECT_THAT(comparison_markdown(c, "a", "b"), HasSubstr("**slower**"));
  // The same change the other way is faster, and passes.
  const Comparison back = compare_runs(cont, base, {}, false);
  EXPECT_EQ(back.entries.at(0).verdict, Verdict::Faster);
  EXPECT_EQ(back.exit_code(), 0);
}

TEST(Compare, PureNoiseNeverFails) {
  // Draws from one spread (+-5%): 6 repetitions rule out a 10% slowdown, not a 5% one.
  const RunFile base = GbJson().add("w/dp/devices:2/batch:1", {10.0, 10.6, 9.5, 10.3, 9.8, 10.9}).file();
  const RunFile cont = GbJson().add("w/dp/devices:2/batch:1", {10.4, 9.6, 10.1, 10.8, 9.7, 10.2}).file();
  const Comparison c = compare_runs(base, cont, {}, false);
  EXPECT_EQ(c.entries.at(0).verdict, Verdict::Inconclusive);
  EXPECT_GT(c.entries.at(0).t->p, 0.05);
  EXPECT_EQ(c.exit_code(), kExitInconclusive);
  CompareOptions loose;
  loose.threshold = 0.1;
  EXPECT_EQ(compare_runs(base, cont, loose, false).exit_code(), 0);
}

TEST(Compare, LargeButNoisyChangeIsNotSignificant) {
  const RunFile base = GbJson().add("w/dp/devices:2/batch:1", {8, 12, 9, 13, 10}).file();
  const RunFile cont = GbJson().add("w/dp/devices:2/batch:1", {9, 13, 11, 14, 8.5}).file();  // median 11 vs 10
  const Comparison c = compare_runs(base, cont, {}, false);
  EXPECT_GT(*c.entries.at(0).ratio, 1.05);
  EXPECT_EQ(c.entries.at(0).verdict, Verdict::Inconclusive);
  EXPECT_THAT(c.entries.at(0).note, HasSubstr("neither shown nor ruled out"));
}

TEST(Compare, MissingFailsNewPasses) {
  const RunFile base = GbJson().add("w/a/devices:1/batch:1", {10}).add("w/b/devices:1/batch:1", {10}).file();
  const RunFile cont = GbJson().add("w/a/devices:1/batch:1", {10}).add("w/c/devices:1/batch:1", {10}).file();
  const Comparison c = compare_runs(base, cont, {}, false);
  EXPECT_EQ(entry(c, "w/b/").verdict, Verdict::Missing);
  EXPECT_EQ(entry(c, "w/c/").verdict, Verdict::New);
  EXPECT_EQ(c.exit_code(), 1);
  const Comparison only_new = compare_runs(GbJson().add("w/a/devices:1/batch:1", {10}).file(), cont, {}, false);
  EXPECT_EQ(only_new.exit_code(), kExitInconclusive);  // new does not gate; w/a has 1 repetition
}

TEST(Compare, FailedInContenderFails) {
  const RunFile base = GbJson().add("w/a/devices:1/batch:1", {10}).file();
  const RunFile cont = GbJson().error("w/a/devices:1/batch:1", "out of memory on cuda:0").file();
  const Comparison c = compare_runs(base, cont, {}, false);
  EXPECT_EQ(c.entries.at(0).verdict, Verdict::Failed);
  EXPECT_THAT(c.entries.at(0).note, HasSubstr("out of memory"));
  EXPECT_EQ(c.exit_code(), 1);
}

TEST(Compare, FewRepetitionsAreInconclusive) {
  // One repetition: no interval, so no verdict, whatever the ratio (1.5x or 1.02x).
  const RunFile base = GbJson().add("w/a/devices:1/batch:1", {10}).add("w/b/devices:1/batch:1", {10}).file();
  const RunFile cont = GbJson().add("w/a/devices:1/batch:1", {15}).add("w/b/devices:1/batch:1", {10.2}).file();
  const Comparison c = compare_runs(base, cont, {}, false);
  EXPECT_EQ(entry(c, "w/a/").verdict, Verdict::Inconclusive);
  EXPECT_FALSE(entry(c, "w/a/").t);
  EXPECT_NEAR(*entry(c, "w/a/").ratio, 1.5, 1e-12);
  EXPECT_THAT(entry(c, "w/a/").note, HasSubstr("1 vs 1 repetition(s)"));
  EXPECT_EQ(entry(c, "w/b/").verdict, Verdict::Inconclusive);
  EXPECT_EQ(c.exit_code(), kExitInconclusive);
  // Two repetitions a side: still too few.
  const RunFile b2 = GbJson().add("w/a/devices:1/batch:1", {10, 10.1}).file();
  const RunFile c2 = GbJson().add("w/a/devices:1/batch:1", {11, 11.1}).file();
  EXPECT_EQ(compare_runs(b2, c2, {}, false).exit_code(), kExitInconclusive);
  const RunFile b3 = GbJson().add("w/a/devices:1/batch:1", {10, 10.1, 9.9}).file();
  const RunFile c3 = GbJson().add("w/a/devices:1/batch:1", {11, 11.1, 10.9}).file();
  EXPECT_EQ(compare_runs(b3, c3, {}, false).exit_code(), 1);  // three: a verdict
}

TEST(Compare, MatchesAcrossDifferentIterationCounts) {
  const RunFile base = GbJson().suffix("/iterations:10/manual_time").add("w/a/devices:1/batch:1", {10, 10, 10, 10}).file();
  const RunFile cont = GbJson().suffix("/iterations:25/manual_time").add("w/a/devices:1/batch:1", {10, 10, 10, 10}).file();
  const Comparison c = compare_runs(base, cont, {}, false);
  ASSERT_EQ(c.entries.size(), 1u);
  EXPECT_EQ(c.entries[0].verdict, Verdict::Same);
  EXPECT_EQ(c.exit_code(), 0);
}

TEST(Compare, RefusesRunsThatMeasureDifferentWork) {
  // Each of these changes the work or the arithmetic; the error names the key and both values.
  const std::map<std::string, std::pair<std::string, std::string>> changes = {
      {"workload_params", {"image 96, width 0.5", "image 96, width 0.125"}},
      {"param_count", {"1000", "250"}},
      {"forward_flops_per_sample", {"1e9", "2e9"}},
      {"scaling", {"weak", "strong"}},
      {"micro_batches", {"min(4, global batch)", "2"}},
      {"bucket_mb", {"25", "1"}},
      {"balance", {"2,3", "3,2"}},
      {"threads_per_worker", {"auto", "1"}},
      {"PARBENCH_CONV_SEARCH", {"unset", "exhaustive"}},
      {"PARBENCH_CPU_WINOGRAD", {"unset", "0"}},
  };
  for (const auto& [key, values] : changes) {
    std::map<std::string, std::string> cb = {{"device_kind", "cpu"}, {key, values.first}};
    std::map<std::string, std::string> cc = {{"device_kind", "cpu"}, {key, values.second}};
    const RunFile base = GbJson(cb).add("w/a/devices:1/batch:1", {10}).file("base.json");
    const RunFile cont = GbJson(cc).add("w/a/devices:1/batch:1", {10}).file("cont.json");
    try {
      compare_runs(base, cont, {}, false);
      ADD_FAILURE() << key << ": expected UsageError";
    } catch (const UsageError& e) {
      EXPECT_THAT(e.what(), HasSubstr(key + ": baseline '" + values.first + "'")) << key;
      EXPECT_THAT(e.what(), HasSubstr("contender '" + values.second + "'")) << key;
    }
    EXPECT_EQ(compare_runs(base, cont, {}, true).env_diffs.size(), 1u) << key;
  }
  // Informative keys may differ.
  const RunFile a = GbJson({{"device_kind", "cpu"}, {"parbench_commit", "abc"}, {"iterations", "10"}}).add("w/a/devices:1/batch:1", {10}).file();
  const RunFile b = GbJson({{"device_kind", "cpu"}, {"parbench_commit", "def"}, {"iterations", "20"}}).add("w/a/devices:1/batch:1", {10}).file();
  EXPECT_NO_THROW(compare_runs(a, b, {}, false));
}

TEST(Compare, NonPositiveOrNonFiniteTimesAreBadInputOnEitherSide) {
  for (double bad_ms : {0.0, -1.0}) {
    GbJson g;
    g.add("w/a/devices:1/batch:1", {10, bad_ms});
    EXPECT_THROW(g.file(), UsageError) << bad_ms;
  }
  const std::string inf = R"({"benchmarks": [{"name": "w/a/devices:1/batch:1", "iterations": 1, "real_time": Infinity, "time_unit": "ms"}]})";
  EXPECT_THROW(parse_run_json(inf, "inf.json"), UsageError);
  GbJson zero_iter;
  zero_iter.add("w/a/devices:1/batch:1", {10}).iteration_times("w/a/devices:1/batch:1", {{0.01, 0.0}});
  try {
    zero_iter.file("z.json");
    FAIL() << "expected UsageError";
  } catch (const UsageError& e) {
    EXPECT_THAT(e.what(), HasSubstr("z.json"));
    EXPECT_THAT(e.what(), HasSubstr("iteration_times_s"));
  }
}

TEST(Compare, CpuTimeInsteadOfWallTime) {
  // Wall time doubled by a loaded machine, CPU time unchanged: --time cpu sees no change.
  GbJson base, cont;
  base.add("w/a/devices:1/batch:1", {10, 10, 10, 10});
  cont.add("w/a/devices:1/batch:1", {20, 20, 20, 20});
  for (json* d : {&base.doc(), &cont.doc()})
    for (json& b : (*d)["benchmarks"]) b["cpu_time"] = 30.0;
  EXPECT_EQ(compare_runs(base.file(), cont.file(), {}, false).suite.verdict, Verdict::Slower);
  const Comparison c = compare_runs(with_process_cpu_time(base.file()), with_process_cpu_time(cont.file()), {}, false);
  EXPECT_EQ(c.suite.verdict, Verdict::Same);
  EXPECT_NEAR(*c.entries.at(0).baseline_s, 0.030, 1e-12);
  // A file whose cpu_time is the main thread's only is refused.
  const RunFile old = GbJson().suffix("/iterations:10/manual_time").add("w/a/devices:1/batch:1", {10}).file("old.json");
  try {
    with_process_cpu_time(old);
    FAIL() << "expected UsageError";
  } catch (const UsageError& e) {
    EXPECT_THAT(e.what(), HasSubstr("old.json"));
    EXPECT_THAT(e.what(), HasSubstr("process_time"));
  }
}

TEST(Suite, UniformSlowdownIsCaughtWhereSingleBenchmarksAreNot) {
  // Nine benchmarks, 5 repetitions each, +-4% noise; the contender is 10% slower everywhere but
  // noisy enough that few benchmarks separate on their own.
  GbJson base, cont;
  const double noise[5] = {-0.04, 0.02, 0.0, 0.035, -0.025};
  for (int b = 0; b < 9; ++b) {
    std::vector<double> tb, tc;
    for (int r = 0; r < 5; ++r) {
      tb.push_back(10 * (1 + noise[r]));
      tc.push_back(11 * (1 + noise[(r + b) % 5] * 2.5));
    }
    base.add(fmt::format("w/s{}/devices:1/batch:1", b), tb);
    cont.add(fmt::format("w/s{}/devices:1/batch:1", b), tc);
  }
  const Comparison c = compare_runs(base.file(), cont.file(), {}, false);
  EXPECT_EQ(c.suite.benchmarks, 9);
  EXPECT_NEAR(*c.suite.ratio, 1.1, 0.01);
  EXPECT_GT(*c.suite.lo, 1.0);
  EXPECT_EQ(c.suite.verdict, Verdict::Slower);
  EXPECT_EQ(c.exit_code(), 1);
  int slower = 0;
  for (const CompareEntry& e : c.entries) slower += e.verdict == Verdict::Slower;
  EXPECT_LT(slower, 9);
  const std::string md = comparison_markdown(c, "a", "b");
  EXPECT_LT(md.find("suite of 9"), md.find("| benchmark |"));  // printed first
  EXPECT_THAT(md, HasSubstr("**slower**"));
}

TEST(Suite, VerdictRules) {
  const CompareOptions o;
  auto runs = [](std::vector<double> v) { return std::vector<std::vector<double>>{std::move(v)}; };
  // Unchanged: the interval holds 1.
  const std::vector<double> t = {10, 10.3, 9.8, 10.1, 9.9};
  SuiteVerdict same = suite_verdict({runs(t), runs(t)}, {t, t}, o);
  EXPECT_EQ(same.verdict, Verdict::Same);
  EXPECT_LE(*same.lo, 1.0);
  EXPECT_GE(*same.hi, 1.0);
  // A certain 1% slowdown, tightly measured: smaller than the threshold, passes.
  const std::vector<double> tight = {10, 10.01, 9.99, 10.005, 9.995};
  std::vector<double> tight1;
  for (double x : tight) tight1.push_back(x * 1.01);
  SuiteVerdict small = suite_verdict({runs(tight)}, {tight1}, o);
  EXPECT_GT(*small.lo, 1.0);
  EXPECT_EQ(small.verdict, Verdict::Same);
  EXPECT_THAT(small.note, HasSubstr("smaller than the threshold"));
  // 20% faster: faster.
  std::vector<double> quick;
  for (double x : t) quick.push_back(x * 0.8);
  EXPECT_EQ(suite_verdict({runs(t)}, {quick}, o).verdict, Verdict::Faster);
  // The same data twice gives the same interval (fixed seed).
  EXPECT_DOUBLE_EQ(*suite_verdict({runs(t)}, {quick}, o).lo, *suite_verdict({runs(t)}, {quick}, o).lo);
  EXPECT_EQ(suite_verdict({}, {}, o).verdict, Verdict::Skipped);
}

TEST(Suite, SeveralBaselineRunsAreOneDistribution) {
  // Three past runs whose levels drift by +-6%: against them a contender at +6% is inconclusive (a
  // 5% slowdown is neither shown nor ruled out); against the single quiet run it is a regression.
  const RunFile quiet = GbJson().add("w/a/devices:1/batch:1", {10, 10.05, 9.95, 10.02, 9.98}).file("r0.json");
  const RunFile high = GbJson().add("w/a/devices:1/batch:1", {10.8, 10.85, 10.75, 10.82, 10.78}).file("r1.json");
  const RunFile low = GbJson().add("w/a/devices:1/batch:1", {9.4, 9.45, 9.35, 9.42, 9.38}).file("r2.json");
  const RunFile cont = GbJson().add("w/a/devices:1/batch:1", {10.6, 10.62, 10.58, 10.61, 10.59}).file("c.json");
  const Comparison one = compare_runs(quiet, cont, {}, false);
  EXPECT_EQ(one.suite.verdict, Verdict::Slower);
  const Comparison many = compare_runs(std::vector<RunFile>{quiet, high, low}, cont, {}, false);
  EXPECT_EQ(many.entries.at(0).n_baseline, 15);
  EXPECT_EQ(many.suite.verdict, Verdict::Inconclusive);
  EXPECT_EQ(many.exit_code(), kExitInconclusive);
  EXPECT_THAT(comparison_markdown(many, "r0.json", "c.json"), HasSubstr("and 2 more run(s)"));
  // Every baseline run must be comparable with the contender.
  const RunFile strong = GbJson({{"scaling", "strong"}, {"precision", "fp32"}}).add("w/a/devices:1/batch:1", {10}).file("strong.json");
  EXPECT_THROW(compare_runs(std::vector<RunFile>{quiet, strong}, cont, {}, false), UsageError);
}

TEST(Suite, RunToRunDriftOfTheHistoryWidensTheInterval) {
  // Four past runs whose whole level drifts (machine load): every benchmark moves together.
  const double levels[4] = {1.0, 1.08, 0.93, 1.03};
  const double jitter[5] = {0.0, 0.004, -0.003, 0.002, -0.001};
  std::vector<std::vector<std::vector<double>>> base(4);  // [benchmark][run][repetition]
  for (int b = 0; b < 4; ++b)
    for (double level : levels) {
      std::vector<double> reps;
      for (double j : jitter) reps.push_back(10.0 * (b + 1) * level * (1 + j));
      base[b].push_back(reps);
    }
  auto contender = [&](double level) {
    std::vector<std::vector<double>> c;
    for (int b = 0; b < 4; ++b) {
      std::vector<double> reps;
      for (double j : jitter) reps.push_back(10.0 * (b + 1) * level * (1 - j));
      c.push_back(reps);
    }
    return c;
  };
  const CompareOptions o;
  // A run 6% above the history's middle is within its drift...
  const SuiteVerdict within = suite_verdict(base, contender(1.075), o);
  EXPECT_GT(*within.ratio, 1.05);
  EXPECT_EQ(within.verdict, Verdict::Inconclusive);
  EXPECT_LT(*within.lo, 1.0);
  // ...while against the first run alone (no drift known) the same contender is slower.
  std::vector<std::vector<std::vector<double>>> first;
  for (const auto& runs : base) first.push_back({runs[0]});
  EXPECT_EQ(suite_verdict(first, contender(1.075), o).verdict, Verdict::Slower);
  // Far beyond the drift: slower.
  EXPECT_EQ(suite_verdict(base, contender(1.4), o).verdict, Verdict::Slower);
}

TEST(Compare, DifferentEnvironmentsRefusedUnlessForced) {
  const RunFile base = GbJson({{"device_kind", "cuda"}, {"gpu_names", "NVIDIA H100"}, {"precision", "fp32"}})
                           .add("w/a/devices:1/batch:1", {10})
                           .file("base.json");
  const RunFile cont = GbJson({{"device_kind", "cuda"}, {"gpu_names", "NVIDIA H200"}, {"precision", "fp32"}})
                           .add("w/a/devices:1/batch:1", {10})
                           .file("cont.json");
  try {
    compare_runs(base, cont, {}, false);
    FAIL() << "expected UsageError";
  } catch (const UsageError& e) {
    EXPECT_THAT(e.what(), HasSubstr("gpu_names"));
    EXPECT_THAT(e.what(), HasSubstr("H100"));
    EXPECT_THAT(e.what(), HasSubstr("--force"));
  }
  const Comparison forced = compare_runs(base, cont, {}, true);
  ASSERT_EQ(forced.env_diffs.size(), 1u);
  EXPECT_THAT(comparison_markdown(forced, "base.json", "cont.json"), HasSubstr("environments differ"));
  // Precision is part of the environment too.
  const RunFile tf32 = GbJson({{"device_kind", "cuda"}, {"gpu_names", "NVIDIA H100"}, {"precision", "tf32"}})
                           .add("w/a/devices:1/batch:1", {10})
                           .file();
  EXPECT_THROW(compare_runs(base, tf32, {}, false), UsageError);
}

// ---- malformed input ----------------------------------------------------------------------

std::string parse_error(const std::string& text) {
  try {
    parse_run_json(text, "bad.json");
  } catch (const UsageError& e) {
    return e.what();
  }
  return "no error";
}

TEST(GbJsonParse, MalformedInputsGiveClearErrors) {
  EXPECT_THAT(parse_error("this is not json"), HasSubstr("bad.json: malformed JSON"));
  EXPECT_THAT(parse_error("[1, 2]"), HasSubstr("bad.json: expected a Google Benchmark JSON object"));
  EXPECT_THAT(parse_error(R"({"context": {}})"), HasSubstr("bad.json: not a Google Benchmark JSON file: it has no \"benchmarks\" array"));
  EXPECT_THAT(parse_error(R"({"benchmarks": {}})"), HasSubstr("\"benchmarks\" must be an array"));
  EXPECT_THAT(parse_error(R"({"benchmarks": [{"real_time": 1}]})"), HasSubstr("benchmarks[0]: missing field \"name\""));
  EXPECT_THAT(parse_error(R"({"benchmarks": [{"name": "a", "iterations": 1, "real_time": "fast", "time_unit": "ns"}]})"),
              HasSubstr("benchmarks[0] (\"a\"): field \"real_time\" must be a number, got \"fast\""));
  EXPECT_THAT(parse_error(R"({"benchmarks": [{"name": "a", "iterations": 1, "real_time": 1}]})"),
              HasSubstr("missing field \"time_unit\""));
  EXPECT_THAT(parse_error(R"({"benchmarks": [{"name": "a", "iterations": 1, "real_time": 1, "time_unit": "h"}]})"),
              HasSubstr("\"time_unit\" must be ns, us, ms or s"));
  EXPECT_THAT(parse_error(R"({"benchmarks": [{"name": 7}]})"), HasSubstr("field \"name\" must be a string"));
  EXPECT_THAT(parse_error(R"({"benchmarks": [{"name": "a", "error_occurred": "yes"}]})"),
              HasSubstr("\"error_occurred\" must be true or false"));
  EXPECT_THAT(parse_error(R"({"context": [], "benchmarks": []})"), HasSubstr("\"context\" must be an object"));
  // Counts a 64-bit integer cannot hold (a cast of such a double is undefined) or that are not whole.
  for (const char* count : {"1e300", "-1", "2.5", "18446744073709551616"})
    for (const char* key : {"repetitions", "repetition_index", "iterations"})
      EXPECT_THAT(parse_error(fmt::format(R"({{"benchmarks": [{{"name": "a", {}"real_time": 1, "time_unit": "ns", "{}": {}}}]}})",
                                          key == std::string("iterations") ? "" : R"("iterations": 1, )", key, count)),
                  HasSubstr(fmt::format("benchmarks[0] (\"a\"): field \"{}\" must be a whole number from 0 to 2^62", key)))
          << key << " " << count;
  EXPECT_THROW(load_run_json("/nonexistent/parbench.json"), UsageError);
}

TEST(GbJsonParse, AcceptsGoogleBenchmarksNaNAndUnits) {
  // GB writes the cv aggregate of an always-zero counter as a bare NaN.
  const std::string text = R"({"context": {"scaling": "weak", "num_cpus": 2}, "benchmarks": [
    {"name": "w/a/devices:1/batch:1", "run_name": "w/a/devices:1/batch:1", "run_type": "iteration",
     "iterations": 5, "real_time": 1500, "cpu_time": 1400, "time_unit": "us", "comm_s": 0, "label": "x NaN"},
    {"name": "w/a/devices:1/batch:1_cv", "run_name": "w/a/devices:1/batch:1", "run_type": "aggregate",
     "aggregate_name": "cv", "aggregate_unit": "percentage", "iterations": 1, "real_time": 0.1, "cpu_time": 0.1,
     "comm_s": NaN, "other": -Infinity}]})";
  const RunFile f = parse_run_json(text, "gb.json");
  ASSERT_EQ(f.runs.size(), 2u);
  EXPECT_DOUBLE_EQ(f.runs[0].real_s, 1.5e-3);
  EXPECT_EQ(f.runs[0].counters.at("comm_s"), 0);
  EXPECT_EQ(f.runs[1].counters.count("comm_s"), 0u);  // NaN: no value
  EXPECT_EQ(f.context_value("num_cpus"), "2");
  EXPECT_EQ(nan_to_null(R"({"a": NaN, "b": "NaN", "c": -Infinity})"), R"({"a": null, "b": "NaN", "c": null})");
}

// ---- paired (A/B) comparison ----------------------------------------------------------------

TEST(PairedT, MatchesScipy) {
  // scipy.stats.ttest_1samp(d, 0) and its confidence_interval (scipy 1.10).
  const PairedT a = paired_t({0.1, 0.2, 0.3}, 0.05);
  EXPECT_EQ(a.n, 3);
  EXPECT_NEAR(a.mean, 0.2, 1e-12);
  EXPECT_NEAR(a.lo, -0.048413771184375176, 1e-9);
  EXPECT_NEAR(a.hi, 0.44841377118437525, 1e-9);
  EXPECT_NEAR(a.p, 0.0741799002274485, 1e-9);
  const std::vector<double> d = {0.05, -0.02, 0.08, 0.01, 0.03};
  const PairedT b = paired_t(d, 0.05);
  EXPECT_NEAR(b.p, 0.152920150006137, 1e-9);
  EXPECT_NEAR(b.lo, -0.017281156420198493, 1e-9);
  EXPECT_NEAR(b.hi, 0.07728115642019849, 1e-9);
  EXPECT_NEAR(paired_t(d, 0.10).lo, -0.006304042512332325, 1e-9);
  // No spread: a zero-width interval.
  const PairedT flat = paired_t({0.02, 0.02, 0.02}, 0.05);
  EXPECT_DOUBLE_EQ(flat.lo, 0.02);
  EXPECT_DOUBLE_EQ(flat.hi, 0.02);
  EXPECT_EQ(flat.p, 0);
  EXPECT_EQ(paired_t({0, 0}, 0.05).p, 1);
  EXPECT_THROW(paired_t({0.1}, 0.05), Error);
}

TEST(MeanOfMeansT, WelchSatterthwaiteByHand) {
  // Expected values from the formulas with numpy and scipy.stats.t (scipy 1.10).
  const PairedT r = mean_of_means_t({{0.1, 0.2, 0.3}, {0.0, 0.05, -0.05, 0.1}}, 0.05);
  EXPECT_EQ(r.n, 7);
  EXPECT_NEAR(r.mean, 0.1125, 1e-12);
  EXPECT_NEAR(r.df, 3.234718826405868, 1e-9);
  EXPECT_NEAR(r.lo, 0.011441801126918713, 1e-9);
  EXPECT_NEAR(r.hi, 0.2135581988730813, 1e-9);
  EXPECT_NEAR(r.p, 0.03781508223836954, 1e-9);
  // One group: the one-sample t interval.
  const PairedT one = mean_of_means_t({{0.1, 0.2, 0.3}}, 0.05);
  EXPECT_NEAR(one.lo, paired_t({0.1, 0.2, 0.3}, 0.05).lo, 1e-12);
  EXPECT_NEAR(one.df, 2, 1e-12);
  EXPECT_THROW(mean_of_means_t({{0.1, 0.2}, {0.3}}, 0.05), Error);
}

// log_ratios[b][k] for B benchmarks and the given per-pair suite values plus a per-benchmark wobble
// that averages out over the benchmarks.
std::vector<std::vector<double>> logs_with(const std::vector<double>& per_pair, int benchmarks = 4) {
  std::vector<std::vector<double>> out(static_cast<std::size_t>(benchmarks));
  for (int b = 0; b < benchmarks; ++b)
    for (std::size_t k = 0; k < per_pair.size(); ++k)
      out[static_cast<std::size_t>(b)].push_back(per_pair[k] + ((b % 2 == 0) ? 0.03 : -0.03));
  return out;
}

TEST(PairedSuite, VerdictFromTheIntervalOverPairs) {
  const CompareOptions o;
  // Per pair the suite's log ratio; the interval is the t interval over these, exponentiated.
  const std::vector<double> slow = {std::log(1.06), std::log(1.07), std::log(1.05), std::log(1.065), std::log(1.055)};
  const SuiteVerdict s = paired_suite_verdict(logs_with(slow), o);
  const PairedT t = paired_t(slow, o.alpha);
  EXPECT_EQ(s.benchmarks, 4);
  EXPECT_NEAR(*s.ratio, std::exp(t.mean), 1e-12);
  EXPECT_NEAR(*s.lo, std::exp(t.lo), 1e-12);
  EXPECT_NEAR(*s.hi, std::exp(t.hi), 1e-12);
  EXPECT_GT(*s.lo, 1.0);
  EXPECT_EQ(s.verdict, Verdict::Slower);
  // The same pairs around 1: same.
  const std::vector<double> same = {0.01, -0.012, 0.004, -0.003, 0.0};
  EXPECT_EQ(paired_suite_verdict(logs_with(same), o).verdict, Verdict::Same);
  // Spread too wide to rule out either no change or a 5% slowdown: inconclusive.
  const std::vector<double> wide = {std::log(1.2), std::log(0.92), std::log(1.1), std::log(0.97), std::log(1.03)};
  const SuiteVerdict w = paired_suite_verdict(logs_with(wide), o);
  EXPECT_LT(*w.lo, 1.0);
  EXPECT_EQ(w.verdict, Verdict::Inconclusive);
  // A certain 1% slowdown: below the threshold, passes with a note.
  const std::vector<double> small = {0.0101, 0.0099, 0.0102, 0.0098, 0.01};
  const SuiteVerdict sm = paired_suite_verdict(logs_with(small), o);
  EXPECT_GT(*sm.lo, 1.0);
  EXPECT_EQ(sm.verdict, Verdict::Same);
  EXPECT_THAT(sm.note, HasSubstr("smaller than the threshold"));
  std::vector<double> fast;
  for (double x : slow) fast.push_back(-2 * x);
  EXPECT_EQ(paired_suite_verdict(logs_with(fast), o).verdict, Verdict::Faster);
  EXPECT_EQ(paired_suite_verdict({}, o).verdict, Verdict::Skipped);
}

TEST(PairedSuite, IndependentBenchmarksPoolTheirSpread) {
  const CompareOptions o;
  // Nine benchmarks, each in processes of its own: independent errors of 4% around +5%, that
  // happen to leave two of the five pairs' means low. Over the pairs (4 degrees of freedom) the
  // interval reaches below 1; over the benchmarks' own spreads (about 36) it does not.
  const double e[9][5] = {{0.04, -0.03, 0.01, -0.05, 0.03}, {-0.02, 0.05, -0.04, 0.00, 0.01},
                          {0.03, -0.06, 0.02, -0.01, 0.02}, {0.01, 0.02, -0.05, -0.03, 0.05},
                          {-0.04, 0.03, 0.00, -0.04, 0.05}, {0.05, -0.02, -0.03, -0.02, 0.02},
                          {0.02, -0.04, 0.04, -0.05, 0.03}, {-0.03, 0.01, 0.02, -0.04, 0.04},
                          {0.00, -0.05, 0.03, -0.03, 0.05}};
  std::vector<std::vector<double>> logs(9);
  for (int b = 0; b < 9; ++b)
    for (int k = 0; k < 5; ++k) logs[b].push_back(std::log(1.06) + e[b][k]);
  const SuiteVerdict pairs = paired_suite_verdict(logs, o, false);
  const SuiteVerdict benchmarks = paired_suite_verdict(logs, o, true);
  EXPECT_DOUBLE_EQ(*pairs.ratio, *benchmarks.ratio);
  EXPECT_LT(*benchmarks.hi - *benchmarks.lo, *pairs.hi - *pairs.lo);
  EXPECT_EQ(benchmarks.verdict, Verdict::Slower);
  std::vector<double> per_pair(5, 0.0);
  for (int k = 0; k < 5; ++k)
    for (int b = 0; b < 9; ++b) per_pair[k] += logs[b][k] / 9;
  EXPECT_NEAR(*pairs.lo, std::exp(paired_t(per_pair, o.alpha).lo), 1e-12);
  EXPECT_NEAR(*benchmarks.lo, std::exp(mean_of_means_t(logs, o.alpha).lo), 1e-12);
}

// Pair k's runs: every benchmark at level[k] (the machine's drift), the contender x factor.
std::vector<RunFile> drifting_runs(const std::vector<double>& level, double factor, const std::string& side) {
  std::vector<RunFile> runs;
  for (std::size_t k = 0; k < level.size(); ++k) {
    GbJson g;
    for (int b = 0; b < 3; ++b) {
      const double t = 10.0 * (b + 1) * level[k] * factor * (1 + 0.002 * ((k + b) % 3));
      g.add(fmt::format("w/s{}/devices:1/batch:1", b), {t});
    }
    runs.push_back(g.file(fmt::format("{}/{}.json", side, k + 1)));
  }
  return runs;
}

TEST(ComparePaired, DriftSharedByAPairCancels) {
  // The machine drifts by up to 30% between pairs; within a pair both sides see the same level.
  const std::vector<double> level = {1.0, 1.3, 0.85, 1.15, 0.95};
  const std::vector<RunFile> base = drifting_runs(level, 1.0, "a");
  const Comparison slower = compare_paired(base, drifting_runs(level, 1.06, "b"), {}, false);
  EXPECT_EQ(slower.pairs, 5);
  EXPECT_EQ(slower.suite.verdict, Verdict::Slower);
  EXPECT_NEAR(*slower.suite.ratio, 1.06, 0.002);
  EXPECT_EQ(slower.exit_code(), 1);
  ASSERT_EQ(slower.entries.size(), 3u);
  EXPECT_EQ(slower.entries[0].verdict, Verdict::Slower);
  EXPECT_EQ(slower.entries[0].n_baseline, 5);
  ASSERT_TRUE(slower.entries[0].t.has_value());
  const Comparison same = compare_paired(base, drifting_runs(level, 1.0, "b"), {}, false);
  EXPECT_EQ(same.suite.verdict, Verdict::Same);
  EXPECT_EQ(same.exit_code(), 0);
  // Paired with runs of other moments (the contender's runs rotated by one), the drift swamps
  // the 6%: the pairing is what resolves it.
  std::vector<RunFile> cont = drifting_runs(level, 1.06, "b");
  std::rotate(cont.begin(), cont.begin() + 1, cont.end());
  const Comparison misaligned = compare_paired(base, cont, {}, false);
  EXPECT_LT(*misaligned.suite.lo, 1.0);
  EXPECT_EQ(misaligned.suite.verdict, Verdict::Inconclusive);
  const std::string md = comparison_markdown(slower, "a/1.json", "b/1.json");
  EXPECT_THAT(md, HasSubstr("**FAIL** suite of 3 benchmark(s): geometric mean time ratio 1.060"));
  EXPECT_THAT(md, HasSubstr("Paired: 5 baseline runs"));
  EXPECT_THAT(md, HasSubstr("(paired t)"));
}

TEST(ComparePaired, LostAndFailedBenchmarksGate) {
  const std::vector<double> level = {1.0, 1.1, 0.9};
  const std::vector<RunFile> base = drifting_runs(level, 1.0, "a");
  // The contender lost benchmark s2 in its second run, and failed s1 in its third.
  std::vector<RunFile> cont;
  for (std::size_t k = 0; k < level.size(); ++k) {
    GbJson g;
    g.add("w/s0/devices:1/batch:1", {10.0 * level[k]});
    if (k == 2) g.error("w/s1/devices:1/batch:1", "out of memory on cpu");
    else g.add("w/s1/devices:1/batch:1", {20.0 * level[k]});
    if (k != 1) g.add("w/s2/devices:1/batch:1", {30.0 * level[k]});
    cont.push_back(g.file(fmt::format("b/{}.json", k + 1)));
  }
  const Comparison c = compare_paired(base, cont, {}, false);
  ASSERT_EQ(c.entries.size(), 3u);
  EXPECT_EQ(c.entries[0].verdict, Verdict::Same);
  EXPECT_EQ(c.entries[1].verdict, Verdict::Failed);
  EXPECT_THAT(c.entries[1].note, HasSubstr("b/3.json"));
  EXPECT_THAT(c.entries[1].note, HasSubstr("out of memory"));
  EXPECT_EQ(c.entries[2].verdict, Verdict::Missing);
  EXPECT_THAT(c.entries[2].note, HasSubstr("b/2.json"));
  EXPECT_EQ(c.suite.benchmarks, 1);  // only s0 was measured in every pair
  EXPECT_EQ(c.exit_code(), 1);
  // A benchmark only the contender has is new and does not gate.
  std::vector<RunFile> extra = drifting_runs(level, 1.0, "b");
  for (RunFile& r : extra) r = merge_run_pieces({r, GbJson().add("w/s9/devices:1/batch:1", {5}).file("b/extra.json")});
  const Comparison n = compare_paired(base, extra, {}, false);
  EXPECT_EQ(n.entries.back().verdict, Verdict::New);
  EXPECT_EQ(n.exit_code(), 0);
}

std::string usage_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "no error";
}

TEST(ComparePaired, BadInputIsRefusedWithTheReason) {
  const std::vector<double> level = {1.0, 1.1, 0.9};
  const std::vector<RunFile> base = drifting_runs(level, 1.0, "a");
  const std::vector<RunFile> two = drifting_runs({1.0, 1.1}, 1.0, "b");
  EXPECT_THAT(usage_error([&] { compare_paired(base, two, {}, false); }),
              HasSubstr("3 baseline run(s) but 2 contender run(s)"));
  EXPECT_THAT(usage_error([&] { compare_paired({base[0]}, {two[0]}, {}, false); }),
              HasSubstr("1 pair(s) of runs; the interval needs at least 2"));
  CompareOptions bad;
  bad.alpha = 1.5;
  EXPECT_THAT(usage_error([&] { compare_paired(base, base, bad, false); }), HasSubstr("--alpha"));
  // A contender run that measures something else (another scaling) is named with both values.
  std::vector<RunFile> cont = drifting_runs(level, 1.0, "b");
  cont[1] = GbJson({{"scaling", "strong"}, {"precision", "fp32"}, {"device_kind", "cpu"}})
                .add("w/s0/devices:1/batch:1", {10})
                .file("b/2.json");
  const std::string msg = usage_error([&] { compare_paired(base, cont, {}, false); });
  EXPECT_THAT(msg, HasSubstr("scaling: 'weak' (a/2.json), 'strong' (b/2.json)"));
  EXPECT_THAT(msg, HasSubstr("--force"));
  const Comparison forced = compare_paired(base, cont, {}, true);
  EXPECT_FALSE(forced.env_diffs.empty());
  EXPECT_THAT(comparison_markdown(forced, "a", "b"), HasSubstr("environments differ"));
}

TEST(ComparePaired, PiecesOfOneRunMerge) {
  const RunFile a = GbJson().add("w/s0/devices:1/batch:1", {10}).iteration_times("w/s0/devices:1/batch:1", {{0.01, 0.011}}).file("p/1.json");
  const RunFile b = GbJson().add("w/s1/devices:1/batch:1", {20}).file("p/2.json");
  const RunFile m = merge_run_pieces({a, b});
  EXPECT_EQ(m.source, "p/1.json");
  EXPECT_EQ(collect_benchmarks(m).size(), 2u);
  EXPECT_EQ(m.iteration_times.count("w/s0/devices:1/batch:1"), 1u);
  EXPECT_THAT(usage_error([&] { merge_run_pieces({a, a}); }), HasSubstr("benchmark w/s0/devices:1/batch:1 is also in"));
  const RunFile strong =
      GbJson({{"scaling", "strong"}, {"precision", "fp32"}, {"device_kind", "cpu"}}).add("w/s2/devices:1/batch:1", {1}).file("p/3.json");
  EXPECT_THAT(usage_error([&] { merge_run_pieces({a, strong}); }), HasSubstr("parts of one run, but they differ in scaling"));
}

TEST(ComparePaired, FolderOfRunsInNumericOrder) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / fmt::format("parbench_paired_{}", ::getpid());
  fs::remove_all(dir);
  // Runs 2 and 10 as subfolders of pieces, run 1 as a file; report.json is not a run's file.
  fs::create_directories(dir / "2" / "01");
  fs::create_directories(dir / "2" / "02");
  fs::create_directories(dir / "10");
  auto put = [](const fs::path& p, const std::string& text) { std::ofstream(p) << text; };
  auto doc = [](const std::string& name, double ms) {
    GbJson g;
    g.add(name, {ms});
    return g.doc().dump();
  };
  put(dir / "1.json", doc("w/s0/devices:1/batch:1", 1));
  put(dir / "2" / "01" / "results.json", doc("w/s0/devices:1/batch:1", 2));
  put(dir / "2" / "02" / "results.json", doc("w/s1/devices:1/batch:1", 2));
  put(dir / "2" / "01" / "report.json", "{\"not\": \"a run\"}");
  put(dir / "10" / "results.json", doc("w/s0/devices:1/batch:1", 10));
  const PairedSide side = load_paired_runs(dir.string());
  const std::vector<RunFile>& runs = side.runs;
  EXPECT_FALSE(side.per_benchmark_processes);  // run 1 is one file
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_THAT(runs[0].source, HasSubstr("1.json"));
  EXPECT_EQ(collect_benchmarks(runs[1]).size(), 2u);
  EXPECT_THAT(runs[2].source, HasSubstr("10"));
  EXPECT_THAT(usage_error([&] { load_paired_runs((dir / "1.json").string()); }), HasSubstr("expected a folder of runs"));
  // Every run a folder of one-benchmark files: each benchmark ran in processes of its own.
  fs::remove(dir / "1.json");
  EXPECT_TRUE(load_paired_runs(dir.string()).per_benchmark_processes);
  fs::create_directories(dir / "empty");
  EXPECT_THAT(usage_error([&] { load_paired_runs((dir / "empty").string()); }), HasSubstr("holds no run"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace pb::reports
