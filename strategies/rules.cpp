// The rules of strategies/rules.h, shared by the strategies and their plan generators.
#include "strategies/rules.h"

#include <algorithm>
#include <functional>

#include <fmt/format.h>

#include "engine/check.h"
#include "engine/model.h"
#include "strategies/batch.h"
#include "strategies/registry.h"

namespace pb {

namespace {

// Buckets from the last layer backwards (the order backward finishes them): the first closes
// once it holds `first_bytes`, the others `bytes`; a layer is never split. As torch DDP
// (first bucket 1 MiB, then bucket_cap_mb), so the first all-reduce starts early in backward.
std::vector<std::pair<int64_t, int64_t>> bucket_ranges(int begin, int end,
                                                       const std::function<std::pair<int64_t, int64_t>(int)>& range,
                                                       std::size_t first_bytes, std::size_t bytes) {
  std::vector<std::pair<int64_t, int64_t>> out;
  int64_t lo_all = -1, hi_all = -1;
  for (int i = end - 1; i >= begin; --i) {
    const auto [lo, hi] = range(i);
    if (hi == lo) continue;
    if (hi_all < 0) hi_all = hi;
    lo_all = lo;
    const std::size_t cap = out.empty() ? first_bytes : bytes;
    if (static_cast<std::size_t>(hi_all - lo_all) * sizeof(float) >= cap) {
      out.emplace_back(lo_all, hi_all);
      hi_all = -1;
    }
  }
  if (hi_all >= 0) out.emplace_back(lo_all, hi_all);
  return out;
}

std::pair<int64_t, int64_t> plan_grad_range(const NetPlan& plan, int i) {
  const LayerPlan& l = plan.layers[i];
  return {l.param_offset, l.param_offset + l.weight_numel + l.bias_numel};
}

}  // namespace

std::vector<std::pair<int64_t, int64_t>> ddp_buckets(const Sequential& m, std::size_t first_bytes, std::size_t bytes) {
  return bucket_ranges(m.begin(), m.end(), [&](int i) { return m.layer_grad_range(i); }, first_bytes, bytes);
}

std::vector<BucketLayout> ddp_bucket_layout(const NetPlan& plan, std::size_t first_bytes, std::size_t bytes) {
  const int layers = static_cast<int>(plan.layers.size());
  std::vector<BucketLayout> out;
  for (const auto& [lo, hi] :
       bucket_ranges(0, layers, [&](int i) { return plan_grad_range(plan, i); }, first_bytes, bytes)) {
    int last = layers - 1;  // the lowest layer whose gradients lie in [lo, hi)
    for (int i = 0; i < layers; ++i) {
      const auto [a, b] = plan_grad_range(plan, i);
      if (b > a && a >= lo && b <= hi) {
        last = i;
        break;
      }
    }
    // A bucket holds the layers up to the next one's first.
    const int top = out.empty() ? layers - 1 : out.back().first_layer - 1;
    out.push_back({last, top, lo, hi});
  }
  return out;
}

std::vector<std::vector<int64_t>> replica_micro_batches(const std::vector<int64_t>& pieces, int micro, bool cap,
                                                        int64_t batch, const std::string& strategy) {
  const int replicas = static_cast<int>(pieces.size());
  const int64_t least = *std::min_element(pieces.begin(), pieces.end());
  const int m = cap && replicas > 1 ? static_cast<int>(std::min<int64_t>(micro, least)) : micro;
  std::vector<std::vector<int64_t>> out;
  for (int d = 0; d < replicas; ++d) {
    if (m > pieces[d])
      throw UsageError(replicas == 1
                           ? fmt::format("{}: {} micro-batches but the batch has only {} sample(s)", strategy, micro, batch)
                           : fmt::format("{}: {} micro-batches but replica {}'s piece of the batch of {} has only {} "
                                         "sample(s)", strategy, micro, d, batch, pieces[d]));
    out.push_back(chunk_sizes(pieces[d], m));
  }
  return out;
}

int pipeline_slots(Schedule schedule, int stages, int stage, int micro) {
  if (schedule == Schedule::ZeroBubble) return std::min(micro, stages);
  return schedule == Schedule::GPipe ? micro : std::min(micro, stages - stage);
}

std::vector<PipeOp> pipeline_ops(Schedule schedule, bool recompute, int stages, int stage, int micro) {
  std::vector<PipeOp> ops;
  auto fwd = [&](int k) { ops.push_back({true, k, false, false}); };
  auto bwd = [&](int k, bool first) { ops.push_back({false, k, first, false}); };
  if (schedule == Schedule::ZeroBubble) {
    // ZB-H1 (Qi et al., ICLR 2024): 1F1B's forwards and B's; stage s keeps s W's waiting (its
    // memory then P micro-batches, stage 0's under 1F1B) and runs them in the drain, where 1F1B
    // waits for the next stage's backward: B's chain runs without W's time in it.
    PB_CHECK(!recompute, "ZB-H1 does not recompute");
    using Part = PipeOp::Part;
    const int warmup = std::min(stages - 1 - stage, micro);
    int bs = 0, ws = 0;
    auto b = [&](int k) { ops.push_back({false, k, false, false, Part::Data}), ++bs; };
    auto w = [&](int waiting) {  // W's in micro-batch order while more than `waiting` wait
      for (; bs - ws > waiting; ++ws) ops.push_back({false, ws, ws == 0, false, Part::Weights});
    };
    for (int k = 0; k < warmup; ++k) fwd(k);
    for (int i = 0; i + warmup < micro; ++i) fwd(warmup + i), b(i), w(stage);
    for (int i = std::max(0, micro - warmup); i < micro; ++i) b(i), w(stage);
    w(0);
    // A W right after its own B (stage 0's, every one on one stage) defers nothing: a whole
    // backward, which keeps no output gradients for it.
    std::vector<PipeOp> out;
    for (const PipeOp& op : ops)
      if (op.part == Part::Weights && out.back().part == Part::Data && out.back().micro == op.micro)
        out.back().part = Part::Whole, out.back().first_backward = op.first_backward;
      else
        out.push_back(op);
    return out;
  }
  if (schedule == Schedule::GPipe) {
    for (int k = 0; k < micro; ++k) fwd(k);
    for (int k = micro - 1; k >= 0; --k) bwd(k, k == micro - 1);
  } else {
    const int warmup = std::min(stages - 1 - stage, micro);
    for (int k = 0; k < warmup; ++k) fwd(k);
    for (int i = 0; i + warmup < micro; ++i) {
      fwd(warmup + i);
      bwd(i, i == 0);
    }
    for (int i = std::max(0, micro - warmup); i < micro; ++i) bwd(i, i == 0);
  }
  // Recomputed unless the scratch slot still holds this micro-batch (its backward follows its
  // forward directly: the last stage under 1F1B, the last micro-batch under GPipe).
  int scratch = -1;
  for (PipeOp& op : ops) {
    if (op.forward) {
      scratch = op.micro;
    } else if (recompute && scratch != op.micro) {
      op.recompute = true;
      scratch = op.micro;
    }
  }
  return ops;
}

std::vector<PipeOp> interleaved_ops(int workers, int chunks, int rank, int micro, const std::string& strategy) {
  if (chunks < 2)
    throw UsageError(fmt::format("{}: --virtual-stages must be at least 2, got {}", strategy, chunks));
  if (micro % workers != 0)
    throw UsageError(fmt::format("{}: --micro-batches must be a multiple of the {} pipeline workers (Megatron's "
                                 "interleaved order runs them in groups of P), got {}", strategy, workers, micro));
  const int P = workers, V = chunks, total = micro * V;
  // Megatron (forward_backward_pipelining_with_interleaving): virtual micro-batch i is micro-batch
  // (i / PV) * P + i % P of chunk (i % PV) / P, backwards taking the chunks last first; enough
  // warm-up forwards that the last chunk's first backward has its gradient coming.
  const int warmup = micro == P ? total : std::min(total, (P - rank - 1) * 2 + (V - 1) * P);
  std::vector<bool> first(V, true);
  std::vector<PipeOp> ops;
  auto op = [&](int i, bool forward) {
    PipeOp o;
    o.forward = forward;
    o.micro = (i / (P * V)) * P + i % P;
    o.chunk = (i % (P * V)) / P;
    if (!forward) o.chunk = V - 1 - o.chunk, o.first_backward = first[o.chunk], first[o.chunk] = false;
    ops.push_back(o);
  };
  for (int i = 0; i < warmup; ++i) op(i, true);
  for (int i = 0; i + warmup < total; ++i) op(warmup + i, true), op(i, false);
  for (int i = std::max(0, total - warmup); i < total; ++i) op(i, false);
  return ops;
}

int chunk_slots(const std::vector<PipeOp>& ops, int chunk) {
  int held = 0, most = 0;
  for (const PipeOp& o : ops)
    if (o.chunk == chunk && (o.forward || o.part != PipeOp::Part::Data))
      most = std::max(most, held += o.forward ? 1 : -1);
  return most;
}

double chunk_bubble(const ChunkSchedule& s, int workers, int micro, double f, double b, double w) {
  const int S = workers * s.chunks;
  std::vector<std::vector<PipeOp>> ops;
  for (int r = 0; r < workers; ++r) ops.push_back(s.ops(workers, r, micro, "schedule"));
  // When each stage's forward and input gradient of each micro-batch end (-1: not yet).
  std::vector<std::vector<double>> fwd(S, std::vector<double>(micro, -1)), grad(S, std::vector<double>(micro, -1));
  std::vector<std::size_t> next(workers, 0);
  std::vector<double> clock(workers, 0);
  double busy = 0;
  for (bool moved = true; moved;) {
    moved = false;
    for (int r = 0; r < workers; ++r)
      for (; next[r] < ops[r].size(); ++next[r]) {
        const PipeOp& op = ops[r][next[r]];
        const int st = s.stage(workers, r, op.chunk), k = op.micro;
        double ready = 0, took = 0;
        if (op.forward) {
          ready = st > 0 ? fwd[st - 1][k] : 0, took = f;
        } else if (op.part == PipeOp::Part::Weights) {
          ready = grad[st][k], took = w;
        } else {
          ready = st + 1 < S ? grad[st + 1][k] : fwd[st][k];
          took = op.part == PipeOp::Part::Whole ? b + w : b;
        }
        if (ready < 0) break;  // waits for another worker
        const double end = std::max(clock[r], ready) + took;
        clock[r] = end, busy += took, moved = true;
        if (op.forward) fwd[st][k] = end;
        else if (op.part != PipeOp::Part::Weights) grad[st][k] = end;  // what the previous stage waits for
      }
  }
  for (int r = 0; r < workers; ++r)
    PB_CHECK(next[r] == ops[r].size(), "the schedule stops: worker {} waits at its op {} of {}", r, next[r], ops[r].size());
  const double span = *std::max_element(clock.begin(), clock.end());
  return span > 0 ? 1 - busy / (workers * span) : 0;
}

ChunkSchedule interleaved_schedule(const StrategyOptions& o) {
  ChunkSchedule s;
  s.chunks = o.virtual_stages;
  s.stage = [](int workers, int rank, int chunk) { return chunk * workers + rank; };
  s.ops = [v = o.virtual_stages](int workers, int rank, int micro, const std::string& strategy) {
    return interleaved_ops(workers, v, rank, micro, strategy);
  };
  // The fill and drain are of chunks, a V-th of a stage: (P-1) / (VM + P-1).
  s.bubble = [v = o.virtual_stages](int workers, int micro) {
    return static_cast<double>(workers - 1) / (v * micro + workers - 1);
  };
  s.batched = true;
  return s;
}

std::vector<FsdpUnit> fsdp_units(const NetPlan& plan, int workers) {
  std::vector<FsdpUnit> units;
  const int layers = static_cast<int>(plan.layers.size());
  // One worker has nothing to shard: the whole net is one unit, so its step is one Sequential's
  // (the backend's blocked layouts and fused ReLUs between layers, no scratch between units).
  if (workers == 1) return {{0, layers, plan.param_count, plan.param_count, 0, 0}};
  for (int i = 0; i < layers; ++i) {
    const LayerPlan& l = plan.layers[i];
    const int64_t n = l.weight_numel + l.bias_numel;
    if (units.empty() || (n > 0 && units.back().numel > 0)) {
      units.push_back({i, i + 1, n, 0, 0, l.param_offset});
    } else {
      units.back().end = i + 1;
      if (n > 0) units.back().numel = n, units.back().param_offset = l.param_offset;
    }
  }
  int64_t at = 0;
  for (FsdpUnit& u : units) {
    u.shard = (u.numel + workers - 1) / workers;
    u.at = at;
    at += u.shard;
  }
  return units;
}

std::vector<int> unit_cuts(const std::vector<FsdpUnit>& units) {
  std::vector<int> cuts;
  for (const FsdpUnit& u : units) cuts.push_back(u.begin);
  cuts.push_back(units.back().end);
  return cuts;
}

namespace {
bool tp_chain_type(LayerType t) {
  return t == LayerType::Conv2d || t == LayerType::Linear || t == LayerType::ReLU || t == LayerType::Flatten;
}
}  // namespace

bool tp_chain(const NetPlan& plan) {
  return !plan.has_skips() &&
         std::all_of(plan.layers.begin(), plan.layers.end(), [](const LayerPlan& l) { return tp_chain_type(l.spec.type); });
}

std::vector<TpSlice> tp_slices(const NetPlan& plan, int n, const std::string& strategy) {
  std::vector<TpSlice> slices(plan.layers.size());
  std::vector<int64_t> at(n, 0);
  bool any = n == 1;
  int64_t most = 0;
  for (std::size_t i = 0; i < plan.layers.size(); ++i) {
    const LayerPlan& l = plan.layers[i];
    TpSlice& s = slices[i];
    s.at = at;
    if (!has_weights(l.spec.type)) continue;
    s.channels = l.out[0];
    most = std::max(most, s.channels);
    s.per_sample = numel_of(l.out) / s.channels;
    s.fan = l.weight_numel / s.channels;
    // One way: the whole layer is the worker's slice, computed straight into the activation
    // (no gather buffer, no copies), as a replicated layer is.
    s.split = n > 1 && s.channels >= n;
    any = any || s.split;
    s.piece = s.split ? (s.channels + n - 1) / n : s.channels;
    for (int r = 0; r < n; ++r) {
      // Balanced: the first K % N workers one channel more; every worker at least one.
      const int64_t k = s.split ? s.channels / n + (r < s.channels % n) : s.channels;
      s.lo.push_back(s.split ? (r == 0 ? 0 : s.lo[r - 1] + s.k[r - 1]) : 0);
      s.k.push_back(k);
      at[r] += k * (s.fan + 1);
    }
  }
  if (!any)
    throw UsageError(fmt::format("{}: no layer of the net has {} or more output channels to split over {} workers "
                                 "(the largest has {}); every worker would compute the whole net -- use fewer "
                                 "devices", strategy, n, n, most));
  return slices;
}

}  // namespace pb
