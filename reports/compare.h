// Baseline vs contender: benchmarks matched by name, a time ratio and a Mann-Whitney U test per
// benchmark, a verdict, and the exit code a CI job gates on. Rules: docs/reports.md.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "reports/gbjson.h"
#include "reports/stats.h"

namespace pb::reports {

struct CompareOptions {
  double threshold = 0.05;  // a time ratio beyond 1 +- threshold is a change
  double alpha = 0.05;      // significance level of the two-sided test
};

enum class Verdict { Faster, Slower, Same, Missing, New, Failed, Skipped };
const char* verdict_name(Verdict v);

struct CompareEntry {
  std::string name;
  Verdict verdict = Verdict::Same;
  std::optional<double> baseline_s, contender_s;  // medians, seconds per iteration
  std::optional<double> ratio;                    // contender / baseline
  int n_baseline = 0, n_contender = 0;            // repetitions
  std::optional<MannWhitney> test;                // when used for the verdict
  std::string note;                               // why the verdict (test skipped, error text)
};

// A context entry that differs between the two runs (absent on one side counts as differing).
struct EnvDiff {
  std::string key, baseline, contender;
};

// The environment keys that must agree: device kind, GPU names and count, precision, library
// versions (driver, runtime, cuDNN, NCCL, CPU conv backend), and for CPU runs the CPU model.
std::vector<EnvDiff> environment_diffs(const RunFile& baseline, const RunFile& contender);

struct Comparison {
  std::vector<CompareEntry> entries;
  std::vector<EnvDiff> env_diffs;  // non-empty only when forced
  CompareOptions options;
  // 1 when a benchmark is significantly slower beyond the threshold, disappeared, or failed
  // where the baseline ran; else 0.
  int exit_code() const;
};

// Throws UsageError listing the differences when the environments differ and !force.
Comparison compare_runs(const RunFile& baseline, const RunFile& contender, const CompareOptions& opts, bool force);

std::string comparison_markdown(const Comparison& c, const std::string& baseline_source,
                                const std::string& contender_source);

}  // namespace pb::reports
