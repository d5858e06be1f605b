// A per-layer profile in the profile.json format for `project --validate` when no --profile is
// given: `parbench profile`'s own timing (engine/layer_profile.h) at each batch size.
#include "bench/project.h"

#include <algorithm>

#include "engine/check.h"
#include "engine/layer_profile.h"

namespace pb {

projection::Profile engine_profile(const NetPlan& plan, const std::string& workload, std::vector<int64_t> batches,
                                   int threads, int reps) {
  std::sort(batches.begin(), batches.end());
  batches.erase(std::unique(batches.begin(), batches.end()), batches.end());
  PB_CHECK(!batches.empty() && batches.front() >= 1, "profile: no batch sizes");
  BackendOptions bo;
  bo.threads = threads;
  auto be = make_backend(cpu(0), bo);
  projection::Profile p;
  p.batches = batches;
  p.threads = threads;
  p.device_kind = "cpu";
  p.context = {{"workload", workload}, {"device_kind", "cpu"}, {"threads", threads},
               {"source", "per-layer timing of parbench profile, run by parbench project"}};
  for (const LayerPlan& l : plan.layers) {
    projection::LayerProfile lp;
    lp.index = l.index;
    lp.type = layer_type_name(l.spec.type);
    lp.in = l.in;
    lp.out = l.out;
    lp.params = l.weight_numel + l.bias_numel;
    lp.forward_flops = l.forward_flops;
    lp.activation_bytes_per_sample = static_cast<double>(numel_of(l.out)) * sizeof(float);
    p.layers.push_back(std::move(lp));
  }
  std::vector<double> adam;
  for (int64_t b : batches) {
    const NetProfile np = profile_net(plan, *be, {b, 1, reps, 0});
    for (std::size_t i = 0; i < p.layers.size(); ++i) {
      p.layers[i].forward_s.push_back(np.layers[i].forward_s);
      p.layers[i].backward_data_s.push_back(np.layers[i].backward_data_s);
      p.layers[i].backward_weights_s.push_back(np.layers[i].backward_weights_s);
    }
    p.loss_s.push_back(np.loss_s);
    adam.push_back(np.optimizer_s);
  }
  std::sort(adam.begin(), adam.end());
  p.optimizer_s_per_param = adam[adam.size() / 2] / static_cast<double>(std::max<int64_t>(plan.param_count, 1));
  return p;
}

}  // namespace pb
