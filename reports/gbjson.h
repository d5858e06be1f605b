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
  // parbench's "iteration_times_s": per benchmark identity, per repetition, every iteration's
  // seconds (kept whatever Google Benchmark's repetition and aggregate settings).
  std::map<std::string, std::vector<std::vector<double>>> iteration_times;
  // parbench's "layout" of a staged run over a net with skips: per benchmark identity, per worker
  // (its stages), the skip bytes it sends a step.
  std::map<std::string, std::vector<double>> skip_bytes;
  std::string context_value(const std::string& key, const std::string& fallback = "") const;
};

// A benchmark's identity: its name without the suffixes Google Benchmark appends for run
// settings (/iterations:N, /repeats:N, /threads:N, /min_time:T, /min_warmup_time:T,
// /manual_time, /real_time, /process_time), so runs with other --iterations still match.
std::string benchmark_identity(const std::string& run_name);

// Google Benchmark writes NaN and Infinity bare (the cv aggregate of a counter that is always 0
// is NaN); strict JSON has no such tokens. Returns the text with them, outside strings, as null.
std::string nan_to_null(const std::string& json_text);

// Throws pb::UsageError "SOURCE: what is wrong" for text that is not JSON, JSON that is not a
// Google Benchmark report (no "benchmarks" array), missing or mistyped fields, and times that
// are not positive finite numbers (a measured iteration takes time).
RunFile parse_run_json(const std::string& text, const std::string& source);
RunFile load_run_json(const std::string& path);

// The same file with cpu_time as the time (and no wall-clock iteration record): for comparing
// CPU work on a machine whose load makes wall time noisy. Throws UsageError naming the file
// when a benchmark's cpu_time is not the whole process's (its name lacks /process_time).
RunFile with_process_cpu_time(RunFile f);

// One benchmark's repetitions gathered from a file: what reports and comparisons work on.
struct Benchmark {
  std::string name;                                  // benchmark_identity(run_name)
  std::vector<double> times_s;                       // real time per iteration, per repetition
  std::vector<int> times_file;                       // index of the file each repetition came from
  std::vector<std::vector<double>> iteration_times_s;  // per repetition, every iteration (parbench runs)
  std::map<std::string, std::vector<double>> counters;  // per repetition
  std::vector<double> skip_bytes;                     // per stage (a staged run over a net with skips)
  std::map<std::string, double> aggregates;          // aggregate_name -> seconds (GB's own)
  int64_t aggregate_repetitions = 0;                 // "repetitions" of GB's aggregates
  bool error = false;
  std::string error_message;
  int64_t iterations = 0;                            // of the first repetition
  int repetitions() const {
    return times_s.empty() ? static_cast<int>(aggregate_repetitions) : static_cast<int>(times_s.size());
  }
  // Every recorded iteration's time when the run kept them, else the repetitions' times (empty
  // when only GB's aggregates are there).
  std::vector<double> samples_s() const;
  // The median iteration time: the median of samples_s(), else GB's median (or mean) aggregate.
  std::optional<double> median_s() const;
  std::optional<double> counter_median(const std::string& key) const;
  std::optional<double> counter_max(const std::string& key) const;
};

// Benchmarks in order of first appearance. Runs of the same name (several files, or a file
// with repetitions) are pooled; an errored run marks the benchmark as errored.
std::vector<Benchmark> collect_benchmarks(const std::vector<const RunFile*>& files);
std::vector<Benchmark> collect_benchmarks(const RunFile& file);

}  // namespace pb::reports
