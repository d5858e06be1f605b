// A plan priced for the simulator (projection/plan_price.h): each action's seconds from the
// profile or the links, placed on its worker's compute actor or its lane's actor.
#include "projection/plan_price.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "engine/check.h"

namespace pb::projection {

NetPlan net_of(const Profile& p) {
  NetPlan plan;
  for (const LayerProfile& l : p.layers) {
    LayerPlan lp;
    lp.index = static_cast<int>(plan.layers.size());
    lp.inputs = l.inputs.empty() ? std::vector<int>{lp.index - 1} : l.inputs;  // empty: a chain's
    if (!parse_layer_type(l.type, &lp.spec.type))
      throw UsageError(fmt::format("{}: layer {}: unknown type '{}'", p.source, l.index, l.type));
    lp.in = l.in, lp.out = l.out;
    const bool weighted = has_weights(lp.spec.type);
    lp.bias_numel = weighted && !l.out.empty() ? std::min(l.params, l.out.front()) : 0;
    lp.weight_numel = l.params - lp.bias_numel;
    if (weighted && !l.out.empty()) (lp.spec.type == LayerType::Linear ? lp.spec.out_features : lp.spec.out_channels) = l.out.front();
    lp.forward_flops = l.forward_flops;
    lp.param_offset = plan.param_count;
    plan.param_count += l.params;
    plan.forward_flops += l.forward_flops;
    plan.layers.push_back(lp);
  }
  for (const LayerPlan& l : plan.layers)
    for (int src : l.inputs)
      if (src >= 0) ++plan.layers[src].readers;
  if (!plan.layers.empty()) plan.input = plan.layers.front().in, plan.output = plan.layers.back().out;
  return plan;
}

namespace {

bool is_compute(ActionKind k) {
  return k == ActionKind::Forward || k == ActionKind::Recompute || k == ActionKind::BackwardData ||
         k == ActionKind::BackwardWeights || k == ActionKind::Loss;
}

// A compute action's seconds at full speed.
double compute_seconds(const Plan& plan, int w, const Action& a, const Profile& p, const Machine& m, StepBuilder& bl) {
  const int L = static_cast<int>(p.layers.size());
  if (is_compute(a.kind) && a.kind != ActionKind::Loss && (a.layer_begin < 0 || a.layer_end > L))
    throw UsageError(fmt::format("{}: its layers are not in the profile's {} layers", describe(plan, w, a.id), L));
  if (is_compute(a.kind) && a.samples <= 0)
    throw UsageError(fmt::format("{}: no 'samples' to price it at", describe(plan, w, a.id)));
  const double n = static_cast<double>(a.samples);
  double t = 0;
  switch (a.kind) {
    case ActionKind::Forward:
    case ActionKind::Recompute:
      t = bl.fwd(a.layer_begin, a.layer_end, n);
      break;
    case ActionKind::BackwardWeights:
      for (int i = a.layer_begin; i < a.layer_end; ++i) t += bl.bw(i, n);
      break;
    case ActionKind::BackwardData:  // the net's input needs no gradient
      for (int i = std::max(1, a.layer_begin); i < a.layer_end; ++i) t += bl.bd(i, n);
      break;
    case ActionKind::Loss:
      return bl.loss(n);
    case ActionKind::Optimizer:
      return bl.opt(static_cast<double>(a.bytes) / kFloat);
    case ActionKind::Copy:  // memory to memory: read and written once; a tp profile times a layer's with it
      if (a.layer_begin >= 0 && p.context.is_object() && p.context.value("tp_relu_and_copies", false)) return 0;
      return m.copy_bytes_per_s > 0 ? static_cast<double>(a.bytes) / m.copy_bytes_per_s : 0;
    default:
      return 0;
  }
  return t * a.part;
}

}  // namespace

PricedPlan price_plan(const Plan& plan, const Profile& p, const Machine& m, StepBuilder& bl) {
  PricedPlan out;
  const int W = plan.workers;
  out.actors.resize(W);
  for (int w = 0; w < W; ++w) out.actors[w].worker = w;
  std::map<std::pair<int, int>, int> lanes;  // (worker, lane) -> actor
  // Asynchronous communication runs beside compute only where the machine overlaps it; else it
  // holds the compute lane as a blocking call would.
  auto beside = [&](const Action& a) {
    return a.async && m.overlap && (a.kind == ActionKind::Send || a.kind == ActionKind::Recv || a.kind == ActionKind::Collective);
  };
  std::vector<std::vector<int>> actor(W);
  for (int w = 0; w < W; ++w)
    for (const Action& a : plan.actions[w]) {
      int x = w;
      if (beside(a)) {
        auto [it, fresh] = lanes.emplace(std::make_pair(w, static_cast<int>(a.lane)), static_cast<int>(out.actors.size()));
        if (fresh) {
          Actor lane;
          lane.worker = w;
          lane.uses_cores = false;
          out.actors.push_back(lane);
        }
        x = it->second;
      }
      actor[w].push_back(x);
    }
  // Point-to-point pairs: the k-th send from w to v meets v's k-th receive from w.
  std::map<std::tuple<int, int, int>, std::vector<int>> sends, recvs;  // (from, to) -> action ids
  for (int w = 0; w < W; ++w)
    for (const Action& a : plan.actions[w]) {
      if (a.kind == ActionKind::Send) sends[{w, a.peer, 0}].push_back(a.id);
      if (a.kind == ActionKind::Recv) recvs[{a.peer, w, 0}].push_back(a.id);
    }
  std::map<std::pair<int, int>, int> nth;  // (worker, action) -> its index among its pair's messages
  for (const auto& [key, ids] : sends)
    for (std::size_t k = 0; k < ids.size(); ++k) nth[{std::get<0>(key), ids[k]}] = static_cast<int>(k);
  for (const auto& [key, ids] : recvs)
    for (std::size_t k = 0; k < ids.size(); ++k) nth[{std::get<1>(key), ids[k]}] = static_cast<int>(k);
  // Collective instances: the k-th collective over a group on each of its members.
  std::map<std::pair<int, int>, std::pair<int, CollTime>> instances;  // (group, k) -> tag, cost
  int next_tag = 1;
  std::map<std::pair<int, int>, int> done;  // (worker, action) -> the signal of its end
  for (int w = 0; w < W; ++w) {
    std::map<int, int> per_group;
    Actor& comp = out.actors[w];
    for (const Action& a : plan.actions[w]) {
      const int x = actor[w][a.id];
      // The worker's host dispatches every action, in order, before the action can begin.
      if (m.action_overhead_s > 0) comp.ops.push_back({Op::Compute, m.action_overhead_s});
      Op op;
      switch (a.kind) {
        case ActionKind::Send:
        case ActionKind::Recv: {
          const bool send = a.kind == ActionKind::Send;
          const int from = send ? w : a.peer, to = send ? a.peer : w;
          const auto& others = send ? recvs[{from, to, 0}] : sends[{from, to, 0}];
          const int k = nth[{w, a.id}];
          if (a.peer < 0 || k >= static_cast<int>(others.size()))
            throw UsageError(fmt::format("{}: no matching {} on worker {}", describe(plan, w, a.id), send ? "receive" : "send", a.peer));
          const Action& o = plan.actions[a.peer][others[k]];
          op.kind = send ? Op::Send : Op::Recv;
          op.peer = actor[a.peer][o.id];
          op.eager = a.async || o.async;  // a started message has its buffer; a blocking pair meets
          if (send) op.s = bl.p2p(static_cast<double>(a.bytes), w, a.peer);
          break;
        }
        case ActionKind::Collective: {
          if (a.group < 0) throw UsageError(fmt::format("{}: no group", describe(plan, w, a.id)));
          const std::vector<int>& members = plan.groups.at(a.group).members;
          const int k = per_group[a.group]++;
          auto [it, fresh] = instances.emplace(std::make_pair(a.group, k), std::make_pair(next_tag, CollTime{}));
          if (fresh) {
            ++next_tag;
            if (members.size() > 1) it->second.second = bl.coll(a.coll, static_cast<double>(a.bytes), members);
          }
          op = coll_op(it->second.second, it->second.first, static_cast<int>(members.size()));
          break;
        }
        case ActionKind::Wait:
          for (int id : a.waits)
            if (done.count({w, id})) comp.ops.push_back({Op::Wait, 0, -1, done[{w, id}]});
          continue;
        case ActionKind::GroupStart:
        case ActionKind::GroupEnd:
        case ActionKind::Free:
          continue;
        default:
          op = {Op::Compute, compute_seconds(plan, w, a, p, m, bl)};
      }
      op.action = a.id;
      if (x == w) {
        comp.ops.push_back(op);
        continue;
      }
      // Started from the compute lane, in its order; its end is what a Wait waits for.
      const int s = next_tag++, d = next_tag++;
      done[{w, a.id}] = d;
      comp.ops.push_back({Op::Signal, 0, -1, s});
      Actor& lane = out.actors[x];
      lane.ops.push_back({Op::Wait, 0, -1, s});
      lane.ops.push_back(op);
      lane.ops.push_back({Op::Signal, 0, -1, d});
    }
  }
  out.comm_bytes = bl.comm_bytes;
  std::set<std::pair<int, int>> freed;
  for (const Action& a : plan.actions.at(0))
    if (a.kind == ActionKind::Free) freed.insert({a.layer_begin, a.layer_end});
  out.freed_units = static_cast<int>(freed.size());
  return out;
}

}  // namespace pb::projection
