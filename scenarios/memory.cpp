// The projection's memory per device: strategies/memory_estimate.h's per-worker estimate (the same
// count of each strategy's buffers that a run's peak is checked against) on the profile's net.
#include <algorithm>

#include "strategies/memory_estimate.h"
#include "strategies/registry.h"
#include "projection/plan_price.h"
#include "scenarios/predict.h"

namespace pb::projection {

double memory_peak(const Profile& p, const Config& c, const std::string& name, int micro_batches,
                   const std::vector<std::pair<int, int>>& stages) {
  MemoryConfig mc;
  mc.strategy = name;
  mc.devices = c.devices;
  mc.micro_batches = micro_batches;
  mc.stages = stages;
  mc.virtual_stages = c.virtual_stages;
  mc.bf16 = p.precision == "bf16";
  mc.reduce_bf16 = c.reduce_dtype == "bf16" && takes_reduce_dtype(c.strategy);
  mc.param_bf16 = mc.bf16 && c.param_dtype == "bf16" && takes_param_dtype(c.strategy);
  mc.workspace = [&p](const std::vector<LayerPlan>& layers, int64_t) {
    double w = 0;
    for (const LayerPlan& l : layers) w = std::max(w, p.layers[static_cast<std::size_t>(l.index)].workspace_bytes);
    return w;
  };
  return estimate_memory(net_of(p), c.global_batch, mc).worker_peak();
}

}  // namespace pb::projection
