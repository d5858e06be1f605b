// What every strategy's step program is built from: the profile's times at a batch (scaled to
// the machine), a collective's or message's cost among given workers, and the bytes they move.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "projection/links.h"
#include "projection/machine.h"
#include "projection/options.h"
#include "projection/profile.h"
#include "projection/simulator.h"

namespace pb::projection {

// What every strategy program needs: the profile's times at a batch, scaled, and link costs.
class StepBuilder {
 public:
  // `devices`: the plan's workers; `threads`: CPU threads per worker.
  StepBuilder(const Profile& p, const Machine& m, int devices, const Options& o, int threads)
      : p_(p), m_(m), devices_(devices), o_(o), bound_(bound_round_robin(m, threads, devices)) {}

  double fwd(int b, int e, double n) const {
    double t = 0;
    for (int i = b; i < e; ++i) t += p_.forward(i, n);
    return t * o_.compute_scale;
  }
  double bw(int i, double n) const { return p_.backward_weights(i, n) * o_.compute_scale; }
  double bd(int i, double n) const { return p_.backward_data(i, n) * o_.compute_scale; }
  double loss(double n) const { return p_.loss(n) * o_.compute_scale; }
  double opt(double params) const { return p_.optimizer_s_per_param * params * o_.compute_scale; }
  int64_t params(int b, int e) const {
    int64_t n = 0;
    for (int i = b; i < e; ++i) n += p_.layers[i].params;
    return n;
  }
  // Backward of layers [b, e) in the order Sequential::backward runs them; the first layer's
  // input gradient only when the stage has a predecessor.
  void backward(std::vector<Op>& ops, int b, int e, double n, bool need_dx) const {
    for (int i = e - 1; i >= b; --i) {
      ops.push_back({Op::Compute, bw(i, n)});
      if (i > b || need_dx) ops.push_back({Op::Compute, bd(i, n)});
    }
  }
  int node(int device) const { return device / m_.devices_per_node; }
  bool spans(const std::vector<int>& devices) const {
    for (int d : devices)
      if (node(d) != node(devices.front())) return true;
    return false;
  }
  // On a CPU whose workers share the cores, a collective among some of them takes the fit of all
  // the workers of the node: their number on the cores, not the group's, sets how long a meeting
  // of threads takes (dp2xtp2's pairs of 4 workers on 2 cores met 2.5x slower than 2 workers alone).
  CollTime coll(CollKind c, double bytes, const std::vector<int>& devices) {
    comm_bytes += bytes * static_cast<double>(devices.size() > 1 ? devices.size() : 0);
    const int g = static_cast<int>(devices.size());
    const int fit = m_.shared_cores > 0 ? std::max(g, std::min(devices_, m_.devices_per_node)) : 0;
    const std::optional<AlphaBeta::Layout> l = layout(devices);
    auto cost = [&](bool late) { return collective_cost(m_, c, bytes, g, spans(devices), fit, l ? &*l : nullptr, late).seconds; };
    return {cost(false), cost(true)};
  }
  double p2p(double bytes, int from, int to) {
    comm_bytes += bytes;
    const std::optional<AlphaBeta::Layout> l = layout({std::min(from, to), std::max(from, to)});
    return collective_cost(m_, CollKind::SendRecv, bytes, 2, node(from) != node(to), 0, l ? &*l : nullptr).seconds;
  }
  // With one-thread workers outnumbering the cores (run binds them round robin), a group of some
  // of them, evenly spaced (a message's pair too), takes calibrate's fit of that layout where it
  // timed one: a pair on one core, or of neighbours, meets more slowly than either count's fit says.
  std::optional<AlphaBeta::Layout> layout(const std::vector<int>& devices) const {
    const int g = static_cast<int>(devices.size()), local = std::min(devices_, m_.devices_per_node);
    if (!bound_ || g < 2 || g >= local || spans(devices)) return std::nullopt;
    const AlphaBeta::Layout l{g, local, devices[1] - devices[0]};
    for (int k = 1; k < g; ++k)
      if (devices[k] - devices[k - 1] != l.stride) return std::nullopt;
    return l;
  }
  static std::vector<int> range(int n, int first = 0, int stride = 1) {
    std::vector<int> v;
    for (int i = 0; i < n; ++i) v.push_back(first + i * stride);
    return v;
  }

  const Profile& p_;
  const Machine& m_;
  const int devices_;
  const Options& o_;
  const bool bound_;  // one-thread workers beyond the cores, bound round robin
  double comm_bytes = 0;
};

}  // namespace pb::projection
