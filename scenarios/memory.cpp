// The projection's memory per device: the plan's own count (plan/memory.h, the one a run's peak is
// checked against) on the profile's net, with the profile's workspace of the layers a worker runs.
#include <algorithm>

#include "plan/memory.h"
#include "projection/plan_price.h"
#include "scenarios/predict.h"

namespace pb::projection {

double memory_peak(const Profile& p, const Plan& plan) {
  WorkspaceProbes probes;
  probes.layers = [&p](const std::vector<LayerPlan>& layers, int64_t) {
    double w = 0;  // one backend's scratch serves every layer: their largest
    for (const LayerPlan& l : layers) w = std::max(w, p.layers[static_cast<std::size_t>(l.index)].workspace_bytes);
    return w;
  };
  return plan_memory(plan, net_of(p), probes).worker_peak();
}

}  // namespace pb::projection
