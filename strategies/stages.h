// Splitting the layer list into contiguous pipeline stages (mp, pipeline).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "engine/net.h"

namespace pb {

// Layer ranges [begin, end) of `stages` contiguous stages: `balance` (layers per stage) when not
// empty, else balanced by forward FLOPs with zero-FLOP layers (ReLU, Flatten) kept with their
// producer. UsageError when a stage would get no layer or the balance does not fit the net.
std::vector<std::pair<int, int>> split_stages(const NetPlan& plan, int stages, const std::vector<int>& balance,
                                              const std::string& strategy);

}  // namespace pb
