// What a step's per-worker breakdown says about the configuration: shares of device time,
// exposed communication, the measured pipeline bubble, and algorithm / bus bandwidth per
// collective kind (nccl-tests' definitions). docs/reports.md gives each formula.
#pragma once

#include <optional>

#include "strategies/strategy.h"

namespace pb {

struct KindBandwidth {
  double bytes = 0;    // nccl-tests "size", summed over the step's calls (see breakdown())
  double seconds = 0;  // their transfer time
  double algbw = 0;    // bytes / seconds
  double busbw = 0;    // algbw x bus_factor(kind, ranks)
};

struct StepBreakdown {
  double step_s = 0;
  // Shares of the device time N x step_s (N: every worker of the configuration); they add to 1.
  double compute_share = 0, transfer_share = 0, idle_share = 0, other_share = 0;
  double transfer_s_max = 0;  // the largest transfer time of a worker
  double bytes_sent = 0;      // summed over the workers
  int critical_worker = 0;    // the worker idle least: the step's critical path runs through it
  double exposed_comm_s = 0;  // its transfer time not overlapped by its own compute
  std::optional<double> measured_bubble;  // mp/pipeline: idle time of the stages / (P x step_s)
  std::optional<KindBandwidth> kinds[kCollKinds];  // kinds with calls in the step
};

StepBreakdown breakdown(const StepStats& s);

}  // namespace pb
