// The projection's one view of a strategy: the plan its generator makes (strategies/plan_gen.h) or a
// user wrote, priced action by action -- compute from the profile, communication from the machine's
// link costs -- and played by the simulator. Nothing here knows one strategy from another.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "engine/net.h"
#include "plan/plan.h"
#include "projection/step_builder.h"
#include "strategies/strategy.h"
#include "strategies/sweep.h"

namespace pb::projection {

// The profile's net as the generators and the memory estimate read it: each layer's type, shapes,
// parameters (a conv / linear layer: K biases, the rest its weights), offsets and FLOPs.
NetPlan net_of(const Profile& p);

// The options a run of `c` would take (StrategyOptions), --balance time from the profile's
// per-layer forward + backward times instead of timing a device (without a profile: by FLOPs).
StrategyOptions options_of(const Config& c, const Profile* p);

// `c` as the registry reads a configuration (strategies/sweep.h), and the name run gives it
// (a strategy with its schedule and recompute as the registered variant, a member with its suffix).
Setting setting_of(const Config& c);
std::string run_name(const Config& c);

// The plan `c` runs: Config::plan when given, else its strategy's generator (UsageError where
// the run refuses the configuration).
Plan plan_for(const Profile& p, const Config& c);

// A plan as the simulator's actors: per worker its compute actor, and one actor per
// communication lane it starts asynchronous work on (collectives only where the machine overlaps
// them with compute; elsewhere they block the compute lane, as they do). `comm_bytes` adds up
// what all workers send. UsageError naming worker and action for one the profile cannot price.
struct PricedPlan {
  std::vector<Actor> actors;
  double comm_bytes = 0;
  int freed_units = 0;  // distinct layer ranges worker 0 gathers and frees (fsdp's units)
  std::vector<std::pair<int, int>> stages;  // the layers of each worker of replica 0, when more than one
};
PricedPlan price_plan(const Plan& plan, const Profile& p, const Machine& m, StepBuilder& bl);

}  // namespace pb::projection
