// What the projection predicts for a configuration (scenarios/config.h): its plan priced
// (projection/plan_price.h) and played by the simulator -- the step time and its parts, peak
// memory, bytes moved.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "projection/machine.h"
#include "projection/options.h"
#include "projection/profile.h"
#include "projection/simulator.h"
#include "scenarios/config.h"

namespace pb::projection {

struct Prediction {
  Config config;
  bool feasible = true;
  std::string reason;      // why not, when infeasible
  double step_s = 0;
  double compute_s = 0;        // the busiest worker's compute
  double exposed_comm_s = 0;   // its transfers while it is not computing
  double idle_s = 0;           // the rest: waiting for peers (pipeline bubble), starting the step
  double peak_bytes = 0;       // per device, the largest
  bool fits = true;
  double comm_bytes = 0;       // per step, sent by all workers together
  double samples_per_s = 0;
  // Each action of its plan as the simulator played it (worker, action id, start and end in
  // seconds from the step's start, before the per-step overheads): project --validate's per-action
  // comparison.
  std::vector<ActionSpan> actions;
};

Prediction predict(const Profile& p, const Machine& m, const Config& c, const Options& o = {});

// The largest worker's peak memory in `plan` (a step of the profile's net), as plan/memory.h counts
// its buffers, with the profile's workspace of the layers a worker runs (their largest: one
// backend's scratch serves them all). Prediction::peak_bytes.
double memory_peak(const Profile& p, const Plan& plan);

}  // namespace pb::projection
