// `parbench run` in three parts: sweep planning (flags -> configurations), the JSON context,
// and measuring + recording (bench/sweep.h).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "bench/cli.h"
#include "bench/sweep.h"

namespace pb {

struct RunPlan {
  DeviceKind kind = DeviceKind::Cpu;
  std::string workload;  // the --workload value
  WorkloadOptions wo;
  int64_t batch = 1, iterations = 10;
  std::string scaling;
  std::vector<int64_t> device_counts;
  std::vector<std::string> strategies;
  std::vector<Config> configs;  // in sweep order
};

// Now in UTC as 20261130T170000Z: run folder names.
std::string utc_stamp();
// The flags of `parbench run` (the training flags with lists for strategies and devices).
std::vector<Flag> run_flags();
// Presets, checks, the device-count rule, MPI filtering and the configuration list; fills the
// sweep's net and plan. Throws UsageError for bad flags or an empty sweep.
RunPlan plan_run(const Flags& f, Sweep& sw);
// Machine facts for a JSON context, under the names of reports/schema.h: device kind, CPU,
// convolution backend, GPUs and library versions.
std::vector<std::pair<std::string, std::string>> system_context(DeviceKind kind);
// Machine facts and run settings for the JSON context (and for `compare` to refuse unlike runs).
void add_run_context(const RunPlan& p, const Flags& f, const Sweep& sw);

}  // namespace pb
