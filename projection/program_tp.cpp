// The step programs of tensor parallelism: tp and the dp x tp hybrids.
#include "projection/programs.h"

#include <algorithm>
#include <optional>
#include <utility>

#include <fmt/format.h>

#include "strategies/batch.h"

namespace pb::projection {

// strategies/tp.cpp: every worker has the whole batch and a slice of each conv / linear
// layer's output channels (the first K % N workers one more; layers with fewer than N
// channels whole on every worker). A split layer's forward computes its channels (time taken
// as the layer's x k / K) and all-gathers the activation (N pieces of ceil(K / N) channels);
// backward computes its slice's weight and input gradients and all-reduces the input
// gradient. ReLUs run whole on every worker; Adam steps the worker's slices. dp<D>xtp<T>: D
// replicas of a T-way tp group (rank r: replica r / T, tp rank r % T), each on its
// torch.chunk of the batch, then each tp rank's slice gradients all-reduced over its D workers.
std::string tp_program(const Profile& p, const Config& c, StepBuilder& bl, StepProgram& out) {
  const int N = c.devices;
  const int L = static_cast<int>(p.layers.size());
  const int64_t B = c.global_batch;
  const std::optional<std::pair<int, int>> dptp = dptp_shape(c.strategy);
  const int D = dptp ? dptp->first : 1, T = N / D;
  const std::vector<int64_t> rep = chunk_sizes(B, D);
  if (static_cast<int>(rep.size()) < D) return std::string(fmt::format("a batch of {} gives fewer than {} replica chunks", B, D));
  std::vector<char> split(L, 0);
  std::vector<double> gather_per_sample(L, 0), reduce_per_sample(L, 0);
  bool any = T == 1;
  for (int l = 0; l < L; ++l) {
    const LayerProfile& lp = p.layers[l];
    if (lp.type != "conv2d" && lp.type != "linear") continue;
    const int64_t K = lp.out.front();
    split[l] = K >= T;
    any = any || split[l];
    if (!split[l] || T == 1) continue;
    const double per_channel = numel(lp.out) / static_cast<double>(K);
    gather_per_sample[l] = static_cast<double>((K + T - 1) / T) * T * per_channel * kFloat;
    reduce_per_sample[l] = numel(lp.in) * kFloat;
  }
  if (!any) return std::string(fmt::format("no layer has {} or more output channels to split", T));
  std::vector<double> slice_params(T, 0);  // per tp rank
  std::vector<std::vector<double>> share(T, std::vector<double>(L, 1.0));  // its fraction of each layer's channels
  for (int i = 0; i < T; ++i)
    for (int l = 0; l < L; ++l) {
      const LayerProfile& lp = p.layers[l];
      if (split[l]) {
        const int64_t K = lp.out.front(), k = K / T + (i < K % T ? 1 : 0);
        share[i][l] = static_cast<double>(k) / static_cast<double>(K);
      }
      slice_params[i] += static_cast<double>(lp.params) * share[i][l];
    }
  for (int d = 0; d < D; ++d) {
    const int64_t b = rep[d];
    std::vector<int> group;  // the replica's tp group
    for (int i = 0; i < T; ++i) group.push_back(d * T + i);
    std::vector<CollTime> ag(L), ar(L);
    for (int l = 0; l < L; ++l) {
      if (gather_per_sample[l] > 0) ag[l] = bl.coll(CollKind::AllGather, gather_per_sample[l] * b, group);
      if (reduce_per_sample[l] > 0 && l > 0) ar[l] = bl.coll(CollKind::AllReduce, reduce_per_sample[l] * b, group);
    }
    for (int i = 0; i < T; ++i) {
      Actor a;
      a.worker = d * T + i;
      int t = 4000 + d * 2 * (L + 1);  // the replica's own collective instances
      for (int l = 0; l < L; ++l) {
        a.ops.push_back({Op::Compute, bl.fwd(l, l + 1, b) * share[i][l]});
        if (ag[l].s > 0) a.ops.push_back(coll_op(ag[l], t, T));
        ++t;
      }
      a.ops.push_back({Op::Compute, bl.loss(b)});
      for (int l = L - 1; l >= 0; --l) {
        a.ops.push_back({Op::Compute, bl.bw(l, b) * share[i][l]});
        if (l > 0) a.ops.push_back({Op::Compute, bl.bd(l, b) * share[i][l]});
        if (ar[l].s > 0) a.ops.push_back(coll_op(ar[l], t, T));
        ++t;
      }
      if (D > 1) {  // the tp rank's slices over the replicas
        std::vector<int> ranks;
        for (int e = 0; e < D; ++e) ranks.push_back(e * T + i);
        a.ops.push_back(coll_op(bl.coll(CollKind::AllReduce, slice_params[i] * kFloat, ranks), 1000000 + i, D));
      }
      a.ops.push_back({Op::Compute, bl.opt(slice_params[i])});
      out.actors.push_back(a);
    }
  }
  return "";
}

}  // namespace pb::projection
