// Google Benchmark JSON files -> records. The one place that knows GB's JSON layout; every
// report and comparison reads runs through it, and malformed input names the file and field.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace pb::reports {

// One entry of GB's "benchmarks" array: a repetition (run_type "iteration") or an aggregate.
struct BenchRun {
  std::string name;            // GB "name" (aggregates carry a suffix such as _median)
  std::string run_name;        // GB "run_name": the benchmark, shared by its repetitions
  bool aggregate = false;
  std::string aggregate_name;  // mean, median, stddev, cv, ...
  bool percentage = false;     // aggregate_unit "percentage" (cv): real_time is a fraction
  int64_t repetitions = 1;
  int64_t repetition_index = 0;
  int64_t iterations = 0;
  double real_s = 0;           // per iteration, seconds (time_unit applied)
  double cpu_s = 0;
  bool error = false;
  std::string error_message;
  std::map<std::string, double> counters;  // user counters: every other numeric field
};

struct RunFile {
  std::string source;                          // the path, for messages
  std::map<std::string, std::string> context;  // context entries as text (numbers dumped)
  std::vector<BenchRun> runs;
  std::string context_value(const std::string& key, const std::string& fallback = "") const;
};

// Google Benchmark writes NaN and Infinity bare (the cv aggregate of a counter that is always 0
// is NaN); strict JSON has no such tokens. Returns the text with them, outside strings, as null.
std::string nan_to_null(const std::string& json_text);

// Throws pb::UsageError "SOURCE: what is wrong" for text that is not JSON, JSON that is not a
// Google Benchmark report (no "benchmarks" array), and missing or mistyped fields.
RunFile parse_run_json(const std::string& text, const std::string& source);
RunFile load_run_json(const std::string& path);

// One benchmark's repetitions gathered from a file: what reports and comparisons work on.
struct Benchmark {
  std::string name;                                  // run_name
  std::vector<double> times_s;                       // real time per iteration, per repetition
  std::map<std::string, std::vector<double>> counters;  // per repetition
  std::map<std::string, double> aggregates;          // aggregate_name -> seconds (GB's own)
  bool error = false;
  std::string error_message;
  int64_t iterations = 0;                            // of the first repetition
  int repetitions() const { return static_cast<int>(times_s.size()); }
  // Median over repetitions; GB's median aggregate when only aggregates were written.
  std::optional<double> median_s() const;
  std::optional<double> counter_median(const std::string& key) const;
  std::optional<double> counter_max(const std::string& key) const;
};

// Benchmarks in order of first appearance. Runs of the same name (several files, or a file
// with repetitions) are pooled; an errored run marks the benchmark as errored.
std::vector<Benchmark> collect_benchmarks(const std::vector<const RunFile*>& files);
std::vector<Benchmark> collect_benchmarks(const RunFile& file);

}  // namespace pb::reports
