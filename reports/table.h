// The comparison table: benchmarks of parbench runs (GB JSON) -> per workload, rows strategy x
// devices with time, spread, throughput, speedup, scaling efficiency, memory, communication and
// bubble, best per device count marked; rendered as markdown, CSV or JSON.
// Formulas: docs/reports.md (the same as DESIGN.md's).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "reports/gbjson.h"

namespace pb::reports {

// A parbench benchmark name, its identity:
//   WORKLOAD[/PARAM:V...]/STRATEGY/devices:N/batch:B[/OPTION:V...][/GB suffixes...]
// e.g. great_net/image:96/width:0.5/pipeline/devices:2/batch:1/micro_batches:2. The workload's
// parameters and the schedule options that change the work are part of the name.
struct BenchName {
  std::string workload, strategy;
  std::vector<std::string> workload_params;  // "image:96", "width:0.5"
  int devices = 0;
  int64_t batch = 0;
  std::vector<std::string> options;          // "micro_batches:2"
  std::string workload_id() const;           // workload with its parameters
};
std::optional<BenchName> parse_bench_name(const std::string& name);
std::string bench_name(const BenchName& n);
// Plain numbers for tables: a few significant digits, never exponent notation for times.
std::string num(double x);
// MFU as a percentage, two significant digits below 10% (CPU runs and small nets sit far below
// 1%), "-" when absent.
std::string mfu_text(const std::optional<double>& mfu);
// Text for one markdown table cell: '|' escaped, newlines flattened.
std::string md_escape(const std::string& s);
// The non-empty items of a comma-separated list (flags, and the list-valued context keys).
std::vector<std::string> split_commas(const std::string& s);

struct Row {
  std::string name;  // the benchmark's identity (benchmark_identity of GB's run_name)
  std::vector<std::string> runs;  // the sources its repetitions came from, in the order given
  std::string strategy;
  int devices = 0;
  bool error = false;
  std::string error_message;
  int repetitions = 0;
  std::optional<double> median_ms;
  std::optional<double> cv;        // fraction
  bool cv_within_run = false;      // one repetition: CV over its iterations (counter iter_cv)
  std::optional<double> samples_per_iteration, samples_per_s, flop_per_s;
  // Counter mfu (flop_per_s / the configuration's peak), median over repetitions; absent when the
  // run knew no peak. warmup_s: the configuration's first step after setup, seconds.
  std::optional<double> mfu, warmup_s;
  std::optional<double> speedup;   // samples/s over regular's on one device
  std::optional<double> efficiency;
  std::string efficiency_base;     // name of the 1-device row efficiency is relative to
  bool efficiency_from_regular = false;  // no 1-device row of its own: relative to regular's
  std::optional<double> peak_mib_max, peak_mib_dev0;
  // The device peak and its parts (counters device_peak_bytes, tensor_bytes, workspace_bytes,
  // runtime_bytes), in MiB; absent in runs made before they were recorded.
  std::optional<double> device_peak_mib, tensor_mib, workspace_mib, runtime_mib;
  // Shares of the device time (N x step time): compute, transfer, idle and the remainder.
  std::optional<double> compute_share, transfer_share, idle_share, other_share;
  std::optional<double> exposed_comm_share;  // exposed_comm_s / iteration time
  std::optional<double> comm_mib_per_iteration;  // bytes_sent_per_iter, in MiB
  std::vector<double> stage_skip_mib;            // per worker (its stages), the skips it sends an iteration (layout's skip_bytes), in MiB
  std::optional<double> bubble;              // pipeline bubble fraction, the formula
  std::optional<double> measured_bubble;     // idle share of the stage workers
  // Per collective kind that ran ("all_reduce", "send_recv", ...): bytes/s.
  std::map<std::string, double> algbw, busbw;
  std::optional<double> workers_used, oversubscribed;
  std::optional<double> threads;  // CPU threads per worker (counter worker_threads)
  // The memory estimate made before the run and the allocations it estimates (all workers), MiB.
  std::optional<double> predicted_mib, allocated_mib;
  // Set when the speedup exceeds N or the efficiency 100%, which N devices cannot give: why.
  std::string implausible;
  // best: ahead of every other row at its device count by more than the two rows' spread (their
  // CVs added); tied: within that spread of the fastest, so no best at that device count.
  bool best = false, tied = false;
  // Spread and stragglers (reports/straggler.h): iteration time percentiles (counters
  // iter_p50_s, iter_p99_s, the median over repetitions), the slowest worker's compute over the
  // median worker's (straggler_ratio), and the straggler named "rank R (host, device)" or empty.
  std::optional<double> iter_p50_ms, iter_p99_ms, straggler_ratio;
  std::string straggler;
};

struct Group {
  std::string workload, scaling, precision, device_kind, workload_params;
  std::string workload_id;       // workload with the parameters its benchmark names carry
  // The runs' context entries that change the work (schema Match::Always / Cpu): a group holds
  // only runs that agree on all of them.
  std::map<std::string, std::string> work;
  std::string distinction;       // what sets this group apart from others with the same title
  bool scaling_assumed = false;  // the run's context did not say; weak assumed
  int64_t batch = 0;             // per device (weak) or global (strong)
  std::string baseline;          // name of the regular 1-device row; empty when absent
  std::optional<double> ideal_base_samples_per_s;  // thr(1) the ideal line scales: N * thr(1)
  std::vector<Row> rows;
  std::vector<std::string> hosts;  // context hosts: each rank's host (one: every worker's)
  std::string title() const;
};

struct Report {
  std::vector<std::string> sources;
  std::vector<Group> groups;
};

// Throws UsageError naming the file when a benchmark name is not a parbench name.
Report build_report(const std::vector<RunFile>& files);

std::string report_markdown(const Report& r);
std::string report_csv(const Report& r);
std::string report_json(const Report& r);

}  // namespace pb::reports
