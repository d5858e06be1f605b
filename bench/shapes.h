// --show-shapes of train and replay: per step and worker the shapes of its piece of the batch,
// as the DataParallel tutorial prints them ("In Model: input size [10, 5] output size [10, 2]").
#pragma once

#include <string>

#include "engine/net.h"
#include "strategies/strategy.h"

namespace pb {

// The heading before the first step: "Let's use N devices! (STRATEGY on KIND)".
std::string shapes_heading(const std::string& strategy, int devices, DeviceKind kind);
// One step's lines: an "In Model" line per worker that got a piece (its samples through its
// layers: the whole net, or its stage), a "no piece" line per worker that got none, then the
// "Outside" line of the whole batch.
std::string shapes_of_step(const NetPlan& plan, const StepStats& st, int64_t batch);

}  // namespace pb
