// How a projection prices a plan beyond the profile and the machine: a scale for the profile's
// times, and how a CPU's workers share its cores.
#pragma once

#include <vector>

namespace pb::projection {

struct Options {
  double compute_scale = 1;  // profile seconds x this (a profile from another device)
  int threads_per_worker = 0;  // CPU: 0 = cores shared as run shares them: max(1, cores / N)
  // CPU, measured: busy_seconds[b - 1] = the same work's seconds while b workers (of these
  // threads) compute at once on the node. When given, a worker's speed with b busy is
  // busy_seconds[k0 - 1] / busy_seconds[b - 1] (k0: the profile's concurrent workers) instead of
  // the parallel_threads formula; beyond its end, time grows in proportion to b.
  std::vector<double> busy_seconds;
};

}  // namespace pb::projection
