// The order of NCCL calls, checked without a GPU: every pipeline variant runs on CPU while its
// ranks' communicator calls are recorded; they are turned into the launches NcclComm would make
// (engine/nccl_order.h) and NCCL's matching is simulated: every send must meet its receive on the
// same communicator, in order, and nothing may deadlock. The earlier choices (a communicator per
// direction picked by `peer > rank`, ungrouped starts on one stream) are shown to fail.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "engine/check.h"
#include "engine/net.h"
#include "engine/nccl_order.h"
#include "strategies/registry.h"
#include "workloads/workload.h"

namespace pb {
namespace {

using ::testing::HasSubstr;

// What every rank asked of its communicators during one strategy's steps, in each rank's order.
struct Recorded {
  struct Entry {
    const Communicator* comm;  // an identity only: gone after the run
    int size;                  // of comm
    int rank;                  // in comm
    CommCall call;
  };
  std::vector<std::vector<Entry>> per_rank;  // per job rank
  std::vector<const Communicator*> comms;    // in order of first use
  std::map<const Communicator*, std::vector<int>> members;  // job ranks, by rank in the comm
};

Recorded record(const std::string& strategy, int devices, int micro, int64_t batch,
                const NetSpec& net = great_net(8, 0.1875)) {
  std::mutex mu;
  std::vector<std::pair<std::thread::id, Recorded::Entry>> log;
  set_comm_call_observer([&](const Communicator& c, int rank, const CommCall& call) {
    std::lock_guard<std::mutex> lock(mu);
    log.push_back({std::this_thread::get_id(), {&c, c.size(), rank, call}});
  });
  StrategyOptions o;
  o.devices = devices;
  o.micro_batches = micro;
  o.backend.threads = 1;
  const NetPlan plan = plan_net(net);
  {
    auto s = make_strategy(strategy, o);
    s->setup(plan, init_params(plan, 0), AdamParams{});
    s->load_batch(synthetic_values(batch * numel_of(plan.input), 1), synthetic_values(batch * numel_of(plan.output), 2),
                  batch);
    s->step();
  }
  set_comm_call_observer({});
  // A worker always runs on the same thread, and its rank on the communicator over every worker
  // is its job rank: that names the threads, and then the members of the other communicators.
  Recorded r;
  r.per_rank.resize(devices);
  std::map<std::thread::id, int> job;
  for (const auto& [t, e] : log)
    if (e.size == devices) job[t] = e.rank;
  if (job.empty()) {
    // Workers that talk on two-worker channels alone (a chunked schedule over a net with skips):
    // a channel's rank 0 is the lower job rank, and the channels chain every worker to the next.
    std::map<const Communicator*, std::map<int, std::thread::id>> at;
    std::map<std::thread::id, std::set<std::thread::id>> below;  // per thread, those of lower job rank
    for (const auto& [t, e] : log) at[e.comm][e.rank] = t, below[t];
    for (const auto& [c, ranks] : at)
      if (ranks.size() == 2) below[ranks.at(1)].insert(ranks.at(0));
    for (std::size_t round = 0; round < below.size(); ++round)
      for (auto& [t, lower] : below)
        for (const std::thread::id u : std::set<std::thread::id>(lower)) lower.insert(below[u].begin(), below[u].end());
    for (const auto& [t, lower] : below) job[t] = static_cast<int>(lower.size());
  }
  for (const auto& [t, e] : log) {
    EXPECT_TRUE(job.count(t)) << "a thread that never called the communicator over every worker";
    const int j = job[t];
    std::vector<int>& m = r.members[e.comm];
    if (m.empty()) {
      m.assign(e.size, -1);
      r.comms.push_back(e.comm);
    }
    m.at(e.rank) = j;
    r.per_rank[j].push_back(e);
  }
  return r;
}

// The launches NcclComm makes from the recording (ignore_groups: as if the strategy issued no
// groups), and the simulator's verdict.
std::string check_today(const Recorded& r, bool ignore_groups = false) {
  NcclJob job(static_cast<int>(r.per_rank.size()));
  std::map<const Communicator*, int> id;
  for (const Communicator* c : r.comms) id[c] = job.add_comm(r.members.at(c));
  for (const auto& calls : r.per_rank)
    for (const auto& e : calls) {
      if (ignore_groups && (e.call.op == CommCall::GroupStart || e.call.op == CommCall::GroupEnd)) continue;
      job.call(id[e.comm], e.rank, e.call);
    }
  return simulate_nccl(job.launches(), job.members());
}

// The choice before: starts on one of two communicators split off each, per direction, picked by
// `peer > rank ? 0 : 1` for sends and receives alike, each on its own stream; collectives on the
// first, no grouping, no arrival handshake.
std::string check_old_rule(const Recorded& r) {
  std::vector<std::vector<NcclLaunch>> launches(r.per_rank.size());
  std::vector<std::vector<int>> members;
  std::map<const Communicator*, int> base;
  for (const Communicator* c : r.comms) {
    base[c] = static_cast<int>(members.size());
    for (int k = 0; k < 3; ++k) members.push_back(r.members.at(c));
  }
  for (std::size_t j = 0; j < r.per_rank.size(); ++j)
    for (const auto& e : r.per_rank[j]) {
      const std::vector<int>& m = r.members.at(e.comm);
      NcclOp op;
      op.count = e.call.n;
      if (e.call.op == CommCall::Collective) {
        if (e.call.n == 0) continue;
        op.kind = NcclOp::Coll, op.coll = e.call.kind, op.root = e.call.peer, op.comm = base[e.comm];
        launches[j].push_back({{op}, 0});
      } else if ((e.call.op == CommCall::Send || e.call.op == CommCall::Recv) && e.call.id >= 0) {
        const int dir = e.call.peer > e.rank ? 0 : 1;
        op.kind = e.call.op == CommCall::Send ? NcclOp::Send : NcclOp::Recv;
        op.peer = m.at(e.call.peer), op.comm = base[e.comm] + 1 + dir;
        launches[j].push_back({{op}, 1 + dir});
      }
    }
  return simulate_nccl(launches, members);
}

struct Case {
  std::string strategy;
  int devices;
};

std::vector<Case> pipelines() {
  std::vector<Case> cases;
  for (const char* s : {"pipeline", "pipeline-1f1b", "pipeline-zb", "pipeline-recompute", "pipeline-1f1b-recompute"})
    for (int p = 2; p <= 4; ++p) cases.push_back({s, p});
  for (const char* s : {"dp2xpp2", "dp2xpp2-1f1b", "dp2xpp2-recompute", "dp2xpp2-1f1b-recompute"}) cases.push_back({s, 4});
  cases.push_back({"dp2xpp3-1f1b", 6});
  cases.push_back({"dp3xpp2", 6});
  return cases;
}

TEST(NcclOrder, EveryPipelineVariantMeetsAndCompletes) {
  for (const Case& c : pipelines())
    for (int micro : {1, 2, 3, 5, 8}) {
      SCOPED_TRACE(fmt::format("{} on {} workers, {} micro-batches", c.strategy, c.devices, micro));
      const Recorded r = record(c.strategy, c.devices, micro, 24);
      std::size_t starts = 0;
      for (const auto& calls : r.per_rank)
        for (const auto& e : calls) starts += e.call.id >= 0 && e.call.op != CommCall::WaitTransfer;
      EXPECT_GT(starts, 0u);  // the recording saw the transfers
      EXPECT_EQ(check_today(r), "");
    }
}

// Interleaved 1F1B: activations and gradients on the communicator over every worker, the last
// worker's activations wrapping to the first, in Megatron's batches (a step's sends with the next
// step's receives, one group): every send meets its receive. Sent as 1F1B sends (each output with
// the next computation's input), a lone gradient send before a stage-0 forward would hold the
// in-order stream while the peer's send waits for this rank's next launch.
TEST(NcclOrder, InterleavedMeetsAndCompletes) {
  for (int p = 2; p <= 4; ++p)
    for (int micro : {p, 2 * p}) {
      SCOPED_TRACE(fmt::format("pipeline-interleaved on {} workers, {} micro-batches", p, micro));
      const Recorded r = record("pipeline-interleaved", p, micro, 24);
      EXPECT_EQ(r.comms.size(), 1u);
      EXPECT_EQ(check_today(r), "");
    }
}

// Zero-bubble V: each chunk's activations and gradients on a communicator of their own, so that on
// each one messages go one way between two workers (on one communicator, or gradients beside
// activations on two, the V's opposite sends deadlock), sent after each computation and received
// before, as 1F1B: every send meets its receive.
TEST(NcclOrder, ZeroBubbleVMeetsAndCompletes) {
  for (int p = 2; p <= 4; ++p)
    for (int micro : {1, 2, 3, 5, 8}) {
      SCOPED_TRACE(fmt::format("pipeline-zbv on {} workers, {} micro-batches", p, micro));
      const Recorded r = record("pipeline-zbv", p, micro, 24);
      EXPECT_EQ(r.comms.size(), 4u);
      EXPECT_EQ(check_today(r), "");
    }
}

// Nets with skips: a stage receives each value it reads from every stage making one, in one group,
// and sends each exit to every stage reading it -- values crossing one stage and several, both
// ways on the one communicator (under chunked schedules, on a communicator per flow): every send
// meets its receive, nothing deadlocks.
TEST(NcclOrder, PipelinesSendingSkipsMeetAndComplete) {
  for (const NetSpec& net : {unet(16, 0.125), resnet(16, 0.125)})
    for (const char* s : {"pipeline", "pipeline-1f1b", "pipeline-zb", "pipeline-1f1b-recompute"})
      for (int p = 2; p <= 4; ++p)
        for (int micro : {1, 3, 5}) {
          SCOPED_TRACE(fmt::format("{}: {} on {} workers, {} micro-batches", net.name, s, p, micro));
          const Recorded r = record(s, p, micro, 10, net);
          EXPECT_EQ(check_today(r), "");
        }
  // Chunked schedules: each flow between two workers on a communicator of its own.
  for (const NetSpec& net : {unet(16, 0.125), resnet(16, 0.125)})
    for (int p = 2; p <= 4; ++p) {
      for (int micro : {p, 2 * p}) {
        SCOPED_TRACE(fmt::format("{}: pipeline-interleaved on {} workers, {} micro-batches", net.name, p, micro));
        EXPECT_EQ(check_today(record("pipeline-interleaved", p, micro, 2 * micro, net)), "");
      }
      for (int micro : {1, 3, 5}) {
        SCOPED_TRACE(fmt::format("{}: pipeline-zbv on {} workers, {} micro-batches", net.name, p, micro));
        EXPECT_EQ(check_today(record("pipeline-zbv", p, micro, 10, net)), "");
      }
    }
  for (const auto& [s, n] : {std::pair{"dp2xpp2-1f1b", 4}, {"dp2xpp3-1f1b", 6}, {"dp2xpp3", 6}}) {
    SCOPED_TRACE(s);
    EXPECT_EQ(check_today(record(s, n, 3, 12, unet(16, 0.125))), "");
  }
}

// Today's code's choice, on the same recordings: a send and its receive land on different
// communicators, and a single stream without groups deadlocks under 1F1B.
TEST(NcclOrder, PerDirectionCommunicatorsAndUngroupedStartsFail) {
  for (const Case& c : pipelines()) {
    SCOPED_TRACE(fmt::format("{} on {} workers", c.strategy, c.devices));
    const Recorded r = record(c.strategy, c.devices, 4, 16);
    EXPECT_THAT(check_old_rule(r), HasSubstr("is never received"));
    if (c.strategy.find("1f1b") != std::string::npos) {
      EXPECT_THAT(check_today(r, true), HasSubstr("deadlock"));
    }
  }
}

NcclOp p2p(NcclOp::Kind k, int peer, int64_t n) {
  NcclOp op;
  op.kind = k, op.peer = peer, op.count = n;
  return op;
}

// The simulator itself: what NCCL does with two ranks that each send before they receive.
TEST(NcclOrder, SimulatorFollowsNcclsMatching) {
  const NcclOp s1 = p2p(NcclOp::Send, 1, 4), r1 = p2p(NcclOp::Recv, 1, 4), s0 = p2p(NcclOp::Send, 0, 4),
               r0 = p2p(NcclOp::Recv, 0, 4);
  const std::vector<std::vector<int>> comm = {{0, 1}};
  EXPECT_THAT(simulate_nccl({{{{s1}}, {{r1}}}, {{{s0}}, {{r0}}}}, comm),
              HasSubstr("deadlock: rank 0 (stream 0, launch 0 of 2) waits in send of 4 values to rank 1"));
  EXPECT_EQ(simulate_nccl({{{{s1, r1}}}, {{{s0, r0}}}}, comm), "");         // grouped
  EXPECT_EQ(simulate_nccl({{{{s1}}, {{r1}}}, {{{r0}}, {{s0}}}}, comm), "");  // in matching order
  EXPECT_THAT(simulate_nccl({{{{s1}}}, {{{p2p(NcclOp::Recv, 0, 3)}}}}, comm), HasSubstr("meets rank 1's receive of 3"));
  EXPECT_THAT(simulate_nccl({{{{s1}}}, {}}, comm), HasSubstr("is never received"));
  NcclOp on_other = r0;
  on_other.comm = 1;
  EXPECT_THAT(simulate_nccl({{{{s1}}}, {{{on_other}}}}, {{0, 1}, {0, 1}}), HasSubstr("is never received"));
  NcclOp ar;
  ar.kind = NcclOp::Coll, ar.coll = CollKind::AllReduce, ar.count = 8;
  EXPECT_EQ(simulate_nccl({{{{ar}}}, {{{ar}}}}, comm), "");
  NcclOp ar4 = ar;
  ar4.count = 4;
  EXPECT_THAT(simulate_nccl({{{{ar}}}, {{{ar4}}}}, comm), HasSubstr("collective #0"));
  // A collective behind a send its peer only receives after the collective: stuck.
  EXPECT_THAT(simulate_nccl({{{{s1}}, {{ar}}}, {{{ar}}, {{r0}}}}, comm), HasSubstr("deadlock"));
}

// The batches NcclComm launches: one group each, in order; a collective behind its handshake.
TEST(NcclOrder, BatchesAndCollectivesAsLaunched) {
  P2pStart a{true, 1, 10}, b{false, 2, 20};
  const NcclLaunch l = p2p_launch({a, b}, 3, {5, 6, 7});
  ASSERT_EQ(l.ops.size(), 2u);
  EXPECT_EQ(describe(l.ops[0]), "send of 10 values to rank 6 (comm 3)");
  EXPECT_EQ(describe(l.ops[1]), "receive of 20 values from rank 7 (comm 3)");
  const auto c = collective_launches(CollKind::Broadcast, 9, 1, 2);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(describe(c[0].ops.at(0)), "arrival all_reduce of 1 values (comm 2)");
  EXPECT_EQ(describe(c[1].ops.at(0)), "broadcast of 9 values root 1 (comm 2)");
  P2pBatcher batcher;
  EXPECT_TRUE(batcher.add(a));  // outside a group: at once
  EXPECT_EQ(batcher.take().size(), 1u);
  batcher.group_start();
  EXPECT_FALSE(batcher.add(a));
  EXPECT_FALSE(batcher.add(b));
  EXPECT_EQ(batcher.take().size(), 2u);
  EXPECT_FALSE(batcher.grouped());
}

// Why point-to-point batches get no arrival handshake in the stream: one before each batch (a
// one-value exchange with the peer of every op, on a communicator of its own) deadlocks GPipe,
// whose stages group a turn's send and receive where the peer has them in two batches.
TEST(NcclOrder, AHandshakeBeforeEachBatchWouldDeadlock) {
  const Recorded r = record("pipeline", 2, 1, 16);
  NcclJob job(2);
  const int comm = job.add_comm(r.members.at(r.comms.at(0)));
  for (const auto& calls : r.per_rank)
    for (const auto& e : calls) job.call(comm, e.rank, e.call);
  std::vector<std::vector<NcclLaunch>> with(2);
  for (int j = 0; j < 2; ++j)
    for (const NcclLaunch& l : job.launches()[j]) {
      NcclLaunch h;
      for (const NcclOp& op : l.ops)
        for (NcclOp::Kind k : {NcclOp::Send, NcclOp::Recv}) {
          NcclOp t = op;
          t.kind = k, t.count = 1, t.comm = comm + 1;
          h.ops.push_back(t);
        }
      with[j].push_back(h);
      with[j].push_back(l);
    }
  std::vector<std::vector<int>> members = job.members();
  members.push_back(members.at(comm));
  EXPECT_EQ(simulate_nccl(job.launches(), job.members()), "");
  EXPECT_THAT(simulate_nccl(with, members), HasSubstr("deadlock"));
}

// Starts both ways along a chain (Comm.NcclAllReduceBroadcastSendRecvOnGpus): each rank's sends
// come before its receives, so on one stream they need a group.
TEST(NcclOrder, StartsBothWaysAlongAChainNeedAGroup) {
  for (int n = 2; n <= 4; ++n)
    for (bool grouped : {false, true}) {
      NcclJob job(n);
      std::vector<int> all;
      for (int r = 0; r < n; ++r) all.push_back(r);
      const int comm = job.add_comm(all);
      for (int r = 0; r < n; ++r) {
        int64_t id = 0;
        auto start = [&](CommCall::Op op, int peer) { job.call(comm, r, {op, CollKind::SendRecv, peer, 8, id++}); };
        if (grouped) job.call(comm, r, {CommCall::GroupStart});
        if (r + 1 < n) start(CommCall::Send, r + 1);
        if (r > 0) start(CommCall::Send, r - 1);
        if (r > 0) start(CommCall::Recv, r - 1);
        if (r + 1 < n) start(CommCall::Recv, r + 1);
        if (grouped) job.call(comm, r, {CommCall::GroupEnd});
      }
      SCOPED_TRACE(fmt::format("{} ranks, grouped {}", n, grouped));
      if (grouped) EXPECT_EQ(simulate_nccl(job.launches(), job.members()), "");
      else EXPECT_THAT(simulate_nccl(job.launches(), job.members()), HasSubstr("deadlock"));
    }
}

// The split of a point-to-point span: no data moves before the last peer has arrived.
TEST(NcclOrder, SplitArrivalWaitsForTheLastPeer) {
  auto near = [](ArrivalSplit s, double wait, double transfer) {
    EXPECT_NEAR(s.wait_s, wait, 1e-12);
    EXPECT_NEAR(s.transfer_s, transfer, 1e-12);
  };
  near(split_arrival(1.0, 3.0, {}), 0.0, 2.0);          // nobody to wait for
  near(split_arrival(1.0, 3.0, {0.5}), 0.0, 2.0);       // the peer was there first
  near(split_arrival(1.0, 3.0, {2.5}), 1.5, 0.5);       // a late peer: idle until it came
  near(split_arrival(1.0, 3.0, {1.2, 2.0, 1.5}), 1.0, 1.0);  // the last of several
  near(split_arrival(1.0, 3.0, {4.0}), 2.0, 0.0);       // clock skew past the end: all wait
}

}  // namespace
}  // namespace pb
