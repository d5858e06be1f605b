// The memory a plan's step holds (plan/memory.h).
#include "plan/memory.h"

#include <algorithm>
#include <cmath>

#include "engine/check.h"

namespace pb {

namespace {

enum class Part { Params, State, Activations };

Part part_of(BufferRole r) {
  switch (r) {
    case BufferRole::Params:
    case BufferRole::ShardParams:
    case BufferRole::Gathered:
    case BufferRole::ParamCopy: return Part::Params;
    case BufferRole::Grads:
    case BufferRole::AdamState:
    case BufferRole::ShardGrads:
    case BufferRole::UnitGrads: return Part::State;
    default: return Part::Activations;
  }
}

// `l` as a worker computes `part` of its output channels: the slice tp gives it.
LayerPlan slice_of(const LayerPlan& l, double part) {
  if (part >= 1 || !has_weights(l.spec.type)) return l;
  const int64_t K = l.out[0], k = std::max<int64_t>(1, std::llround(part * static_cast<double>(K)));
  LayerPlan s = l;
  s.out[0] = k;
  (l.spec.type == LayerType::Linear ? s.spec.out_features : s.spec.out_channels) = k;
  s.weight_numel = l.weight_numel / K * k, s.bias_numel = l.bias_numel > 0 ? k : 0;
  return s;
}

double workspace_of(const Plan& p, int w, const NetPlan& net, const WorkspaceProbes& probes) {
  struct Run {
    int begin, end;
    int64_t samples;
    double part;
  };
  std::vector<Run> runs;  // the distinct ranges of the worker's forwards, each at its most samples
  for (const Action& a : p.actions[w]) {
    if ((a.kind != ActionKind::Forward && a.kind != ActionKind::Recompute) || a.samples <= 0) continue;
    auto it = std::find_if(runs.begin(), runs.end(), [&](const Run& r) { return r.begin == a.layer_begin && r.end == a.layer_end; });
    if (it == runs.end()) runs.push_back({a.layer_begin, a.layer_end, a.samples, a.part});
    else it->samples = std::max(it->samples, a.samples), it->part = std::min(it->part, a.part);
  }
  auto measure = [](const WorkspaceMeasure& m, const std::vector<LayerPlan>& layers, int64_t n) {
    return n <= 0 || layers.empty() ? 0.0 : m ? m(layers, n) : im2col_workspace(layers);
  };
  const WorkspaceMeasure& seq = probes.sequential ? probes.sequential : probes.layers;
  auto range = [&](const Run& r) {
    PB_CHECK(r.begin >= 0 && r.end <= static_cast<int>(net.layers.size()) && r.begin < r.end,
             "plan memory: worker {} runs layers [{}, {}) of a net of {}", w, r.begin, r.end, net.layers.size());
    return std::vector<LayerPlan>(net.layers.begin() + r.begin, net.layers.begin() + r.end);
  };
  const bool sliced = std::any_of(runs.begin(), runs.end(), [](const Run& r) { return r.part < 1; });
  if (runs.size() == 1 && !sliced) return measure(seq, range(runs[0]), runs[0].samples);
  std::vector<LayerPlan> all;  // every layer the worker runs, as it runs them
  int64_t most = 0;
  double longest = 0;
  for (const Run& r : runs) {
    most = std::max(most, r.samples);
    for (const LayerPlan& l : range(r))
      if (!sliced || has_weights(l.spec.type)) all.push_back(slice_of(l, r.part));
    if (!sliced && r.end - r.begin > 1) longest = std::max(longest, measure(seq, range(r), r.samples));
  }
  return std::max(longest, measure(sliced && probes.sliced ? probes.sliced : probes.layers, all, most));
}

}  // namespace

MemoryEstimate plan_memory(const Plan& p, const NetPlan& net, const WorkspaceProbes& probes) {
  MemoryEstimate out = estimate_memory(net, p.batch);
  struct Worker {
    double parts[3] = {0, 0, 0};
    double kept = 0, workspace = 0;
    double total() const { return parts[0] + parts[1] + parts[2] + kept + workspace; }
  };
  std::vector<Worker> w(static_cast<std::size_t>(std::max(0, p.workers)));
  for (const PlanBuffer& b : p.buffers)
    if (b.role != BufferRole::KeptGrad && b.worker >= 0 && b.worker < p.workers)
      w[b.worker].parts[static_cast<int>(part_of(b.role))] += static_cast<double>(b.bytes);
  for (int k = 0; k < p.workers; ++k) {
    // Kept output gradients: held from their write to their read, the most at once.
    std::vector<char> live(p.buffers.size(), 0);
    double now = 0;
    for (const Action& a : p.actions[k]) {
      for (int b : a.writes)
        if (p.buffers.at(b).role == BufferRole::KeptGrad && !live[b]) live[b] = 1, now += static_cast<double>(p.buffers[b].bytes);
      w[k].kept = std::max(w[k].kept, now);
      for (int b : a.reads)
        if (live.at(b) && std::find(a.writes.begin(), a.writes.end(), b) == a.writes.end())
          live[b] = 0, now -= static_cast<double>(p.buffers[b].bytes);
    }
    w[k].workspace = workspace_of(p, k, net, probes);
  }
  std::size_t top = 0;
  out.per_worker.clear();
  for (std::size_t i = 0; i < w.size(); ++i) {
    out.per_worker.push_back(w[i].total());
    if (w[i].total() > w[top].total()) top = i;
  }
  if (!w.empty()) {
    out.params = w[top].parts[0];
    out.grads_and_moments = w[top].parts[1];
    out.activations = w[top].parts[2] + w[top].kept;
    out.workspace = w[top].workspace;
  }
  return out;
}

}  // namespace pb
