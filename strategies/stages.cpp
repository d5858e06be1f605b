#include "strategies/stages.h"

#include <algorithm>
#include <limits>

#include <fmt/ranges.h>

#include "engine/check.h"

namespace pb {

std::vector<std::pair<int, int>> split_stages(const NetPlan& plan, int stages, const std::vector<int>& balance,
                                              const std::string& strategy) {
  const int layers = static_cast<int>(plan.layers.size());
  if (stages > layers)
    throw UsageError(fmt::format("{}: {} stages (one per device) but the net has only {} layer(s); every stage needs one",
                                 strategy, stages, layers));
  std::vector<std::pair<int, int>> out;
  if (!balance.empty()) {
    if (static_cast<int>(balance.size()) != stages)
      throw UsageError(fmt::format("{}: --balance {} has {} entries for {} stages (devices)", strategy,
                                   fmt::join(balance, ","), balance.size(), stages));
    int at = 0;
    for (int b : balance) {
      if (b < 1) throw UsageError(fmt::format("{}: --balance {}: every stage needs at least one layer", strategy, fmt::join(balance, ",")));
      out.emplace_back(at, at + b);
      at += b;
    }
    if (at != layers)
      throw UsageError(fmt::format("{}: --balance {} sums to {}, but the net has {} layers", strategy,
                                   fmt::join(balance, ","), at, layers));
    return out;
  }
  // Stages start only before a layer with FLOPs, so a ReLU stays with its producer -- unless
  // that leaves too few places to cut.
  std::vector<int> pos = {0};
  for (int i = 1; i < layers; ++i)
    if (plan.layers[i].forward_flops > 0) pos.push_back(i);
  if (static_cast<int>(pos.size()) < stages) {
    pos.clear();
    for (int i = 0; i < layers; ++i) pos.push_back(i);
  }
  pos.push_back(layers);
  std::vector<double> prefix(layers + 1, 0.0);
  for (int i = 0; i < layers; ++i) prefix[i + 1] = prefix[i] + plan.layers[i].forward_flops;
  // Linear partition: best[p][j] = smallest possible largest-stage FLOPs for layers [0, pos[j])
  // in p stages; from[p][j] = where its last stage starts.
  const int K = static_cast<int>(pos.size());
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(stages + 1, std::vector<double>(K, inf));
  std::vector<std::vector<int>> from(stages + 1, std::vector<int>(K, -1));
  best[0][0] = 0;
  for (int p = 1; p <= stages; ++p)
    for (int j = p; j < K; ++j)
      for (int i = p - 1; i < j; ++i) {
        const double c = std::max(best[p - 1][i], prefix[pos[j]] - prefix[pos[i]]);
        if (c < best[p][j]) best[p][j] = c, from[p][j] = i;
      }
  out.resize(stages);
  for (int p = stages, j = K - 1; p >= 1; j = from[p][j], --p) out[p - 1] = {pos[from[p][j]], pos[j]};
  return out;
}

}  // namespace pb
