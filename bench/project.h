// `parbench project` and `parbench calibrate`: shared declarations.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/net.h"
#include "reports/projection.h"

namespace pb {

// A per-layer profile of `plan` on the CPU backend with `threads` threads at each batch size,
// timed as `parbench profile` times it (profile_net), in the profile.json format: what
// `project --validate` uses when no --profile is given. `concurrent` workers time it at once
// (context.concurrent_workers), as a step's workers share the cores: at most as many as the cores
// run at once (`project` shares them beyond that).
projection::Profile engine_profile(const NetPlan& plan, const std::string& workload, std::vector<int64_t> batches,
                                   int threads, int reps = 3, int concurrent = 1);

// How the same work's time grows with the workers computing at once, from the profiles with
// `threads` threads timed by 1, 2, ... concurrent workers: [b - 1] = their total seconds with b at
// once (projection::Options::busy_seconds); empty without one of one worker alone and one of more.
std::vector<double> busy_curve(const std::vector<projection::Profile>& ps, int threads);

// CPU threads per worker for `devices` workers on machine m: `fixed` when > 0, else its shared
// cores divided among the workers of a node, as run shares them (1 off the CPU).
int cpu_threads_for(const projection::Machine& m, int devices, int fixed);

int cmd_project(const std::vector<std::string>& args);
int cmd_calibrate(const std::vector<std::string>& args);

}  // namespace pb
