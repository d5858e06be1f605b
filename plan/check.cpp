// The ordering checker and the validator (plan/check.h): one simulated execution of the plan's
// workers with a vector clock per lane, in the manner of torch.cuda._sanitizer.
#include "plan/check.h"

#include <algorithm>
#include <map>
#include <tuple>

#include <fmt/format.h>

#include "engine/tensor.h"

namespace pb {

namespace {

using Clock = std::vector<int>;  // per lane: the last of its ticks this lane is ordered after

void join(Clock& a, const Clock& b) {
  if (a.size() < b.size()) a.resize(b.size(), 0);
  for (std::size_t i = 0; i < b.size(); ++i) a[i] = std::max(a[i], b[i]);
}
int at(const Clock& c, int lane) { return lane < static_cast<int>(c.size()) ? c[lane] : 0; }

struct Epoch {  // an access: the lane and tick it happened at, and by whom
  int lane = -1, tick = 0, worker = -1, action = -1;
};
struct BufferState {
  Epoch write;
  std::vector<Epoch> reads;  // since the write
};

struct Op {  // a communication, started
  int worker = 0, action = 0, lane = 0;
  Clock start, done;
  bool complete = false, waited = false, matched = false;
  std::tuple<int, int, int> key;  // p2p: (group, from, to); collective: (group, -1, -1)
  int index = 0;                  // its place among the calls of its key (a collective: on its worker)
};

class Simulation {
 public:
  explicit Simulation(const Plan& p) : p_(p), pc_(p.workers, 0), compute_(p.workers), state_(p.buffers.size()) {
    op_of_.resize(p.workers);
    for (int w = 0; w < p.workers; ++w) op_of_[w].assign(p.actions[w].size(), -1);
    lanes_ = p.workers;  // lanes 0..W-1: the workers' compute; then one per communication
  }

  std::vector<PlanIssue> run() {
    for (bool progress = true; progress;) {
      progress = false;
      for (int w = 0; w < p_.workers; ++w)
        while (pc_[w] < static_cast<int>(p_.actions[w].size()) && step(w, p_.actions[w][pc_[w]])) {
          ++pc_[w];
          progress = true;
          sweep();
        }
    }
    for (int w = 0; w < p_.workers; ++w)
      if (pc_[w] < static_cast<int>(p_.actions[w].size())) issue(w, pc_[w], "deadlock: " + why_blocked(w));
    for (const Op& o : ops_) {
      const Action& a = p_.actions[o.worker][o.action];
      if (!o.complete) issue(o.worker, o.action, "never completes: " + partner_text(o));
      else if (a.async && !o.waited) issue(o.worker, o.action, "started but never waited for");
    }
    return std::move(issues_);
  }

 private:
  void issue(int w, int id, const std::string& m) { issues_.push_back({w, id, describe(p_, w, id) + ": " + m}); }
  std::string buffer_name(int b) const { return buffer_label(p_.buffers[b]); }
  std::string who(const Epoch& e) const { return describe(p_, e.worker, e.action); }

  void access(int b, const Epoch& e, const Clock& v, bool write) {
    BufferState& s = state_[b];
    const char* verb = write ? "writes" : "reads";
    if (s.write.lane >= 0 && at(v, s.write.lane) < s.write.tick)
      issue(e.worker, e.action, fmt::format("{} buffer '{}' (worker {}) unordered after its write by {}", verb,
                                            buffer_name(b), p_.buffers[b].worker, who(s.write)));
    if (!write) {
      s.reads.push_back(e);
      return;
    }
    for (const Epoch& r : s.reads)
      if (at(v, r.lane) < r.tick)
        issue(e.worker, e.action, fmt::format("writes buffer '{}' (worker {}) unordered after its read by {}",
                                              buffer_name(b), p_.buffers[b].worker, who(r)));
    s.write = e;
    s.reads.clear();
  }
  void accesses(const Action& a, int worker, int lane, const Clock& v, bool reads = true, bool writes = true) {
    const Epoch e{lane, at(v, lane), worker, a.id};
    if (reads)
      for (int b : a.reads) access(b, e, v, false);
    if (writes)
      for (int b : a.writes) access(b, e, v, true);
  }

  // The partners an op needs to complete (op indices), or false while some have not started.
  bool partners(const Op& o, std::vector<int>* out) const {
    const Action& a = p_.actions[o.worker][o.action];
    out->clear();
    if (a.kind == ActionKind::Send || a.kind == ActionKind::Recv) {
      auto it = (a.kind == ActionKind::Send ? recvs_ : sends_).find(o.key);
      if (it == (a.kind == ActionKind::Send ? recvs_ : sends_).end() || static_cast<int>(it->second.size()) <= o.index)
        return false;
      out->push_back(it->second[o.index]);
      return true;
    }
    for (int m : p_.groups[a.group].members) {
      auto it = colls_.find({a.group, m});
      if (it == colls_.end() || static_cast<int>(it->second.size()) <= o.index) return false;
      out->push_back(it->second[o.index]);
    }
    return true;
  }
  std::string partner_text(const Op& o) const {
    const Action& a = p_.actions[o.worker][o.action];
    if (a.kind == ActionKind::Send)
      return fmt::format("worker {} has not started the matching receive (#{} from {})", a.peer, o.index, o.worker);
    if (a.kind == ActionKind::Recv)
      return fmt::format("worker {} has not started the matching send (#{} to {})", a.peer, o.index, o.worker);
    std::vector<int> missing;
    for (int m : p_.groups[a.group].members) {
      auto it = colls_.find({a.group, m});
      if (it == colls_.end() || static_cast<int>(it->second.size()) <= o.index) missing.push_back(m);
    }
    return fmt::format("collective #{} of group '{}' not yet started by worker(s) {}", o.index, p_.groups[a.group].name,
                       fmt::join(missing, ","));
  }

  // Partners must agree: a send's count is its receive's; a collective's kind, count and root
  // are every member's.
  void match(Op& o, const std::vector<int>& with) {
    if (o.matched) return;
    o.matched = true;
    const Action& a = p_.actions[o.worker][o.action];
    for (int i : with) {
      const Op& q = ops_[i];
      const Action& b = p_.actions[q.worker][q.action];
      if (b.count != a.count || b.coll != a.coll || b.root != a.root)
        issue(o.worker, o.action, fmt::format("does not match its partner {} (kind, count or root differ)",
                                              describe(p_, q.worker, q.action)));
      else if (b.dtype != a.dtype)
        issue(o.worker, o.action, fmt::format("does not match its partner {}: dtype {} against {}",
                                              describe(p_, q.worker, q.action), dtype_label(a.dtype), dtype_label(b.dtype)));
      // A receive may leave its bytes 0 (CommStats books them at the send); given, they agree.
      else if (a.bytes != 0 && b.bytes != 0 && a.bytes != b.bytes)
        issue(o.worker, o.action, fmt::format("does not match its partner {}: {} bytes against {}",
                                              describe(p_, q.worker, q.action), a.bytes, b.bytes));
    }
    // A point-to-point message fits the buffers it is sent from and received into (a buffer's
    // bytes 0: its size not stated).
    if (a.kind == ActionKind::Send || a.kind == ActionKind::Recv) {
      const int64_t message = a.count * static_cast<int64_t>(dtype_size(a.dtype));
      for (int buf : a.kind == ActionKind::Send ? a.reads : a.writes) {
        const PlanBuffer& pb = p_.buffers[buf];
        if (pb.bytes > 0 && pb.bytes < message)
          issue(o.worker, o.action, fmt::format("{} {} bytes, buffer '{}' holds {}", a.kind == ActionKind::Send ? "sends" : "receives",
                                                message, buffer_label(pb), pb.bytes));
      }
    }
  }

  bool try_complete(int i) {
    Op& o = ops_[i];
    if (o.complete) return true;
    std::vector<int> with;
    if (!partners(o, &with)) return false;
    match(o, with);
    o.done = o.start;
    for (int j : with) join(o.done, ops_[j].start);
    if (static_cast<int>(o.done.size()) <= o.lane) o.done.resize(o.lane + 1, 0);
    o.done[o.lane] = 1;
    o.complete = true;
    accesses(p_.actions[o.worker][o.action], o.worker, o.lane, o.done, false, true);  // written once complete
    return true;
  }
  void sweep() {
    for (bool more = true; more;) {
      more = false;
      for (std::size_t i = 0; i < ops_.size(); ++i)
        if (!ops_[i].complete && try_complete(static_cast<int>(i))) more = true;
    }
  }

  int start(int w, const Action& a) {
    if (op_of_[w][a.id] >= 0) return op_of_[w][a.id];
    Op o;
    o.worker = w, o.action = a.id, o.lane = lanes_++, o.start = compute_[w];  // after the compute queued before it
    o.start.resize(std::max<std::size_t>(o.start.size(), o.lane + 1), 0);
    o.start[o.lane] = 1;
    accesses(a, w, o.lane, o.start, true, false);  // read from its start on
    if (a.group < 0 || a.group >= static_cast<int>(p_.groups.size())) {
      issue(w, a.id, "has no group");
      o.complete = o.waited = true;
    } else if (a.kind == ActionKind::Collective) {
      o.key = {a.group, -1, -1};
      auto& list = colls_[{a.group, w}];
      o.index = static_cast<int>(list.size());
      list.push_back(static_cast<int>(ops_.size()));
    } else {
      o.key = a.kind == ActionKind::Send ? std::make_tuple(a.group, w, a.peer) : std::make_tuple(a.group, a.peer, w);
      auto& list = (a.kind == ActionKind::Send ? sends_ : recvs_)[o.key];
      o.index = static_cast<int>(list.size());
      list.push_back(static_cast<int>(ops_.size()));
    }
    ops_.push_back(std::move(o));
    return op_of_[w][a.id] = static_cast<int>(ops_.size()) - 1;
  }

  // Runs the action if it can go now; false: its worker is blocked on it.
  bool step(int w, const Action& a) {
    switch (a.kind) {
      case ActionKind::Send:
      case ActionKind::Recv:
      case ActionKind::Collective: {
        const int i = start(w, a);
        if (a.async) return true;
        if (!try_complete(i)) return false;
        ops_[i].waited = true;
        join(compute_[w], ops_[i].done);
        return true;
      }
      case ActionKind::Wait: {
        for (int id : a.waits) {
          const int i = id >= 0 && id < static_cast<int>(op_of_[w].size()) ? op_of_[w][id] : -1;
          if (i < 0) continue;  // reported once, below
          if (!try_complete(i)) return false;
        }
        for (int id : a.waits) {
          const int i = id >= 0 && id < static_cast<int>(op_of_[w].size()) ? op_of_[w][id] : -1;
          if (i < 0 || !p_.actions[w][id].async) {
            issue(w, a.id, fmt::format("waits for action {}, not a started asynchronous communication", id));
            continue;
          }
          if (ops_[i].waited) issue(w, a.id, fmt::format("waits again for action {}", id));
          ops_[i].waited = true;
          join(compute_[w], ops_[i].done);
        }
        return true;
      }
      case ActionKind::GroupStart:
      case ActionKind::GroupEnd: return true;
      default: {  // compute
        Clock& c = compute_[w];
        if (static_cast<int>(c.size()) <= w) c.resize(w + 1, 0);
        ++c[w];
        accesses(a, w, w, c);
        return true;
      }
    }
  }

  std::string why_blocked(int w) const {
    const Action& a = p_.actions[w][pc_[w]];
    std::vector<int> ids = a.kind == ActionKind::Wait ? a.waits : std::vector<int>{a.id};
    for (int id : ids) {
      const int i = id >= 0 && id < static_cast<int>(op_of_[w].size()) ? op_of_[w][id] : -1;
      if (i >= 0 && !ops_[i].complete) return fmt::format("waits for action {}: {}", id, partner_text(ops_[i]));
    }
    return "blocked";
  }

  const Plan& p_;
  std::vector<int> pc_;
  std::vector<Clock> compute_;  // per worker: its compute lane's clock
  std::vector<BufferState> state_;
  std::vector<std::vector<int>> op_of_;  // per worker, per action: its Op, or -1
  std::vector<Op> ops_;
  int lanes_ = 0;
  std::map<std::tuple<int, int, int>, std::vector<int>> sends_, recvs_;  // (group, from, to): ops in order
  std::map<std::pair<int, int>, std::vector<int>> colls_;               // (group, worker): ops in order
  std::vector<PlanIssue> issues_;
};

// References that must hold before the plan can be run at all.
void check_references(const Plan& p, std::vector<PlanIssue>* out) {
  auto bad = [&](int w, int id, const std::string& m) { out->push_back({w, id, describe(p, w, id) + ": " + m}); };
  if (static_cast<int>(p.actions.size()) != p.workers || static_cast<int>(p.replica.size()) != p.workers)
    out->push_back({-1, -1, fmt::format("plan of {} workers has {} action lists and {} replica entries", p.workers,
                                        p.actions.size(), p.replica.size())});
  for (int w = 0; w < static_cast<int>(p.actions.size()); ++w)
    for (int i = 0; i < static_cast<int>(p.actions[w].size()); ++i) {
      const Action& a = p.actions[w][i];
      if (a.id != i) bad(w, i, fmt::format("has id {}", a.id));
      for (const auto* ids : {&a.reads, &a.writes})
        for (int b : *ids)
          if (b < 0 || b >= static_cast<int>(p.buffers.size())) bad(w, i, fmt::format("names buffer {}, undefined", b));
          else if (p.buffers[b].worker != w) bad(w, i, fmt::format("touches buffer '{}' of worker {}", buffer_label(p.buffers[b]), p.buffers[b].worker));
      const bool comm = a.kind == ActionKind::Send || a.kind == ActionKind::Recv || a.kind == ActionKind::Collective;
      if (!comm) continue;
      if (a.group < 0 || a.group >= static_cast<int>(p.groups.size())) {
        bad(w, i, "names no group");
        continue;
      }
      const auto& m = p.groups[a.group].members;
      if (std::find(m.begin(), m.end(), w) == m.end()) bad(w, i, fmt::format("worker {} is not in its group '{}'", w, p.groups[a.group].name));
      if (a.kind != ActionKind::Collective && (a.peer == w || std::find(m.begin(), m.end(), a.peer) == m.end()))
        bad(w, i, fmt::format("peer {} is not another member of group '{}'", a.peer, p.groups[a.group].name));
    }
}

// Per replica and micro-batch, every layer's forward, backward-data and (where it has parameters)
// backward-weights exactly once over the replica's workers.
void check_coverage(const Plan& p, std::vector<PlanIssue>* out) {
  const int layers = static_cast<int>(p.layer_params.size());
  if (layers == 0) return;
  std::map<std::tuple<int, int, int>, std::vector<int>> counts;  // (replica, micro, kind) -> per layer
  std::map<std::pair<int, int>, std::pair<int, int>> first;     // (replica, micro) -> a worker and action
  for (int w = 0; w < p.workers; ++w) {
    if (p.replica[w] < 0) continue;
    for (const Action& a : p.actions[w]) {
      if (a.kind != ActionKind::Forward && a.kind != ActionKind::BackwardData && a.kind != ActionKind::BackwardWeights)
        continue;
      if (a.layer_begin < 0 || a.layer_end > layers) {
        out->push_back({w, a.id, describe(p, w, a.id) + fmt::format(": layers outside the net's {}", layers)});
        continue;
      }
      const int m = std::max(a.micro, 0);
      auto& c = counts[{p.replica[w], m, static_cast<int>(a.kind)}];
      c.resize(layers, 0);
      for (int l = a.layer_begin; l < a.layer_end; ++l) ++c[l];
      first.emplace(std::make_pair(p.replica[w], m), std::make_pair(w, a.id));
    }
  }
  for (const auto& [rm, where] : first)
    for (ActionKind k : {ActionKind::Forward, ActionKind::BackwardData, ActionKind::BackwardWeights}) {
      auto it = counts.find({rm.first, rm.second, static_cast<int>(k)});
      std::vector<int> c = it == counts.end() ? std::vector<int>(layers, 0) : it->second;
      for (int l = 0; l < layers; ++l) {
        const bool optional = k == ActionKind::BackwardWeights && p.layer_params[l] == 0;
        if (c[l] == 1 || (optional && c[l] == 0)) continue;
        out->push_back({where.first, where.second,
                        fmt::format("replica {} micro-batch {}: layer {} has {} {} action(s), expected 1", rm.first,
                                    rm.second, l, c[l], action_kind_name(k))});
      }
    }
}

}  // namespace

std::vector<PlanIssue> check_plan_order(const Plan& p) {
  std::vector<PlanIssue> refs;
  check_references(p, &refs);
  if (!refs.empty()) return refs;
  return Simulation(p).run();
}

std::vector<PlanIssue> validate_plan(const Plan& p) {
  std::size_t actions = 0;
  for (const auto& list : p.actions) actions += list.size();
  if (actions == 0) return {{-1, -1, "the plan has no actions: no worker does anything in its step"}};
  std::vector<PlanIssue> out = check_plan_order(p);
  check_coverage(p, &out);
  return out;
}

std::string issues_text(const std::vector<PlanIssue>& issues) {
  std::string s;
  for (const PlanIssue& i : issues) s += i.message + "\n";
  return s;
}

}  // namespace pb
