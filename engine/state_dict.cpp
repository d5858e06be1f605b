// Reading and writing state_dict-named .npy parameter files.
#include "engine/state_dict.h"

#include <algorithm>

#include "engine/check.h"
#include "engine/fsutil.h"
#include "engine/npy.h"

namespace pb {

std::vector<ParamEntry> param_entries(const NetPlan& plan) {
  std::vector<ParamEntry> out;
  for (const LayerPlan& l : plan.layers) {
    if (l.weight_numel == 0) continue;
    const std::string prefix = l.spec.name.empty() ? std::to_string(l.index) : l.spec.name;
    out.push_back({prefix + ".weight", l.param_offset, l.weight_shape});
    out.push_back({prefix + ".bias", l.param_offset + l.weight_numel, l.bias_shape});
  }
  return out;
}

std::vector<float> read_state_dict(const NetPlan& plan, const std::string& dir) {
  std::vector<float> p(static_cast<std::size_t>(plan.param_count));
  for (const ParamEntry& e : param_entries(plan)) {
    NpyArray a = read_npy(dir + "/" + e.key + ".npy", e.shape);
    check_finite(a, dir + "/" + e.key + ".npy");
    std::copy(a.data.begin(), a.data.end(), p.begin() + e.offset);
  }
  return p;
}

void write_state_dict(const NetPlan& plan, const std::vector<float>& params, const std::string& dir) {
  PB_CHECK(static_cast<int64_t>(params.size()) == plan.param_count, "{} values for {} parameters",
           params.size(), plan.param_count);
  make_dirs(dir);
  for (const ParamEntry& e : param_entries(plan))
    write_npy(dir + "/" + e.key + ".npy", e.shape, params.data() + e.offset);
}

}  // namespace pb
