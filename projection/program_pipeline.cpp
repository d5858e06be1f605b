// The step programs of the pipeline family: mp, pipeline (GPipe, 1F1B, recompute) and the dp x pp
// hybrids, stages split by forward FLOPs as the run splits them.
#include "projection/programs.h"

#include <algorithm>
#include <optional>
#include <utility>

#include <fmt/format.h>

#include "strategies/batch.h"
#include "strategies/stages.h"

namespace pb::projection {

namespace {

NetPlan flops_plan(const Profile& p) {
  NetPlan plan;
  for (const LayerProfile& l : p.layers) {
    LayerPlan lp;
    lp.index = l.index;
    lp.forward_flops = l.forward_flops;
    plan.layers.push_back(lp);
  }
  return plan;
}

}  // namespace

// strategies/pipeline.cpp: stages split by forward FLOPs, micro-batches in GPipe fill-drain
// (every forward, then every backward in reverse) or 1F1B (PipeDream-flush); stages send
// without waiting (non-blocking sends, a buffer per message) and receive blocking. With
// recompute a stage keeps only its inputs and runs its forward again before each backward,
// except for the micro-batch whose activations are still in its slot. dp<D>xpp<P>: D
// replicas of the pipeline (rank r: replica r / P, stage r % P), each on its torch.chunk of
// the batch; after the drain each stage's gradients all-reduced over its D replicas.
std::string pipeline_program(const Profile& p, const Config& c, StepBuilder& bl, StepProgram& out) {
  const int N = c.devices;
  const int L = static_cast<int>(p.layers.size());
  const int64_t B = c.global_batch;
  const std::optional<std::pair<int, int>> hybrid = hybrid_shape(c.strategy);
  const int D = hybrid ? hybrid->first : 1;
  const int S = N / D;
  const int M = c.strategy == "mp" ? 1 : c.micro_batches;
  if (S > L) return std::string(fmt::format("{} stages but the net has {} layers", S, L));
  const std::vector<int64_t> rep = chunk_sizes(B, D);
  if (static_cast<int>(rep.size()) < D) return std::string(fmt::format("a batch of {} gives fewer than {} replica chunks", B, D));
  if (M < 1 || (!hybrid && M > rep.back()))
    return std::string(fmt::format("{} micro-batches but a replica has {} sample(s)", M, rep.back()));
  const auto ranges = split_stages(flops_plan(p), S, {}, c.strategy);
  out.stages = ranges;
  const bool eager = true;
  for (int d = 0; d < D; ++d) {
    const std::vector<int64_t> mb = chunk_sizes(rep[d], M);
    const int Mr = static_cast<int>(mb.size());
    for (int s = 0; s < S; ++s) {
      const int dev = d * S + s;
      const int b = ranges[s].first, e = ranges[s].second;  // not a structured binding: lambdas capture them
      const double sin = numel(p.layers[b].in) * kFloat, sout = numel(p.layers[e - 1].out) * kFloat;
      Actor a;
      a.worker = dev;
      auto F = [&](int k) {
        if (s > 0) a.ops.push_back({Op::Recv, 0, dev - 1, 0, 0, eager});
        a.ops.push_back({Op::Compute, bl.fwd(b, e, mb[k]) + (s == S - 1 ? bl.loss(mb[k]) : 0)});
        if (s < S - 1) a.ops.push_back({Op::Send, bl.p2p(sout * mb[k], dev, dev + 1), dev + 1, 0, 0, eager});
      };
      auto Bk = [&](int k) {
        if (s < S - 1) a.ops.push_back({Op::Recv, 0, dev + 1, 0, 0, eager});
        const bool fresh = c.schedule == "1f1b" ? s == S - 1 : k == Mr - 1;
        if (c.recompute && !fresh) a.ops.push_back({Op::Compute, bl.fwd(b, e, mb[k])});
        bl.backward(a.ops, b, e, mb[k], s > 0);
        if (s > 0) a.ops.push_back({Op::Send, bl.p2p(sin * mb[k], dev, dev - 1), dev - 1, 0, 0, eager});
      };
      if (c.schedule == "1f1b") {
        const int warm = std::min(S - s - 1, Mr);
        int nf = 0, nb = 0;
        for (; nf < warm; ++nf) F(nf);
        while (nf < Mr) F(nf++), Bk(nb++);
        while (nb < Mr) Bk(nb++);
      } else {
        for (int k = 0; k < Mr; ++k) F(k);
        for (int k = Mr - 1; k >= 0; --k) Bk(k);
      }
      const double sp = static_cast<double>(bl.params(b, e));
      if (D > 1) {
        const std::vector<int> group = StepBuilder::range(D, s, S);
        a.ops.push_back(coll_op(bl.coll(CollKind::AllReduce, sp * kFloat, group), 500 + s, D));
      }
      a.ops.push_back({Op::Compute, bl.opt(sp)});
      out.actors.push_back(a);
    }
  }
  return "";
}

}  // namespace pb::projection
