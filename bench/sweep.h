// The measuring half of `parbench run`: one configuration's Google Benchmark body, and the
// reporter that records Google Benchmark's JSON plus every iteration's time.
#pragma once

#include <benchmark/benchmark.h>

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "bench/roofline.h"
#include "strategies/strategy.h"
#include "workloads/workload.h"

namespace pb {

struct Config {
  std::string name;  // the benchmark's identity (reports::bench_name)
  std::string strategy;
  int devices = 1;
  int64_t global_batch = 1;
  StrategyOptions options;
  int index = 0;  // 1-based, for the progress lines
};

// What every benchmark of the sweep shares; the strategy of the configuration being measured
// stays alive across GB's calls of the same benchmark (iteration-count search, repetitions),
// so setup and warm-up happen once per configuration.
struct Sweep {
  NetSpec net;
  NetPlan plan;
  std::vector<float> params;
  int64_t warmup = 0;
  uint64_t seed = 0;
  int total = 0;
  std::string active_name;
  std::unique_ptr<Strategy> active;
  std::map<std::string, std::string> failed;  // configuration -> error: later calls skip at once
  // Per configuration, the iteration times of every call GB made of it, in order.
  std::map<std::string, std::vector<std::vector<double>>> calls;
  // Per configuration: its stages' layer ranges and ddp's buckets (schema layout), as JSON.
  std::map<std::string, std::string> layouts;
  // Per configuration: the per-worker memory of the plan it ran (plan/memory.h) summed over its
  // workers, as allocated_bytes sums their allocators' peaks; the library workspace it counts is
  // measured once per layer list and threads per worker (oneDNN's scratch grows with its team) on a
  // CPU slot no worker uses (`workspace`, kept across configurations).
  std::map<std::string, double> predicted_bytes;
  // (`workspace`: layers alone; `sequential_workspace`: runs of layers as one Sequential;
  // `tp_workspace`: tp's slices, under bf16 with their fp32 partial input gradients).
  std::map<int, std::function<double(const std::vector<LayerPlan>&, int64_t)>> workspace, sequential_workspace,
      tp_workspace;
  // CPU: the process's resident bytes before any configuration (the program and its libraries),
  // every configuration's runtime_bytes.
  double base_resident = 0;
  // The device's peak and bandwidth (bench/roofline.h): mfu and the trace's roofline fractions.
  Roofline roofline;
  // Per configuration: its first step after setup (counter warmup_s), on the timed steps' clock.
  std::map<std::string, double> warmup_s;
  // --trace: the folder one traced step per configuration is written to (empty: none), and the
  // configurations traced so far.
  std::string trace_dir;
  std::set<std::string> traced;
  // The folder each configuration's plan is written to, as `plan --format json` prints it and
  // `run --plan` reads it (empty: none), and the configurations written so far.
  std::string plan_dir;
  std::set<std::string> planned;
  // What every kept plan was made for (Plan::identity: the workload, its shapes, the dtypes), as
  // `parbench plan` writes it, so that `run --plan` of one is checked as of any plan file.
  std::vector<std::pair<std::string, std::string>> identity;
  void release() {
    active.reset();
    active_name.clear();
  }
};

void run_config(benchmark::State& state, Sweep& sw, const Config& c);
// Untimed, before the sweep: sets up and steps configurations so that what only a process's
// first configuration pays (one-time set-up, first-touch memory, clock ramp) is paid here.
void prime(Sweep& sw, const std::vector<Config>& configs);
// The --trace file of a benchmark in the run folder: trace-<name, / and : as _>.json.
std::string trace_file_name(const std::string& bench);
// plans/<this>: the benchmark's name made a file name, as trace_file_name.
std::string plan_file_name(const std::string& bench);

// Tees GB's runs to the display and to a JSON reporter over a buffer; after every report the
// buffer, closed, replaces the JSON file atomically, so an interrupted sweep leaves valid JSON of
// what finished. The format is GB's own JSONReporter's, plus one top-level field: every timed
// iteration (schema.h). The display: GB's reporter (--gbench-console, or --benchmark_format;
// `mib` renames byte counters to MiB for its console), or with none the short console: a line
// per configuration from the record just written (reports/console.h), on stdout.
class RecordingReporter final : public benchmark::BenchmarkReporter {
 public:
  RecordingReporter(benchmark::BenchmarkReporter* display, bool mib, std::string path, const Sweep& sweep);
  bool ReportContext(const Context& context) override;
  void ReportRuns(const std::vector<Run>& runs) override;
  void Finalize() override;
  int failed() const { return static_cast<int>(failed_.size()); }

 private:
  void save(bool finalized);
  void print_lines(const std::vector<Run>& runs);
  benchmark::BenchmarkReporter* display_;
  bool mib_ = false;
  std::string saved_;               // the record as last written
  std::set<std::string> printed_;   // configurations with their console line
  std::set<std::string> titles_;    // the tables' titles printed above their lines
  benchmark::JSONReporter json_;
  std::ostringstream buffer_;
  std::string path_;
  const Sweep& sweep_;
  std::set<std::string> failed_;  // benchmarks with an error
  std::map<std::string, std::vector<std::vector<double>>> times_;  // benchmark -> repetitions
};

// Ranks other than 0 of a multi-process job run every benchmark in step with rank 0 but report
// nothing: rank 0 alone prints and writes.
class NullReporter final : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

}  // namespace pb
