// The launches NcclComm makes, as data, and the simulator of NCCL's matching (engine/nccl_order.h).
#include "engine/nccl_order.h"

#include <algorithm>
#include <map>
#include <tuple>

#include <fmt/format.h>

#include "engine/check.h"

namespace pb {

NcclLaunch p2p_launch(const std::vector<P2pStart>& batch, int comm, const std::vector<int>& job_ranks) {
  NcclLaunch l;
  for (const P2pStart& s : batch) {
    NcclOp op;
    op.kind = s.send ? NcclOp::Send : NcclOp::Recv, op.comm = comm, op.count = s.n;
    op.peer = job_ranks.empty() ? s.peer : job_ranks.at(s.peer);
    l.ops.push_back(op);
  }
  return l;
}

std::vector<NcclLaunch> collective_launches(CollKind kind, int64_t n, int root, int comm) {
  NcclOp a;
  a.kind = NcclOp::Coll, a.comm = comm, a.count = kArrivalCount, a.coll = CollKind::AllReduce, a.arrival = true;
  NcclOp op;
  op.kind = NcclOp::Coll, op.comm = comm, op.count = n, op.coll = kind, op.root = root;
  return {NcclLaunch{{a}, 0}, NcclLaunch{{op}, 0}};
}

ArrivalSplit split_arrival(double from_s, double to_s, const std::vector<double>& peer_from_s) {
  double last = from_s;
  for (double p : peer_from_s) last = std::max(last, p);
  ArrivalSplit s;
  s.wait_s = std::max(0.0, std::min(last, to_s) - from_s);
  s.transfer_s = std::max(0.0, to_s - from_s - s.wait_s);
  return s;
}

int NcclJob::add_comm(std::vector<int> members) {
  batchers_.emplace_back(members.size());
  started_.emplace_back(members.size());
  members_.push_back(std::move(members));
  return static_cast<int>(members_.size()) - 1;
}

void NcclJob::call(int comm, int rank, const CommCall& c) {
  const std::vector<int>& members = members_.at(comm);
  P2pBatcher& b = batchers_.at(comm).at(rank);
  std::vector<NcclLaunch>& out = launches_.at(members.at(rank));
  const int job_rank = members.at(rank);
  std::map<int, int>& waited = waited_.at(job_rank);
  // Issues the launches, each on this communicator's stream after what the compute waited for;
  // `blocking`: the compute waits for them too. Returns the last one's index (-1: none).
  auto issue = [&](const std::vector<NcclLaunch>& ls, bool blocking) {
    int last = -1;
    for (NcclLaunch l : ls) {
      if (l.ops.empty()) continue;  // NcclComm launches nothing for an empty group
      l.stream = comm;
      for (const auto& [stream, launch] : waited)
        if (stream != comm) l.after.push_back(launch);
      last = static_cast<int>(out.size());
      out.push_back(std::move(l));
    }
    if (blocking && last >= 0) waited[comm] = last;
    return last;
  };
  auto issue_batch = [&](const std::vector<P2pStart>& batch) {
    const int at = issue({p2p_launch(batch, comm, members)}, false);
    for (const P2pStart& s : batch) started_.at(comm).at(rank)[s.id] = at;
  };
  switch (c.op) {
    case CommCall::GroupStart: b.group_start(); break;
    case CommCall::GroupEnd: issue_batch(b.take()); break;
    case CommCall::Send:
    case CommCall::Recv: {
      P2pStart s;
      s.send = c.op == CommCall::Send, s.peer = c.peer, s.n = c.n, s.id = c.id;
      if (c.id < 0) {  // a blocking send or recv: a batch of its own, and nothing happens when n is 0
        if (c.n > 0) issue({p2p_launch({s}, comm, members)}, true);
      } else if (b.add(s)) {
        issue_batch(b.take());
      }
      break;
    }
    case CommCall::WaitTransfer: {  // a stream wait, not an NCCL call: what follows runs after it
      const auto it = started_.at(comm).at(rank).find(c.id);
      if (it != started_.at(comm).at(rank).end() && it->second >= 0)
        waited[comm] = std::max(waited.count(comm) ? waited[comm] : -1, it->second);
      break;
    }
    case CommCall::Collective:
      if (c.n > 0) issue(collective_launches(c.kind, c.n, c.peer, comm), true);
      break;
  }
}

std::string describe(const NcclOp& op) {
  const std::string what = op.arrival ? "arrival " : "";
  if (op.kind == NcclOp::Coll)
    return fmt::format("{}{} of {} values{} (comm {})", what, coll_kind_name(op.coll), op.count,
                       op.root >= 0 ? fmt::format(" root {}", op.root) : "", op.comm);
  return fmt::format("{}{} of {} values {} rank {} (comm {})", what, op.kind == NcclOp::Send ? "send" : "receive",
                     op.count, op.kind == NcclOp::Send ? "to" : "from", op.peer, op.comm);
}

namespace {

struct OpRef {
  int rank, launch, op;
};

}  // namespace

std::string simulate_nccl(const std::vector<std::vector<NcclLaunch>>& ranks, const std::vector<std::vector<int>>& members) {
  const int n = static_cast<int>(ranks.size());
  // Each op's partners: the matching op (p2p) or every member's (collective).
  std::vector<std::vector<std::vector<std::vector<OpRef>>>> partners(n);
  std::map<std::tuple<int, int, int>, std::vector<OpRef>> sends, recvs;  // (comm, from, to)
  std::map<std::pair<int, int>, std::vector<OpRef>> colls;               // (comm, rank)
  for (int r = 0; r < n; ++r) {
    partners[r].resize(ranks[r].size());
    for (int l = 0; l < static_cast<int>(ranks[r].size()); ++l) {
      partners[r][l].resize(ranks[r][l].ops.size());
      for (int o = 0; o < static_cast<int>(ranks[r][l].ops.size()); ++o) {
        const NcclOp& op = ranks[r][l].ops[o];
        if (op.kind == NcclOp::Coll) colls[{op.comm, r}].push_back({r, l, o});
        else if (op.peer < 0 || op.peer >= n || op.peer == r)
          return fmt::format("rank {}: {} names no other rank of the {}", r, describe(op), n);
        else if (op.kind == NcclOp::Send) sends[{op.comm, r, op.peer}].push_back({r, l, o});
        else recvs[{op.comm, op.peer, r}].push_back({r, l, o});
      }
    }
  }
  auto at = [&](const OpRef& x) -> const NcclOp& { return ranks[x.rank][x.launch].ops[x.op]; };
  std::map<std::tuple<int, int, int>, std::vector<OpRef>> channels = sends;
  for (const auto& [key, v] : recvs) channels.emplace(key, std::vector<OpRef>{});
  for (const auto& [key, unused] : channels) {
    const auto [comm, from, to] = key;
    const std::vector<OpRef>& s = sends[key];
    const std::vector<OpRef>& v = recvs[key];
    for (std::size_t k = 0; k < std::max(s.size(), v.size()); ++k) {
      if (k >= v.size())
        return fmt::format("rank {}'s send #{} to rank {} on comm {} ({}) is never received there: rank {} posts {} "
                           "receive(s) from rank {} on it", from, k, to, comm, describe(at(s[k])), to, v.size(), from);
      if (k >= s.size())
        return fmt::format("rank {}'s receive #{} from rank {} on comm {} ({}) is never sent: rank {} posts {} send(s) "
                           "to rank {} on it", to, k, from, comm, describe(at(v[k])), from, s.size(), to);
      if (at(s[k]).count != at(v[k]).count)
        return fmt::format("rank {}'s send #{} to rank {} on comm {} ({}) meets rank {}'s receive of {} values",
                           from, k, to, comm, describe(at(s[k])), to, at(v[k]).count);
      partners[from][s[k].launch][s[k].op] = {v[k]};
      partners[to][v[k].launch][v[k].op] = {s[k]};
    }
  }
  for (int comm = 0; comm < static_cast<int>(members.size()); ++comm) {
    const std::vector<int>& m = members[comm];
    for (int r : m)
      if (colls[{comm, r}].size() != colls[{comm, m[0]}].size())
        return fmt::format("comm {}: rank {} makes {} collective(s), rank {} makes {}", comm, m[0],
                           colls[{comm, m[0]}].size(), r, colls[{comm, r}].size());
    for (std::size_t j = 0; j < colls[{comm, m[0]}].size(); ++j) {
      std::vector<OpRef> all;
      for (int r : m) all.push_back(colls[{comm, r}][j]);
      const NcclOp& first = at(all[0]);
      for (const OpRef& x : all) {
        if (at(x).coll != first.coll || at(x).count != first.count || at(x).root != first.root)
          return fmt::format("comm {}: collective #{} is {} at rank {} but {} at rank {}", comm, j, describe(first),
                             m[0], describe(at(x)), x.rank);
        partners[x.rank][x.launch][x.op] = all;
      }
    }
  }
  for (const auto& [key, v] : colls)
    if (key.first >= static_cast<int>(members.size()))
      return fmt::format("rank {} makes a collective on comm {}, which has no members", key.second, key.first);

  // Run: the launch at the front of each (rank, stream) is the one running there.
  std::map<std::pair<int, int>, std::vector<int>> queue;  // (rank, stream) -> launches
  for (int r = 0; r < n; ++r)
    for (int l = 0; l < static_cast<int>(ranks[r].size()); ++l) queue[{r, ranks[r][l].stream}].push_back(l);
  std::map<std::pair<int, int>, std::size_t> front;
  std::vector<std::vector<std::vector<char>>> done(n);
  for (int r = 0; r < n; ++r)
    for (const NcclLaunch& l : ranks[r]) done[r].emplace_back(l.ops.size(), 0);
  auto complete = [&](int r, int l) {
    for (char d : done[r][l])
      if (!d) return false;
    return true;
  };
  // At the front of its stream, and what it comes after complete.
  auto started = [&](int r, int l) {
    for (int a : ranks[r][l].after)
      if (!complete(r, a)) return false;
    return true;
  };
  auto running = [&](const OpRef& x) {
    const auto& q = queue[{x.rank, ranks[x.rank][x.launch].stream}];
    const std::size_t f = front[{x.rank, ranks[x.rank][x.launch].stream}];
    return f < q.size() && q[f] == x.launch && started(x.rank, x.launch);
  };
  for (bool moved = true; moved;) {
    moved = false;
    for (auto& [key, q] : queue) {
      std::size_t& f = front[key];
      if (f >= q.size()) continue;
      const int r = key.first, l = q[f];
      if (!started(r, l)) continue;
      for (std::size_t o = 0; o < ranks[r][l].ops.size(); ++o) {
        if (done[r][l][o]) continue;
        bool ready = true;
        for (const OpRef& p : partners[r][l][o]) ready = ready && running(p);
        if (!ready) continue;
        for (const OpRef& p : partners[r][l][o]) done[p.rank][p.launch][p.op] = 1;
        done[r][l][o] = 1;
      }
      while (f < q.size() && complete(r, q[f])) ++f, moved = true;
    }
  }
  std::string stuck;
  for (auto& [key, q] : queue) {
    const std::size_t f = front[key];
    if (f >= q.size()) continue;
    const int r = key.first, l = q[f];
    for (std::size_t o = 0; o < ranks[r][l].ops.size(); ++o)
      if (!done[r][l][o]) {
        stuck += fmt::format("{}rank {} (stream {}, launch {} of {}) waits in {}", stuck.empty() ? "" : "; ", r,
                             key.second, l, ranks[r].size(), describe(ranks[r][l].ops[o]));
        break;
      }
  }
  return stuck.empty() ? std::string() : "deadlock: " + stuck;
}

}  // namespace pb
