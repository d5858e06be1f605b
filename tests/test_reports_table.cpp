// Report arithmetic on synthetic Google Benchmark JSON (speedup, efficiency, grouping, display
// order) and the parser's errors on malformed input.
#include "tests/test_reports_support.h"

namespace pb::reports {
namespace {

using namespace pb::reports::reports_test;

const Row& row(const Group& g, const std::string& strategy, int devices) {
  for (const Row& r : g.rows)
    if (r.strategy == strategy && r.devices == devices) return r;
  throw std::runtime_error("no row " + strategy + " x" + std::to_string(devices));
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

// ---- malformed input ----------------------------------------------------------------------

std::string parse_error(const std::string& text) {
  try {
    parse_run_json(text, "bad.json");
  } catch (const UsageError& e) {
    return e.what();
  }
  return "no error";
}

// A staged run over a net with skips: each stage's skip bytes (the run's layout) in a table of their own.
TEST(Report, SkipTrafficPerStage) {
  constexpr double MiB = 1024.0 * 1024.0;
  GbJson j;
  j.add("unet/regular/devices:1/batch:4", {10}, {{"global_batch", 4}})
      .add("unet/mp/devices:3/batch:4", {12}, {{"global_batch", 4}, {"bytes_sent_per_iter", 3 * MiB}});
  j.doc()["layout"] = {{"unet/mp/devices:3/batch:4",
                        {{"stages", {{0, 5}, {5, 9}, {9, 12}}}, {"skip_bytes", {MiB, 0.5 * MiB, 0.25 * MiB}}}}};
  const Report rep = build_report({parse_run_json(j.doc().dump(), "run.json")});
  const Row& mp = row(rep.groups.at(0), "mp", 3);
  ASSERT_EQ(mp.stage_skip_mib.size(), 3u);
  EXPECT_DOUBLE_EQ(mp.stage_skip_mib[1], 0.5);
  EXPECT_TRUE(row(rep.groups.at(0), "regular", 1).stage_skip_mib.empty());
  const std::string md = report_markdown(rep);
  EXPECT_THAT(md, HasSubstr("Skip traffic between stages"));
  EXPECT_THAT(md, HasSubstr("| per worker |"));
  EXPECT_THAT(md, HasSubstr("| mp | 3 | 0: 1.00, 1: 0.5, 2: 0.25 | 1.75 | 3.00 |"));
  const nlohmann::json doc = nlohmann::json::parse(report_json(rep));
  EXPECT_EQ(doc["groups"][0]["rows"][1]["stage_skip_mib"], nlohmann::json({1.0, 0.5, 0.25}));
  EXPECT_FALSE(doc["groups"][0]["rows"][0].contains("stage_skip_mib"));
  j.doc()["layout"]["unet/mp/devices:3/batch:4"]["skip_bytes"] = {1, -2};
  EXPECT_THAT(parse_error(j.doc().dump()), HasSubstr("bad.json: layout[\"unet/mp/devices:3/batch:4\"]"
                                                     ".skip_bytes: every worker's bytes must be a non-negative finite number, got -2"));
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

}  // namespace
}  // namespace pb::reports
