// mp: model parallelism. The layer list in contiguous stages, one per device (balanced by forward
// FLOPs, or StrategyOptions::balance), activations sent forward and gradients back, the loss on
// the last stage, an Adam per stage: the pipeline of pipeline.cpp with one micro-batch.
#include "strategies/registry.h"

namespace pb {

std::unique_ptr<Strategy> make_mp(const StrategyOptions& o) {
  StrategyOptions one = o;  // one micro-batch: every schedule is the same, nothing to recompute
  one.schedule = Schedule::GPipe;
  one.recompute = false;
  return make_staged(one, "mp", 1);
}

}  // namespace pb
