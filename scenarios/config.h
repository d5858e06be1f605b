// A configuration `project` prices: a strategy at a device count and batch, with the options a
// run of it would take, and the plan that run would run (its generator's, strategies/plan_gen.h,
// or a plan file). The projection (projection/) prices plans; this is where strategies become them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "plan/plan.h"
#include "projection/profile.h"
#include "strategies/strategy.h"
#include "strategies/sweep.h"

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

// The options a run of `c` would take (StrategyOptions), --balance time from the profile's
// per-layer forward + backward times instead of timing a device (without a profile: by FLOPs).
StrategyOptions options_of(const Config& c, const Profile* p);

// `c` as the registry reads a configuration (strategies/sweep.h), and the name run gives it
// (a strategy with its schedule and recompute as the registered variant, a member with its suffix).
Setting setting_of(const Config& c);
std::string run_name(const Config& c);

// Config::balance / balance_by from run's --balance value (L1,L2,.. | time | seed; empty: by
// FLOPs); UsageError naming `what` for anything else.
void set_balance(Config& c, const std::string& balance, const std::string& what);

// The plan `c` runs: Config::plan when given, else its strategy's generator (UsageError where
// the run refuses the configuration).
Plan plan_for(const Profile& p, const Config& c);

}  // namespace pb::projection
