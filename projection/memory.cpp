// The projection's memory per device: engine/memory_estimate.h's per-worker estimate (the same
// count of each strategy's buffers that a run's peak is checked against) on the profile's net.
#include <algorithm>
#include <map>

#include "engine/memory_estimate.h"
#include "projection/predict.h"

namespace pb::projection {

namespace {

// The profile's net as the memory estimate reads it: each layer's type, shapes and parameters
// (a conv / linear layer: K biases, the rest its weights).
NetPlan memory_plan(const Profile& p) {
  static const std::map<std::string, LayerType> types = {
      {"conv2d", LayerType::Conv2d}, {"linear", LayerType::Linear}, {"relu", LayerType::ReLU}, {"flatten", LayerType::Flatten}};
  NetPlan plan;
  for (const LayerProfile& l : p.layers) {
    LayerPlan lp;
    lp.index = static_cast<int>(plan.layers.size());
    lp.spec.type = types.at(l.type);
    lp.in = l.in, lp.out = l.out;
    const bool weighted = lp.spec.type == LayerType::Conv2d || lp.spec.type == LayerType::Linear;
    lp.bias_numel = weighted ? std::min(l.params, l.out.front()) : 0;
    lp.weight_numel = l.params - lp.bias_numel;
    (lp.spec.type == LayerType::Conv2d ? lp.spec.out_channels : lp.spec.out_features) = l.out.front();
    lp.forward_flops = l.forward_flops;
    plan.param_count += l.params;
    plan.layers.push_back(lp);
  }
  if (!plan.layers.empty()) plan.input = plan.layers.front().in, plan.output = plan.layers.back().out;
  return plan;
}

}  // namespace

double memory_peak(const Profile& p, const Config& c, const std::vector<std::pair<int, int>>& stages) {
  MemoryConfig mc;
  mc.strategy = c.strategy == "pipeline" ? std::string("pipeline") + (c.schedule == "1f1b" ? "-1f1b" : "") +
                                               (c.recompute ? "-recompute" : "")
                                         : c.strategy;
  mc.devices = c.devices;
  mc.micro_batches = c.micro_batches;
  mc.stages = stages;
  mc.workspace = [&p](const std::vector<LayerPlan>& layers, int64_t) {
    double w = 0;
    for (const LayerPlan& l : layers) w = std::max(w, p.layers[static_cast<std::size_t>(l.index)].workspace_bytes);
    return w;
  };
  return estimate_memory(memory_plan(p), c.global_batch, mc).worker_peak();
}

}  // namespace pb::projection
