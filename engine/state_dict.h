// Parameters as PyTorch state_dict files: DIR/<layer>.weight.npy and DIR/<layer>.bias.npy, <layer>
// the layer's name, or its index as in the equivalent nn.Sequential.
#pragma once

#include <string>
#include <vector>

#include "engine/net.h"

namespace pb {

std::vector<float> read_state_dict(const NetPlan& plan, const std::string& dir);
void write_state_dict(const NetPlan& plan, const std::vector<float>& params, const std::string& dir);
// (key, offset, shape) of every parameter tensor in flat-buffer order.
struct ParamEntry {
  std::string key;
  int64_t offset;
  Shape shape;
};
std::vector<ParamEntry> param_entries(const NetPlan& plan);

}  // namespace pb
