// The projection's one view of a strategy: its plan (a generator's or a user's), priced action by
// action -- compute from the profile, communication from the machine's link costs -- and played
// by the simulator. Nothing here knows one strategy from another.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "engine/net.h"
#include "plan/plan.h"
#include "projection/step_builder.h"

namespace pb::projection {

// The profile's net as the generators and the memory estimate read it: each layer's type, shapes,
// parameters (a conv / linear layer: K biases, the rest its weights), offsets and FLOPs.
NetPlan net_of(const Profile& p);

// A plan as the simulator's actors: per worker its compute actor, and one actor per
// communication lane it starts asynchronous work on (collectives only where the machine overlaps
// them with compute; elsewhere they block the compute lane, as they do). `comm_bytes` adds up
// what all workers send. UsageError naming worker and action for one the profile cannot price.
struct PricedPlan {
  std::vector<Actor> actors;
  double comm_bytes = 0;
  int freed_units = 0;  // distinct layer ranges worker 0 gathers and frees (fsdp's units)
};
PricedPlan price_plan(const Plan& plan, const Profile& p, const Machine& m, StepBuilder& bl);

}  // namespace pb::projection
