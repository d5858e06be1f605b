// The comparison verdicts, per benchmark and for the suite, on synthetic Google Benchmark JSON
// with known answers.
#include "tests/test_reports_support.h"

namespace pb::reports {
namespace {

using namespace pb::reports::reports_test;

// ---- compare ------------------------------------------------------------------------------

const CompareEntry& entry(const Comparison& c, const std::string& prefix) {
  for (const CompareEntry& e : c.entries)
    if (e.name.rfind(prefix, 0) == 0) return e;
  throw std::runtime_error("no entry " + prefix);
}

// A run folder holds more JSON than its record: parbench's table, traces and the plans it kept.
TEST(Compare, OnlyRunRecordsAreReadFromARunFolder) {
  EXPECT_TRUE(is_run_record("runs/a/results.json"));
  EXPECT_TRUE(is_run_record("past/3/great_net_regular.json"));
  EXPECT_FALSE(is_run_record("runs/a/report.json"));
  EXPECT_FALSE(is_run_record("runs/a/trace-great_net_image_32_ddp.json"));
  EXPECT_FALSE(is_run_record("runs/a/plans/great_net_image_32_width_0.25_ddp_devices_2_batch_1.json"));
  EXPECT_FALSE(is_run_record("runs/a/report.md"));
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
      {"PARBENCH_CUDNN_API", {"unset", "legacy"}},
      {"conv_workspace_policy", {"fastest-fits", "cap 65536 MiB"}},
      {"conv_layout", {"nchw", "nhwc"}},
  };
  for (const auto& [key, values] : changes) {
    // The cuDNN settings change a CUDA run's work (CudaKeysMatterOnlyForCudaRuns: not a CPU run's).
    const bool cuda_only = key != "PARBENCH_CPU_WINOGRAD" && (key.rfind("PARBENCH_", 0) == 0 || key == "conv_workspace_policy" || key == "conv_layout");
    const std::string kind = cuda_only ? "cuda" : "cpu";
    std::map<std::string, std::string> cb = {{"device_kind", kind}, {key, values.first}};
    std::map<std::string, std::string> cc = {{"device_kind", kind}, {key, values.second}};
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
  // CUDA runs from before --layout were NCHW: an absent conv_layout reads as nchw.
  const RunFile before = GbJson(std::map<std::string, std::string>{{"device_kind", "cuda"}}).add("w/a/devices:1/batch:1", {10}).file("before.json");
  const RunFile nchw = GbJson({{"device_kind", "cuda"}, {"conv_layout", "nchw"}}).add("w/a/devices:1/batch:1", {10}).file("nchw.json");
  const RunFile nhwc = GbJson({{"device_kind", "cuda"}, {"conv_layout", "nhwc"}}).add("w/a/devices:1/batch:1", {10}).file("nhwc.json");
  EXPECT_NO_THROW(compare_runs(before, nchw, {}, false));
  EXPECT_THROW(compare_runs(before, nhwc, {}, false), UsageError);
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

// A CPU run uses no GPU or CUDA library: a CPU-only build's runs (no CUDA keys) compare with a
// CUDA build's (keys "none"), and a GPU machine's CPU runs with a CPU machine's; CUDA runs do not.
TEST(Compare, CudaKeysMatterOnlyForCudaRuns) {
  const std::map<std::string, std::string> cuda_build = {
      {"gpu_count", "8"}, {"gpu_names", "NVIDIA H200"}, {"cuda_driver", "13.0"}, {"cuda_runtime", "13.0"},
      {"cudnn", "9.13.0"}, {"nccl", "2.28.3"}, {"PARBENCH_CUDNN_API", "unset"}, {"PARBENCH_CONV_SEARCH", "unset"},
      {"conv_workspace_policy", "fastest-fits"}};
  auto run = [&](const std::string& kind, bool with_cuda_keys) {
    std::map<std::string, std::string> c = {{"device_kind", kind}, {"precision", "fp32"}, {"cpu_model", "AMD EPYC"}};
    if (with_cuda_keys) c.insert(cuda_build.begin(), cuda_build.end());
    return GbJson(c).add("w/a/devices:1/batch:1", {10}).file(kind + ".json");
  };
  EXPECT_TRUE(environment_diffs(run("cpu", false), run("cpu", true)).empty());
  const std::vector<EnvDiff> d = environment_diffs(run("cuda", false), run("cuda", true));
  EXPECT_EQ(d.size(), cuda_build.size());
  EXPECT_THROW(compare_runs(run("cuda", false), run("cuda", true), {}, false), UsageError);
  // The CPU model still matters for CPU runs, and not for CUDA ones.
  RunFile xeon = run("cpu", true), xeon_gpu = run("cuda", true);
  xeon.context["cpu_model"] = xeon_gpu.context["cpu_model"] = "Intel Xeon";
  EXPECT_EQ(environment_diffs(run("cpu", true), xeon).size(), 1u);
  EXPECT_TRUE(environment_diffs(run("cuda", true), xeon_gpu).empty());
}

}  // namespace
}  // namespace pb::reports
