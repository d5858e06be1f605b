// The step programs of the sharded family: fsdp (ZeRO-3) and zero2.
#include "projection/programs.h"

#include <algorithm>
#include <optional>
#include <utility>

#include <fmt/format.h>

#include "strategies/batch.h"

namespace pb::projection {

// strategies/fsdp.cpp: units of a layer with parameters and the parameterless layers after it;
// each unit's parameters (padded to N equal shards) all-gathered before its forward, and for
// fsdp (ZeRO-3) again before its backward (zero2 keeps them from forward to backward); its
// gradients reduce-scattered after its backward; each worker steps its 1/N shard. Every
// worker takes part, also one without a chunk.
std::string fsdp_program(const Profile& p, const Machine& m, const Config& c, StepBuilder& bl, StepProgram& out) {
  const int N = c.devices;
  const int L = static_cast<int>(p.layers.size());
  const int64_t B = c.global_batch;
  const bool reshard = c.strategy == "fsdp";
  const std::vector<int64_t> ch = [&] {
    std::vector<int64_t> v = chunk_sizes(B, N);
    v.resize(N, 0);
    return v;
  }();
  const std::vector<int> group = StepBuilder::range(N);
  std::vector<std::pair<int, int>> units;  // layers [first, second)
  std::vector<double> unit_bytes;          // padded: N x ceil(params / N) floats
  for (int l = 0; l < L; ++l) {
    const int64_t n = p.layers[l].params;
    if (units.empty() || (n > 0 && unit_bytes.back() > 0)) {
      units.push_back({l, l + 1});
      unit_bytes.push_back(static_cast<double>((n + N - 1) / N) * N * kFloat);
    } else {
      units.back().second = l + 1;
      if (n > 0) unit_bytes.back() = static_cast<double>((n + N - 1) / N) * N * kFloat;
    }
  }
  const int U = static_cast<int>(units.size());
  if (const auto it = m.unit_overhead_s.find(c.strategy); it != m.unit_overhead_s.end()) out.bookkeeping_s = U * it->second;
  std::vector<CollTime> ag(U), rs(U);
  double shard = 0;
  for (int u = 0; u < U; ++u) {
    shard += unit_bytes[u] / N / kFloat;
    ag[u] = unit_bytes[u] > 0 ? bl.coll(CollKind::AllGather, unit_bytes[u], group) : CollTime{};
    if (reshard && unit_bytes[u] > 0) bl.comm_bytes += unit_bytes[u] * N;  // gathered again in backward
    rs[u] = unit_bytes[u] > 0 ? bl.coll(CollKind::ReduceScatter, unit_bytes[u], group) : CollTime{};
  }
  for (int i = 0; i < N; ++i) {
    Actor a;
    a.worker = i;
    int t = 3000;
    for (int u = 0; u < U; ++u) {
      if (ag[u].s > 0) a.ops.push_back(coll_op(ag[u], t, N));
      ++t;
      a.ops.push_back({Op::Compute, bl.fwd(units[u].first, units[u].second, ch[i])});
    }
    a.ops.push_back({Op::Compute, bl.loss(ch[i])});
    for (int u = U - 1; u >= 0; --u) {
      if (reshard && ag[u].s > 0) a.ops.push_back(coll_op(ag[u], t, N));
      ++t;
      bl.backward(a.ops, units[u].first, units[u].second, ch[i], u > 0);
      if (rs[u].s > 0) a.ops.push_back(coll_op(rs[u], t, N));
      ++t;
    }
    a.ops.push_back({Op::Compute, bl.opt(shard)});
    out.actors.push_back(a);
  }
  return "";
}

}  // namespace pb::projection
