// Baseline vs contender: benchmarks matched by identity, per benchmark a time ratio with a t
// interval over repetitions, a suite verdict (geometric mean of the same ratios, its interval),
// and the exit code a CI job gates on. Rules: docs/reports.md.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "reports/gbjson.h"
#include "reports/stats.h"

namespace pb::reports {

struct CompareOptions {
  double threshold = 0.05;  // a time ratio beyond 1 +- threshold is a change
  double alpha = 0.05;      // significance level of the tests; the suite's interval is 1 - alpha
  bool gate_each = false;   // also fail on a single benchmark's "slower"
};

enum class Verdict { Faster, Slower, Same, Missing, New, Failed, Skipped, Inconclusive };
const char* verdict_name(Verdict v);

// Exit codes of compare and ab: 0 pass, 1 a regression (or a lost or failed benchmark), 2 bad
// input (UsageError), 3 inconclusive: too little data for a verdict.
constexpr int kExitInconclusive = 3;
// Least data an interval is formed from: repetitions a side against one baseline run, past runs
// in a history baseline.
constexpr std::size_t kMinRepetitions = 3;
constexpr std::size_t kMinHistoryRuns = 3;

// The one rule, for a time ratio and its interval [lo, hi] at 1 - alpha: slower when lo > 1 and
// ratio >= 1 + threshold (a slowdown is certain and estimated at the threshold or more); faster
// likewise below; inconclusive when hi > 1 + threshold otherwise (a slowdown of the threshold's
// size is neither shown nor ruled out); else same.
Verdict interval_verdict(double ratio, double lo, double hi, double threshold);
// Why the verdict, when the interval alone does not say: inconclusive, or a change below the threshold.
std::string interval_note(Verdict v, double lo, double hi, double threshold);

struct CompareEntry {
  std::string name;
  Verdict verdict = Verdict::Same;
  // Seconds per iteration: the geometric mean of the repetition times (paired: the median over
  // the pairs), so that ratio = contender / baseline is the figure the suite averages.
  std::optional<double> baseline_s, contender_s;
  std::optional<double> ratio;                    // contender / baseline
  int n_baseline = 0, n_contender = 0;            // repetitions (paired: pairs)
  std::optional<PairedT> t;                       // the t interval on log times the verdict rests on
  std::optional<double> lo, hi;                   // the ratio's interval at 1 - alpha
  std::string note;                               // why the verdict (test skipped, error text)
};

// The suite: every benchmark both sides measured. ratio = the geometric mean of the table's
// ratios; [lo, hi] its t interval at 1 - alpha (one baseline run: Welch, the benchmarks'
// repetition variances pooled; several: a prediction interval from the past runs' drift).
struct SuiteVerdict {
  int benchmarks = 0;
  std::optional<double> ratio, lo, hi;
  // Slower, Faster, Same or Inconclusive (also when any benchmark has too little data);
  // Skipped when nothing matched.
  Verdict verdict = Verdict::Same;
  std::string note;
};

// A context entry that differs between the two runs (absent on one side counts as differing).
struct EnvDiff {
  std::string key, baseline, contender;
  std::string baseline_source;
};

// The context keys that must agree (schema.h, Match::Always; Match::Cpu when either run is a
// CPU run, Match::Gpu when either is a CUDA run): the environment (device kind, CPU; GPUs and
// CUDA library versions for CUDA runs, which a CPU run never uses) and everything that
// changes the work or the arithmetic (workload and its parameters, parameter count, forward
// FLOPs, precision, scaling, micro-batches, bucket size, balance, threads, ...).
std::vector<EnvDiff> environment_diffs(const RunFile& baseline, const RunFile& contender);

struct Comparison {
  std::vector<CompareEntry> entries;
  SuiteVerdict suite;
  std::vector<EnvDiff> env_diffs;  // non-empty only when forced
  CompareOptions options;
  std::vector<std::string> baseline_sources;
  int pairs = 0;  // > 0: a paired comparison (compare_paired) of this many runs a side
  bool per_benchmark_processes = false;  // paired: each benchmark ran in processes of its own
  // 1 when the suite is slower, a benchmark disappeared or failed where the baseline ran, or
  // (gate_each) a benchmark is slower; else 3 (kExitInconclusive) when the suite (gate_each: or
  // a benchmark) is inconclusive; else 0.
  int exit_code() const;
};

// Several baselines (past runs of the same build) are one baseline distribution. Throws
// UsageError listing the differing keys when the runs are not comparable and !force.
Comparison compare_runs(const std::vector<RunFile>& baselines, const RunFile& contender, const CompareOptions& opts,
                        bool force);
Comparison compare_runs(const RunFile& baseline, const RunFile& contender, const CompareOptions& opts, bool force);

// Paired (A/B) mode: baselines[k] and contenders[k] were run side by side (parbench ab
// alternates the two builds), so whatever drifts between runs (load, clocks, placement) hits
// both members of a pair alike and cancels in their ratio. Per benchmark and pair, the log of
// contender median / baseline median; ratio = exp(mean over the pairs and the benchmarks every
// run measured). Its interval at 1 - alpha: when the benchmarks of a pair shared a process (whole
// runs alternated), they share its drift, so the pairs are the independent samples: the
// one-sample t interval over the pairs' means. When each benchmark ran in processes of its own
// (per_benchmark_processes), the benchmarks' errors are independent: mean_of_means_t over them.
// Verdicts follow the suite rule (slower: interval above 1 and reaching beyond 1 + threshold),
// per benchmark too (its one-sample t over the pairs). Throws UsageError when the counts differ,
// there are fewer than 2 pairs, or (unless force) any two runs are not comparable.
Comparison compare_paired(const std::vector<RunFile>& baselines, const std::vector<RunFile>& contenders,
                          const CompareOptions& opts, bool force, bool per_benchmark_processes = false);
// One run made of pieces (parbench ab --interleave benchmark runs each benchmark in its own
// process): their benchmarks and iteration times together, the first piece's context and
// source. Throws UsageError naming the files when two pieces differ in a must-match context
// key or measure the same benchmark.
RunFile merge_run_pieces(const std::vector<RunFile>& pieces);
// Whether a .json file found in a run folder is a run's record (Google Benchmark JSON): not
// parbench's report.json, a trace-*.json (--trace) or a kept plan (plans/*.json).
bool is_run_record(const std::filesystem::path& file);
// One side of a paired comparison: the runs in a folder, in name order (numeric names by
// value): each *.json file directly in it is a run, and each subfolder is one run made of every
// run record below it (is_run_record; merge_run_pieces). per_benchmark_processes: every
// run is a subfolder whose every file holds one benchmark (parbench ab --interleave benchmark).
// UsageError naming the folder when it is not one or holds no run.
struct PairedSide {
  std::vector<RunFile> runs;
  bool per_benchmark_processes = false;
};
PairedSide load_paired_runs(const std::string& dir);

// The paired suite statistic alone (for tests): log_ratios[b][k] = log(contender / baseline) of
// benchmark b in pair k (every benchmark measured in every pair).
SuiteVerdict paired_suite_verdict(const std::vector<std::vector<double>>& log_ratios, const CompareOptions& o,
                                  bool per_benchmark_processes = false);

std::string comparison_markdown(const Comparison& c, const std::string& baseline_source,
                                const std::string& contender_source);
// The suite statistic alone (for tests): base_runs[b][k] are benchmark b's baseline repetition
// times in run k (the same k for every benchmark; empty where run k lacks it), cont[b] its
// contender repetition times.
SuiteVerdict suite_verdict(const std::vector<std::vector<std::vector<double>>>& base_runs,
                           const std::vector<std::vector<double>>& cont, const CompareOptions& o);

// A benchmark's repetition times, the samples of the table and the suite alike: each
// repetition's median iteration where the run recorded them, else its Google Benchmark time;
// GB's median aggregate alone when that is all there is. files: each one's file index.
std::vector<double> repetition_times(const Benchmark& b, std::vector<int>* files = nullptr);

// One benchmark's contender minus baseline mean log repetition time, and its t interval.
struct LogDiff {
  std::optional<double> base_log, cont_log;  // one baseline run: its mean; several: the mean of their means
  int n_baseline = 0, n_contender = 0;
  bool history = false;      // several baseline runs: a prediction interval from their means' spread
  std::vector<TPart> parts;  // the standard error's parts
  std::optional<PairedT> t;  // absent when there is too little data
  std::string too_little;    // then why
};
LogDiff log_diff(const std::vector<std::vector<double>>& base_runs, const std::vector<double>& cont,
                 const CompareOptions& o);

}  // namespace pb::reports
