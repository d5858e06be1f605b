// Paired (A/B) comparison: the suite's verdict from the interval over pairs of runs, drift shared
// by a pair cancelling, and the inputs it refuses.
#include "tests/test_reports_support.h"

namespace pb::reports {
namespace {

using namespace pb::reports::reports_test;

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
