// The executor of a worker's plan actions (see executor.h).
#include "strategies/executor.h"

#include <algorithm>

#include "engine/check.h"

namespace pb {

namespace {
constexpr int64_t kNone = -1;
}

bool is_computation(ActionKind k) {
  switch (k) {
    case ActionKind::Send:
    case ActionKind::Recv:
    case ActionKind::Collective:
    case ActionKind::Wait:
    case ActionKind::GroupStart:
    case ActionKind::GroupEnd: return false;
    default: return true;
  }
}

PlanExecutor::PlanExecutor(const Plan& plan, int worker, Binding binding)
    : plan_(plan), worker_(worker), b_(std::move(binding)), actions_(plan.actions.at(worker)),
      transfer_(actions_.size(), kNone) {}

void PlanExecutor::run() {
  while (next_ < actions_.size()) {  // a computation may move next_ on (run_through)
    const Action& a = actions_[next_++];
    mark(a.id);
    exec(a);
  }
  mark(-1);
}

void PlanExecutor::run_through(const std::function<bool(const Action&)>& covered) {
  while (next_ < actions_.size()) {
    const Action& a = actions_[next_];
    if (is_computation(a.kind) && !covered(a)) {
      mark(a.id);
      return;
    }
    ++next_;
    if (!is_computation(a.kind)) {
      mark(a.id);
      exec(a);
    }
  }
}

float* PlanExecutor::buf(const Action& a, bool write) {
  const std::vector<int>& ids = write ? a.writes : a.reads;
  PB_CHECK(!ids.empty(), "plan: {} names no buffer it {}", describe(plan_, worker_, a.id), write ? "writes" : "reads");
  return b_.at(a, ids[0], write);
}

void PlanExecutor::exec(const Action& a) {
  switch (a.kind) {
    case ActionKind::GroupStart:
    case ActionKind::GroupEnd: {  // without a group: the plan's first (its world)
      auto [c, rank] = b_.comm(a.group < 0 ? 0 : a.group);
      a.kind == ActionKind::GroupStart ? c->group_start(rank) : c->group_end(rank);
      break;
    }
    case ActionKind::Send:
    case ActionKind::Recv: {
      auto [c, rank] = b_.comm(a.group);
      const std::vector<int>& members = plan_.groups.at(a.group).members;
      const int peer = static_cast<int>(std::find(members.begin(), members.end(), a.peer) - members.begin());
      float* p = buf(a, a.kind != ActionKind::Send);
      const DType t = a.dtype;  // the wire, as a collective's
      if (a.async)
        transfer_[a.id] = a.kind == ActionKind::Send ? c->send_start(rank, p, a.count, peer, t)
                                                     : c->recv_start(rank, p, a.count, peer, t);
      else if (a.kind == ActionKind::Send)
        c->send(rank, p, a.count, peer, t);
      else
        c->recv(rank, p, a.count, peer, t);
      break;
    }
    case ActionKind::Collective: collective(a); break;
    case ActionKind::Wait: wait(a); break;
    default: b_.compute(a);
  }
}

// A collective's dtype is its wire: fp32 buffers sent as bf16 are rounded and widened by the
// communicator (Communicator's wire argument).
void PlanExecutor::collective(const Action& a) {
  auto [c, rank] = b_.comm(a.group);
  const DType t = a.dtype;
  switch (a.coll) {
    case CollKind::AllReduce: {  // in place
      float* p = buf(a, !a.writes.empty());
      if (a.async) c->all_reduce_start(rank, p, a.count, t);
      else c->all_reduce(rank, p, a.count, t);
      break;
    }
    case CollKind::Broadcast:
      PB_CHECK(t == DType::F32, "plan: {}: a broadcast travels in fp32", describe(plan_, worker_, a.id));
      c->broadcast(rank, buf(a, !a.writes.empty()), a.count, a.root);
      break;
    case CollKind::Reduce: c->reduce(rank, buf(a, false), a.count, a.root, t); break;
    case CollKind::AllGather:  // async: a prefetch, complete at its Wait
      if (!a.writes.empty() && plan_.buffers.at(a.writes[0]).dtype == DType::Bf16) {  // kept in bf16: nothing widened
        PB_CHECK(t == DType::Bf16 && b_.at16, "plan: {}: gathers into a bf16 buffer from a {} wire", describe(plan_, worker_, a.id),
                 dtype_label(t));
        Bf16* out = b_.at16(a, a.writes[0], true);
        if (plan_.buffers.at(a.reads.at(0)).dtype == DType::Bf16) {  // bf16 pieces (tp's activations)
          const Bf16* in = b_.at16(a, a.reads[0], false);
          if (a.async) c->all_gather_start(rank, in, out, a.count);
          else c->all_gather(rank, in, out, a.count);
          break;
        }
        if (a.async) c->all_gather_start(rank, buf(a, false), out, a.count);
        else c->all_gather(rank, buf(a, false), out, a.count);
        break;
      }
      if (a.async) c->all_gather_start(rank, buf(a, false), buf(a, true), a.count, t);
      else c->all_gather(rank, buf(a, false), buf(a, true), a.count, t);
      break;
    case CollKind::ReduceScatter: c->reduce_scatter(rank, buf(a, false), buf(a, true), a.count, t); break;
    default: PB_CHECK(false, "plan: the executor cannot run {}", describe(plan_, worker_, a.id));
  }
}

// p2p transfers complete one by one; a group's started collectives (all-reduces, prefetched
// all-gathers) all at its communicator's wait.
void PlanExecutor::wait(const Action& a) {
  std::vector<int> groups;
  for (int id : a.waits) {
    const Action& w = actions_.at(id);
    if (w.kind == ActionKind::Collective) {
      if (std::find(groups.begin(), groups.end(), w.group) == groups.end()) groups.push_back(w.group);
    } else {
      auto [c, rank] = b_.comm(w.group);
      c->wait_transfer(rank, transfer_.at(id));
    }
  }
  for (int g : groups) {
    auto [c, rank] = b_.comm(g);
    c->wait(rank);
  }
}

}  // namespace pb
