// The step programs of the data-parallel family: regular (one worker), dp (torch.nn.DataParallel)
// and ddp (bucketed all-reduce overlapping backward).
#include "projection/programs.h"

#include <algorithm>
#include <optional>
#include <utility>

#include <fmt/format.h>

#include "strategies/batch.h"

namespace pb::projection {

namespace {

// ddp's buckets as make_buckets in strategies/ddp.cpp: from the last layer back, a bucket closes
// once it holds at least `bytes`; returns per layer the bucket closing after its weight gradient
// (or -1) and each bucket's size in bytes.
std::pair<std::vector<int>, std::vector<double>> buckets(const Profile& p, double bytes) {
  std::vector<int> closes(p.layers.size(), -1);
  std::vector<double> sizes;
  double cur = 0;
  int last = -1;
  for (int i = static_cast<int>(p.layers.size()) - 1; i >= 0; --i) {
    if (p.layers[i].params == 0) continue;
    cur += static_cast<double>(p.layers[i].params) * kFloat;
    last = i;
    if (cur >= bytes) closes[i] = static_cast<int>(sizes.size()), sizes.push_back(cur), cur = 0, last = -1;
  }
  if (last >= 0) closes[last] = static_cast<int>(sizes.size()), sizes.push_back(cur);
  return {closes, sizes};
}

}  // namespace

std::string regular_program(const Profile& p, const Config& c, StepBuilder& bl, StepProgram& out) {
  const int L = static_cast<int>(p.layers.size());
  const int64_t B = c.global_batch;
  const double P = static_cast<double>(p.param_count());
  Actor a;
  a.ops.push_back({Op::Compute, bl.fwd(0, L, B) + bl.loss(B)});
  bl.backward(a.ops, 0, L, B, false);
  a.ops.push_back({Op::Compute, bl.opt(P)});
  out.actors.push_back(a);
  return "";
}

// strategies/dp.cpp: broadcast, scatter (root sends in turn), forward, gather, loss on the
// root, the output gradients sent back, backward, reduce to the root, Adam on the root.
std::string dp_program(const Profile& p, const Config& c, StepBuilder& bl, StepProgram& out) {
  const int N = c.devices;
  const int L = static_cast<int>(p.layers.size());
  const int64_t B = c.global_batch;
  const double in_b = p.input_bytes_per_sample();
  const double out_b = p.output_bytes_per_sample();
  const double P = static_cast<double>(p.param_count());
  const std::vector<int64_t> ch = chunk_sizes(B, N);
  const int used = static_cast<int>(ch.size());
  const std::vector<int> group = StepBuilder::range(used);
  const CollTime bcast = bl.coll(CollKind::Broadcast, P * kFloat, group), reduce = bl.coll(CollKind::Reduce, P * kFloat, group);
  for (int i = 0; i < used; ++i) {
    Actor a;
    a.worker = i;
    a.ops.push_back(coll_op(bcast, 1, used));
    if (i == 0) {
      for (int j = 1; j < used; ++j) a.ops.push_back({Op::Send, bl.p2p(in_b * ch[j], 0, j), j});
      a.ops.push_back({Op::Compute, bl.fwd(0, L, ch[0])});
      for (int j = 1; j < used; ++j) a.ops.push_back({Op::Recv, 0, j});
      a.ops.push_back({Op::Compute, bl.loss(B)});
      for (int j = 1; j < used; ++j) a.ops.push_back({Op::Send, bl.p2p(out_b * ch[j], 0, j), j});
    } else {
      a.ops.push_back({Op::Recv, 0, 0});
      a.ops.push_back({Op::Compute, bl.fwd(0, L, ch[i])});
      a.ops.push_back({Op::Send, bl.p2p(out_b * ch[i], i, 0), 0});
      a.ops.push_back({Op::Recv, 0, 0});
    }
    bl.backward(a.ops, 0, L, ch[i], false);
    a.ops.push_back(coll_op(reduce, 2, used));
    if (i == 0) a.ops.push_back({Op::Compute, bl.opt(P)});
    out.actors.push_back(a);
  }
  return "";
}

// strategies/ddp.cpp: buckets all-reduced as backward finishes them; overlapped on a machine
// whose collectives run beside compute, else each one on the critical path.
std::string ddp_program(const Profile& p, const Machine& m, const Config& c, StepBuilder& bl, StepProgram& out) {
  const int N = c.devices;
  const int L = static_cast<int>(p.layers.size());
  const int64_t B = c.global_batch;
  const double P = static_cast<double>(p.param_count());
  const std::vector<int64_t> ch = chunk_sizes(B, N);
  const int used = static_cast<int>(ch.size());
  const std::vector<int> group = StepBuilder::range(used);
  const auto [closes, sizes] = buckets(p, c.bucket_bytes);
  std::vector<CollTime> cost;
  for (double s : sizes) cost.push_back(bl.coll(CollKind::AllReduce, s, group));
  for (int i = 0; i < used; ++i) {
    Actor a, comm;
    a.worker = comm.worker = i;
    comm.uses_cores = false;
    a.ops.push_back({Op::Compute, bl.fwd(0, L, ch[i]) + bl.loss(ch[i])});
    for (int l = L - 1; l >= 0; --l) {
      a.ops.push_back({Op::Compute, bl.bw(l, ch[i])});
      if (closes[l] >= 0 && used > 1) {
        const int b = closes[l];
        if (m.overlap) {
          a.ops.push_back({Op::Signal, 0, -1, 1000000 + i * 1000 + b});
          comm.ops.push_back({Op::Wait, 0, -1, 1000000 + i * 1000 + b});
          comm.ops.push_back(coll_op(cost[b], 100 + b, used));
        } else {
          a.ops.push_back(coll_op(cost[b], 100 + b, used));
        }
      }
      if (l > 0) a.ops.push_back({Op::Compute, bl.bd(l, ch[i])});
    }
    if (m.overlap && used > 1) {
      comm.ops.push_back({Op::Signal, 0, -1, 2000000 + i});
      a.ops.push_back({Op::Wait, 0, -1, 2000000 + i});
    }
    a.ops.push_back({Op::Compute, bl.opt(P)});
    out.actors.push_back(a);
    if (!comm.ops.empty()) out.actors.push_back(comm);
  }
  return "";
}

}  // namespace pb::projection
