// A configuration (strategy, devices, batch and its options), how to price it, and what the
// projection predicts for it: the step time and its parts, peak memory, bytes moved.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "plan/plan.h"
#include "projection/machine.h"
#include "projection/profile.h"
#include "projection/simulator.h"

namespace pb::projection {

struct Config {
  // A registered strategy or family member (strategies/registry.cpp); a registered variant
  // (pipeline-1f1b) is priced as its base with the variant's options (strategies/sweep.h).
  std::string strategy;
  int devices = 1;
  int64_t global_batch = 1;
  int micro_batches = 1;  // pipeline, dp<D>xpp<P>: per replica
  double bucket_bytes = 25.0 * (1 << 20);  // ddp
  std::string schedule = "gpipe";          // pipeline: gpipe or 1f1b (strategies/sweep.h schedule_name)
  bool recompute = false;                  // pipeline: stage activations recomputed in backward
  double first_bucket_bytes = 1.0 * (1 << 20);  // ddp: the first bucket (the last layers'), as run's --first-bucket-mb
  std::vector<int> balance;                // mp, pipeline, dp x pp: layers per stage (run's --balance L1,L2,..)
  std::string balance_by = "flops";        // without a list: flops, time (the profile's layer times) or seed
  bool cap_micro_batches = false;          // dp x pp: at most a replica's samples (run's default micro-batches)
  std::shared_ptr<const Plan> plan;        // --plan FILE: this plan priced as written, not the strategy's
  // --reduce-dtype / --param-dtype: fp32 or bf16, where the strategy takes them (strategies/registry.h).
  std::string reduce_dtype = "fp32", param_dtype = "fp32";
  int virtual_stages = 2;                  // pipeline-interleaved: model chunks per worker (run's --virtual-stages)
  std::string label() const;               // its row's label, as the registry words it (strategies/sweep.h)
  std::vector<std::string> options() const;  // benchmark-name options: micro_batches:8, ...
};

struct Options {
  double compute_scale = 1;  // profile seconds x this (a profile from another device)
  int threads_per_worker = 0;  // CPU: 0 = cores shared as run shares them: max(1, cores / N)
  // CPU, measured: busy_seconds[b - 1] = the same work's seconds while b workers (of these
  // threads) compute at once on the node. When given, a worker's speed with b busy is
  // busy_seconds[k0 - 1] / busy_seconds[b - 1] (k0: the profile's concurrent workers) instead of
  // the parallel_threads formula; beyond its end, time grows in proportion to b.
  std::vector<double> busy_seconds;
};

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

// The largest worker's peak memory for `c` (its run name, micro-batches as its plan runs them),
// as strategies/memory_estimate.h counts each strategy's buffers, with the profile's workspace of the
// layers a worker runs (their largest: one backend's scratch serves them all). `stages`: mp,
// pipeline, dp<D>xpp<P>: each stage's layers [begin, end). Prediction::peak_bytes.
double memory_peak(const Profile& p, const Config& c, const std::string& name, int micro_batches,
                   const std::vector<std::pair<int, int>>& stages);

}  // namespace pb::projection
