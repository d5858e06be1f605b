#include "strategies/stages.h"

#include <algorithm>
#include <limits>
#include <map>
#include <tuple>

#include <fmt/ranges.h>

#include "engine/check.h"
#include "engine/layer_profile.h"
#include "engine/process.h"

namespace pb {

std::vector<std::pair<int, int>> split_stages(const NetPlan& plan, int stages, const std::vector<int>& balance,
                                              const std::string& strategy) {
  const int layers = static_cast<int>(plan.layers.size());
  if (stages > layers)
    throw UsageError(fmt::format("{}: {} stages but the net has only {} layer(s); every stage needs one",
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
  std::vector<double> flops;
  for (const LayerPlan& l : plan.layers) flops.push_back(l.forward_flops);
  return split_stages_by(plan, stages, flops, strategy);
}

std::vector<std::pair<int, int>> split_stages_by(const NetPlan& plan, int stages, const std::vector<double>& weights,
                                                 const std::string& strategy) {
  const int layers = static_cast<int>(plan.layers.size());
  PB_CHECK(static_cast<int>(weights.size()) == layers, "{} stage weights for {} layers", weights.size(), layers);
  if (stages > layers)
    throw UsageError(fmt::format("{}: {} stages but the net has only {} layer(s); every stage needs one",
                                 strategy, stages, layers));
  std::vector<std::pair<int, int>> out;
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
  for (int i = 0; i < layers; ++i) prefix[i + 1] = prefix[i] + weights[i];
  // Linear partition: best[p][j] = smallest possible largest-stage weight for layers [0, pos[j])
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

std::vector<std::pair<int, int>> stage_ranges(const NetPlan& plan, int stages, const StrategyOptions& o,
                                              int micro_batches, Device device, const std::string& strategy) {
  using By = StrategyOptions::BalanceBy;
  if (!o.balance.empty() || o.balance_by == By::Flops) return split_stages(plan, stages, o.balance, strategy);
  const int layers = static_cast<int>(plan.layers.size());
  if (o.balance_by == By::Seed) {
    if (o.seed_first_stage <= 0 || o.seed_first_stage >= layers)
      throw UsageError(fmt::format("{}: --balance seed is the seed's split of great_net (after its 512-channel layer); "
                                   "this workload has none: use --balance time, a list of layers per stage, or the "
                                   "default (FLOPs)", strategy));
    if (stages != 2)
      throw UsageError(fmt::format("{}: --balance seed is the seed's 2-stage split (layers [0, {}) up to the 512-channel "
                                   "layer and its ReLU, then [{}, {})); this configuration has {} stage(s) (devices)",
                                   strategy, o.seed_first_stage, o.seed_first_stage, layers, stages));
    return split_stages(plan, 2, {o.seed_first_stage, layers - o.seed_first_stage}, strategy);
  }
  // By time, as torchgpipe's balance_by_time: each layer's forward + backward on the device a
  // stage runs on, at the size of batch a stage sees (one micro-batch).
  const int64_t micro = std::max<int64_t>(1, (o.profile_batch + micro_batches - 1) / std::max(1, micro_batches));
  if (o.layer_seconds) return split_stages_by(plan, stages, o.layer_seconds(micro), strategy);
  std::vector<double> seconds;
  {
    std::unique_ptr<Backend> be = make_backend(device, o.backend);
    const NetProfile p = profile_net(plan, *be, {micro, 1, 3, 0});
    for (const LayerTimes& t : p.layers) seconds.push_back(world_max(t.total_s()));
  }
  return split_stages_by(plan, stages, seconds, strategy);
}

std::vector<int64_t> skip_bytes(const Plan& p) {
  const int workers = static_cast<int>(p.actions.size());
  std::map<std::pair<int, int>, std::pair<int, int>> stage;  // (worker, chunk) -> its layers
  std::map<std::tuple<int, int, int>, std::vector<const Action*>> recvs;  // (group, from, to) -> in order
  for (int w = 0; w < workers; ++w)
    for (const Action& a : p.actions[w]) {
      if (a.kind == ActionKind::Forward && !a.writes.empty())
        stage[{w, p.buffers.at(a.writes[0]).chunk}] = {a.layer_begin, a.layer_end};
      if (a.kind == ActionKind::Recv) recvs[{a.group, a.peer, w}].push_back(&a);
    }
  std::vector<int64_t> out(workers, 0);
  std::map<std::tuple<int, int, int>, std::size_t> sent;  // (group, from, to) -> sends so far
  for (int w = 0; w < workers; ++w)
    for (const Action& a : p.actions[w]) {
      if (a.kind != ActionKind::Send || a.reads.empty() || a.peer < 0 || a.peer >= workers) continue;
      const Action* r = recvs[{a.group, w, a.peer}].at(sent[{a.group, w, a.peer}]++);  // its receive
      const BufferRole role = p.buffers.at(a.reads[0]).role;
      if (role == BufferRole::Input) out[w] += a.bytes;  // the net's input, to a later stage that reads it
      if (a.layer_begin < 0 || r->writes.empty()) continue;
      // A chain's: a stage's last output to the stage after it, or its input gradient to the one before.
      const auto [begin, end] = stage.at({w, p.buffers[a.reads[0]].chunk});
      const auto [to_begin, to_end] = stage.at({a.peer, p.buffers[r->writes[0]].chunk});
      const bool chain = role == BufferRole::InputGrad ? a.layer_begin == begin - 1 && to_end == begin
                                                       : a.layer_begin == end - 1 && to_begin == end;
      if (!chain) out[w] += a.bytes;
    }
  return out;
}

StageLinks stage_links(const NetPlan& plan, const std::vector<std::pair<int, int>>& ranges, int s) {
  auto stage_of = [&](int layer) {
    if (layer == kNetInput) return 0;
    for (std::size_t t = 0; t < ranges.size(); ++t)
      if (layer >= ranges[t].first && layer < ranges[t].second) return static_cast<int>(t);
    PB_CHECK(false, "layer {} is in no stage", layer);
    return -1;
  };
  auto numel = [&](int layer) { return numel_of(layer == kNetInput ? plan.input : plan.layers[layer].out); };
  StageLinks k;
  k.boundary = stage_boundary(plan, ranges[s].first, ranges[s].second);
  for (int e : k.boundary.entries) {
    k.entry_from.push_back(s == 0 ? -1 : stage_of(e));
    k.entry_numel.push_back(numel(e));
  }
  for (int t = s + 1; t < static_cast<int>(ranges.size()); ++t) {
    const StageBoundary reader = stage_boundary(plan, ranges[t].first, ranges[t].second);
    for (int e : reader.entries) {
      if (stage_of(e) != s) continue;
      const int exit = e == kNetInput ? -1 : static_cast<int>(std::find(k.boundary.exits.begin(), k.boundary.exits.end(), e) -
                                                              k.boundary.exits.begin());
      k.outs.push_back({exit, e, t});
      k.out_numel.push_back(numel(e));
    }
  }
  return k;
}

}  // namespace pb
