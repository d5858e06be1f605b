// The event simulator: plays the actors' programs to the end of the step (projection/simulator.h).
#include "projection/simulator.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <utility>

#include "engine/check.h"

namespace pb::projection {

Op coll_op(const CollTime& t, int tag, int count) {
  Op o{Op::Coll, t.s, -1, tag, count};
  o.late = t.late;
  return o;
}

bool bound_round_robin(const Machine& m, int threads, int workers) {
  return m.shared_cores > 0 && threads == 1 && std::min(workers, m.devices_per_node) > m.shared_cores;
}

SimResult simulate(const std::vector<Actor>& actors, int workers, const Machine& m, int threads, int timed_busy,
                   const std::vector<double>& busy_seconds) {
  enum St { Ready, Computing, Moving, Blocked, Done, Lagging };
  const int A = static_cast<int>(actors.size());
  std::vector<std::size_t> pc(A, 0);
  std::vector<St> st(A, Ready);
  std::vector<double> remaining(A, 0), end(A, 0), began(A, 0);
  std::set<int> signaled;
  std::map<int, std::vector<int>> arrived;
  std::map<int, std::vector<double>> arrived_at;
  std::vector<char> in_coll(A, 0);
  std::map<std::pair<int, int>, std::vector<double>> mail;  // eager messages: (from, to) -> ready times
  SimResult r;
  r.compute.assign(workers, 0);
  r.exposed.assign(workers, 0);
  double now = 0;
  const double eps = 1e-15;
  const bool bound = bound_round_robin(m, threads, workers);
  auto core_of = [&](int w) { return std::make_pair(w / m.devices_per_node, (w % m.devices_per_node) % m.shared_cores); };
  for (;;) {
    bool progress = true;
    while (progress) {
      progress = false;
      for (int a = 0; a < A; ++a) {
        if (st[a] != Ready && st[a] != Blocked) continue;
        if (pc[a] == actors[a].ops.size()) {
          st[a] = Done;
          continue;
        }
        const Op& op = actors[a].ops[pc[a]];
        switch (op.kind) {
          case Op::Compute:
            began[a] = now;
            if (op.s <= 0) {
              if (op.action >= 0) r.actions.push_back({actors[a].worker, op.action, now, now});
              ++pc[a], st[a] = Ready;
            } else {
              st[a] = Computing, remaining[a] = op.s;
            }
            progress = true;
            break;
          case Op::Signal:
            signaled.insert(op.tag), ++pc[a], st[a] = Ready, progress = true;
            break;
          case Op::Delay:
            st[a] = Lagging, end[a] = now + op.s, progress = true;
            break;
          case Op::Wait:
            if (signaled.count(op.tag)) ++pc[a], st[a] = Ready, progress = true;
            else st[a] = Blocked;
            break;
          case Op::Send:
          case Op::Recv: {
            if (op.eager) {
              if (op.kind == Op::Send) {  // busy while its data goes out, then free
                mail[{a, op.peer}].push_back(now + op.s);
                st[a] = Moving, end[a] = now + op.s, began[a] = now, progress = true;
              } else {
                auto& box = mail[{op.peer, a}];
                if (box.empty()) {
                  st[a] = Blocked;
                } else {
                  st[a] = Moving, end[a] = std::max(now, box.front()), began[a] = now, progress = true;
                  box.erase(box.begin());
                }
              }
              break;
            }
            const int b = op.peer;
            const bool b_waiting = (st[b] == Blocked || st[b] == Ready) && pc[b] < actors[b].ops.size();
            const Op* bo = b_waiting ? &actors[b].ops[pc[b]] : nullptr;
            const Op::Kind want = op.kind == Op::Send ? Op::Recv : Op::Send;
            if (bo && bo->kind == want && bo->peer == a && !bo->eager) {
              const double d = op.kind == Op::Send ? op.s : bo->s;
              st[a] = st[b] = Moving;
              began[a] = began[b] = now;
              end[a] = end[b] = now + d;
              end[op.kind == Op::Recv ? a : b] = now + std::max(0.0, d - m.sender_trails_s);  // the receiver goes on first
              progress = true;
            } else {
              st[a] = Blocked;
            }
            break;
          }
          case Op::Coll: {
            if (!in_coll[a]) in_coll[a] = 1, arrived[op.tag].push_back(a), arrived_at[op.tag].push_back(now);
            st[a] = Blocked;
            auto& who = arrived[op.tag];
            if (static_cast<int>(who.size()) == op.count) {
              // The last arrival finds its peers waiting (or not) -- calibrate timed both.
              const std::vector<double>& at = arrived_at[op.tag];
              const bool late = op.count >= 2 && at[at.size() - 1] - at[at.size() - 2] >= m.late_arrival_gap_s - eps;
              double d = 0;
              for (int x : who) {
                const Op& o = actors[x].ops[pc[x]];
                d = std::max(d, late && o.late >= 0 ? o.late : o.s);
              }
              for (int x : who) st[x] = Moving, end[x] = now + d, began[x] = now;
              arrived.erase(op.tag);
              arrived_at.erase(op.tag);
              progress = true;
            }
            break;
          }
        }
      }
    }
    bool all_done = true;
    for (int a = 0; a < A; ++a) all_done = all_done && st[a] == Done;
    if (all_done) break;
    // Compute speed: busy threads against the node's cores.
    std::map<int, int> busy;  // node -> busy compute actors
    std::map<std::pair<int, int>, int> on_core;  // bound workers: (node, core) -> busy compute actors
    for (int a = 0; a < A; ++a)
      if (st[a] == Computing && actors[a].uses_cores) {
        ++busy[actors[a].worker / m.devices_per_node];
        if (bound) ++on_core[core_of(actors[a].worker)];
      }
    const double cores = m.parallel_threads > 0 ? m.parallel_threads : m.shared_cores;
    auto seconds_at = [&](int b) {  // measured; in proportion to b beyond the last
      const int K = static_cast<int>(busy_seconds.size());
      return b <= K ? busy_seconds[b - 1] : busy_seconds[K - 1] * b / K;
    };
    auto speed = [&](int a) {
      if (m.shared_cores <= 0 || !actors[a].uses_cores) return 1.0;
      if (bound) {  // the busy workers of its core take turns; the node's busy cores slow each other
        const std::pair<int, int> mine = core_of(actors[a].worker);
        int active = 0;
        for (const auto& [c, n] : on_core) active += c.first == mine.first && n > 0;
        const double each = !busy_seconds.empty() ? seconds_at(timed_busy) / seconds_at(active)
                                                  : std::min(1.0, cores / active) / std::min(1.0, cores / timed_busy);
        return each / on_core[mine];
      }
      if (!busy_seconds.empty()) return seconds_at(timed_busy) / seconds_at(std::max(1, busy[actors[a].worker / m.devices_per_node]));
      const double demand = static_cast<double>(busy[actors[a].worker / m.devices_per_node]) * threads;
      return std::min(1.0, cores / demand) / std::min(1.0, cores / (static_cast<double>(timed_busy) * threads));
    };
    double next = std::numeric_limits<double>::infinity();
    for (int a = 0; a < A; ++a) {
      if (st[a] == Computing) next = std::min(next, now + remaining[a] / speed(a));
      if (st[a] == Moving || st[a] == Lagging) next = std::min(next, end[a]);
    }
    PB_CHECK(std::isfinite(next), "projection: the simulated schedule deadlocks at t = {} s", now);
    const double dt = next - now;
    std::vector<char> computing(workers, 0), moving(workers, 0);
    for (int a = 0; a < A; ++a) {
      if (st[a] == Computing) computing[actors[a].worker] = 1, remaining[a] -= dt * speed(a);
      if (st[a] == Moving) moving[actors[a].worker] = 1;
    }
    for (int w = 0; w < workers; ++w) {
      if (computing[w]) r.compute[w] += dt;
      else if (moving[w]) r.exposed[w] += dt;
    }
    now = next;
    for (int a = 0; a < A; ++a) {
      const bool ends = (st[a] == Computing && remaining[a] <= eps * std::max(1.0, now)) ||
                        ((st[a] == Moving || st[a] == Lagging) && end[a] <= now + eps);
      if (!ends) continue;
      if (const int id = actors[a].ops[pc[a]].action; id >= 0) r.actions.push_back({actors[a].worker, id, began[a], now});
      ++pc[a], st[a] = Ready, in_coll[a] = 0;
    }
  }
  r.end = now;
  return r;
}

}  // namespace pb::projection
