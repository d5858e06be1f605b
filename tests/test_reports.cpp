// Report arithmetic, the comparison verdicts and the Mann-Whitney U test on synthetic Google
// Benchmark JSON with known answers (p-values checked against scipy.stats.mannwhitneyu 1.10).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

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
  explicit GbJson(std::map<std::string, std::string> ctx = {{"scaling", "weak"}, {"precision", "fp32"}, {"device_kind", "cpu"}}) {
    doc_["context"] = {{"date", "2025-01-01T00:00:00+00:00"}, {"num_cpus", 2}, {"library_build_type", "release"}};
    for (const auto& [k, v] : ctx) doc_["context"][k] = v;
    doc_["benchmarks"] = json::array();
  }
  GbJson& add(const std::string& name, const std::vector<double>& ms, std::map<std::string, double> counters = {}) {
    const std::string run = name + "/iterations:10/manual_time";
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
    const std::string run = name + "/iterations:10/manual_time";
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
                        .add("great_net/ddp/devices:2/batch:1", {15}, {{"global_batch", 2}, {"comm_s_per_iter", 0.003}})
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
  EXPECT_NEAR(*d2.comm_share, 0.2, 1e-12);
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
  auto n = parse_bench_name("great_net/ddp/devices:4/batch:8/iterations:10/manual_time");
  ASSERT_TRUE(n);
  EXPECT_EQ(n->workload, "great_net");
  EXPECT_EQ(n->strategy, "ddp");
  EXPECT_EQ(n->devices, 4);
  EXPECT_EQ(n->batch, 8);
  EXPECT_EQ(bench_name("great_net", "ddp", 4, 8), "great_net/ddp/devices:4/batch:8");
  EXPECT_FALSE(parse_bench_name("BM_x/8"));
  EXPECT_FALSE(parse_bench_name("w/s/devices:0/batch:1"));
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
  EXPECT_NEAR(*e.ratio, 1.1, 1e-12);
  ASSERT_TRUE(e.test);
  EXPECT_TRUE(e.test->exact);
  EXPECT_NEAR(e.test->p, 0.007936507936507936, 1e-12);  // complete separation, 5 vs 5
  EXPECT_EQ(c.exit_code(), 1);
  EXPECT_THAT(comparison_markdown(c, "a", "b"), HasSubstr("**slower**"));
  // The same change the other way is faster, and passes.
  const Comparison back = compare_runs(cont, base, {}, false);
  EXPECT_EQ(back.entries.at(0).verdict, Verdict::Faster);
  EXPECT_EQ(back.exit_code(), 0);
}

TEST(Compare, PureNoiseIsSame) {
  // Interleaved draws from the same spread: medians differ by 1%, ranks mix.
  const RunFile base = GbJson().add("w/dp/devices:2/batch:1", {10.0, 10.6, 9.5, 10.3, 9.8, 10.9}).file();
  const RunFile cont = GbJson().add("w/dp/devices:2/batch:1", {10.4, 9.6, 10.1, 10.8, 9.7, 10.2}).file();
  const Comparison c = compare_runs(base, cont, {}, false);
  EXPECT_EQ(c.entries.at(0).verdict, Verdict::Same);
  EXPECT_GT(c.entries.at(0).test->p, 0.05);
  EXPECT_EQ(c.exit_code(), 0);
}

TEST(Compare, LargeButNoisyChangeIsNotSignificant) {
  const RunFile base = GbJson().add("w/dp/devices:2/batch:1", {8, 12, 9, 13, 10}).file();
  const RunFile cont = GbJson().add("w/dp/devices:2/batch:1", {9, 13, 11, 14, 8.5}).file();  // median 11 vs 10
  const Comparison c = compare_runs(base, cont, {}, false);
  EXPECT_GT(*c.entries.at(0).ratio, 1.05);
  EXPECT_EQ(c.entries.at(0).verdict, Verdict::Same);
  EXPECT_THAT(c.entries.at(0).note, HasSubstr("not significant"));
}

TEST(Compare, MissingFailsNewPasses) {
  const RunFile base = GbJson().add("w/a/devices:1/batch:1", {10}).add("w/b/devices:1/batch:1", {10}).file();
  const RunFile cont = GbJson().add("w/a/devices:1/batch:1", {10}).add("w/c/devices:1/batch:1", {10}).file();
  const Comparison c = compare_runs(base, cont, {}, false);
  EXPECT_EQ(entry(c, "w/b/").verdict, Verdict::Missing);
  EXPECT_EQ(entry(c, "w/c/").verdict, Verdict::New);
  EXPECT_EQ(c.exit_code(), 1);
  const Comparison only_new = compare_runs(GbJson().add("w/a/devices:1/batch:1", {10}).file(), cont, {}, false);
  EXPECT_EQ(only_new.exit_code(), 0);
}

TEST(Compare, FailedInContenderFails) {
  const RunFile base = GbJson().add("w/a/devices:1/batch:1", {10}).file();
  const RunFile cont = GbJson().error("w/a/devices:1/batch:1", "out of memory on cuda:0").file();
  const Comparison c = compare_runs(base, cont, {}, false);
  EXPECT_EQ(c.entries.at(0).verdict, Verdict::Failed);
  EXPECT_THAT(c.entries.at(0).note, HasSubstr("out of memory"));
  EXPECT_EQ(c.exit_code(), 1);
}

TEST(Compare, FewRepetitionsJudgeOnTheRatio) {
  // One repetition: no test; 1.5x is slower, 1.02x is the same.
  const RunFile base = GbJson().add("w/a/devices:1/batch:1", {10}).add("w/b/devices:1/batch:1", {10}).file();
  const RunFile cont = GbJson().add("w/a/devices:1/batch:1", {15}).add("w/b/devices:1/batch:1", {10.2}).file();
  const Comparison c = compare_runs(base, cont, {}, false);
  EXPECT_EQ(entry(c, "w/a/").verdict, Verdict::Slower);
  EXPECT_FALSE(entry(c, "w/a/").test);
  EXPECT_THAT(entry(c, "w/a/").note, HasSubstr("test not possible"));
  EXPECT_EQ(entry(c, "w/b/").verdict, Verdict::Same);
  // Two repetitions a side: the test can never reach alpha = 0.05 (smallest p = 1/3), so the
  // ratio decides and says so.
  const RunFile b2 = GbJson().add("w/a/devices:1/batch:1", {10, 10.1}).file();
  const RunFile c2 = GbJson().add("w/a/devices:1/batch:1", {11, 11.1}).file();
  const Comparison two = compare_runs(b2, c2, {}, false);
  EXPECT_EQ(two.entries.at(0).verdict, Verdict::Slower);
  EXPECT_THAT(two.entries.at(0).note, HasSubstr("test too weak"));
  // A looser threshold lets the 10% through.
  CompareOptions loose;
  loose.threshold = 0.2;
  EXPECT_EQ(compare_runs(b2, c2, loose, false).exit_code(), 0);
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

}  // namespace
}  // namespace pb::reports
