// How an event-ordered communicator's spans are booked (engine/comm.cpp): the wait for peers as
// idle, the rest as transfer, into stats and the trace alike -- on CPU, with a communicator that
// stands in for NCCL's bookkeeping; and the NCCL watchdog's decision (engine/nccl_watch.h).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "engine/check.h"
#include "engine/comm.h"
#include "engine/nccl_watch.h"
#include "engine/tensor.h"

namespace pb {
namespace {

using ::testing::HasSubstr;
using clock_type = std::chrono::steady_clock;

// Every call that moves data yields one span given by the test: the events recorded around
// sleeps (CPU events keep the host time), or host times set directly.
class SpanComm final : public Communicator {
 public:
  explicit SpanComm(std::vector<Backend*> ranks) : Communicator(std::move(ranks)) {}
  std::string name() const override { return "spans"; }
  void abort() noexcept override {}

  bool on_host = false;
  double wait_s = 0.02, transfer_s = 0.01;
  clock_type::time_point host0;

 protected:
  bool orders_with_events() const override { return true; }
  void do_all_reduce(int rank, void*, int64_t, DType) override { span(rank); }
  void do_wait(int) override {}
  void do_broadcast(int rank, float*, int64_t, int) override { span(rank); }
  void do_reduce(int rank, void*, int64_t, int, DType) override { span(rank); }
  void do_send(int rank, const void*, int64_t, int, DType) override { span(rank); }
  void do_recv(int rank, void*, int64_t, int, DType) override { span(rank); }
  int64_t do_send_start(int rank, const void*, int64_t, int, DType) override { return span(rank); }
  int64_t do_recv_start(int rank, void*, int64_t, int, DType) override { return span(rank); }
  void do_wait_transfer(int, int64_t) override {}
  void do_all_gather(int rank, const void*, void*, int64_t, DType) override { span(rank); }
  void do_reduce_scatter(int rank, const void*, void*, int64_t, DType) override { span(rank); }
  std::vector<DeviceSpan> device_spans(int) override { return spans_; }
  void reset_device_timers(int) override { spans_.clear(); }

 private:
  int64_t span(int rank) {
    DeviceSpan d;
    if (on_host) {
      d.on_host = true;
      d.host_arrive = host0;
      d.host_from = host0 + std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(wait_s));
      d.host_to = d.host_from + std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(transfer_s));
    } else {
      events_.push_back(backend(rank).create_event());
      d.arrive = events_.back().get();
      backend(rank).record(*d.arrive);
      std::this_thread::sleep_for(std::chrono::duration<double>(wait_s));
      events_.push_back(backend(rank).create_event());
      d.from = events_.back().get();
      backend(rank).record(*d.from);
      std::this_thread::sleep_for(std::chrono::duration<double>(transfer_s));
      events_.push_back(backend(rank).create_event());
      d.to = events_.back().get();
      backend(rank).record(*d.to);
    }
    spans_.push_back(d);
    return static_cast<int64_t>(spans_.size());
  }
  std::vector<std::unique_ptr<Event>> events_;
  std::vector<DeviceSpan> spans_;
};

struct Ranks {
  Ranks() {
    BackendOptions bo;
    bo.threads = 1;
    for (int r = 0; r < 2; ++r) backends.push_back(make_backend(cpu(r), bo));
    comm = std::make_unique<SpanComm>(std::vector<Backend*>{backends[0].get(), backends[1].get()});
  }
  std::vector<std::unique_ptr<Backend>> backends;
  std::unique_ptr<SpanComm> comm;
};

// Before, a collective's whole span (its kernel spinning until the last member came) was transfer.
TEST(EventCommTiming, TheWaitForPeersBeforeATransferIsIdle) {
  Ranks g;
  Tracer t;
  t.set_detail(true);
  t.begin_step(*g.backends[0], clock_type::now());
  g.comm->set_tracer(0, &t);
  g.comm->reset_stats(0);
  std::vector<float> v(4);
  const auto t0 = clock_type::now();
  g.comm->all_reduce(0, v.data(), 4);
  const double whole = std::chrono::duration<double>(clock_type::now() - t0).count();
  const CommStats s = g.comm->stats(0);
  t.end_step();
  EXPECT_GE(s.wait_s, 0.02);
  EXPECT_GE(s.seconds, 0.01);
  EXPECT_LE(s.wait_s + s.seconds, whole);
  EXPECT_DOUBLE_EQ(s.kinds[static_cast<int>(CollKind::AllReduce)].seconds, s.seconds);
  EXPECT_NEAR(t.total(Phase::Idle), s.wait_s, 1e-6);
  EXPECT_NEAR(t.total(Phase::Transfer), s.seconds, 1e-6);
  bool named = false;
  for (const Span& sp : t.spans()) named = named || (sp.phase == Phase::Idle && sp.name == "wait for peers");
  EXPECT_TRUE(named);
}

// A point-to-point span split on the host clock (NCCL in one process): exactly what it says.
TEST(EventCommTiming, HostPlacedSpansBookTheirSplit) {
  Ranks g;
  g.comm->on_host = true;
  g.comm->wait_s = 0.005, g.comm->transfer_s = 0.003;
  Tracer t;
  t.set_detail(true);
  const auto origin = clock_type::now();
  g.comm->host0 = origin + std::chrono::milliseconds(1);
  t.begin_step(*g.backends[0], origin);
  g.comm->set_tracer(0, &t);
  g.comm->reset_stats(0);
  std::vector<float> v(4);
  g.comm->wait_transfer(0, g.comm->send_start(0, v.data(), 4, 1));
  const CommStats s = g.comm->stats(0);
  t.end_step();
  EXPECT_NEAR(s.wait_s, 0.005, 1e-6);
  EXPECT_NEAR(s.seconds, 0.003, 1e-6);
  EXPECT_NEAR(s.kinds[static_cast<int>(CollKind::SendRecv)].seconds, 0.003, 1e-6);
  EXPECT_EQ(s.bytes, 16u);
  EXPECT_NEAR(t.total(Phase::Transfer), 0.003, 1e-6);
  bool idle = false;
  for (const Span& sp : t.spans()) idle = idle || (sp.phase == Phase::Idle && sp.name == "wait for peer 1");
  EXPECT_TRUE(idle);
}

// Groups hold only starts, do not nest, and their starts are waited for after them.
TEST(EventCommTiming, GroupsHoldOnlyStarts) {
  Ranks g;
  std::vector<float> v(4);
  g.comm->group_start(0);
  EXPECT_THAT([&] { g.comm->group_start(0); }, ::testing::Throws<Error>());
  const int64_t id = g.comm->send_start(0, v.data(), 4, 1);
  try {
    g.comm->wait_transfer(0, id);
    ADD_FAILURE() << "a wait inside a group";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("rank 0 of 2: only send_start and recv_start may come between group_start"));
  }
  EXPECT_THROW(g.comm->all_reduce(0, v.data(), 4), Error);
  EXPECT_THROW(g.comm->send(0, v.data(), 4, 1), Error);
  g.comm->group_end(0);
  g.comm->wait_transfer(0, id);
  EXPECT_THAT([&] { g.comm->group_end(0); }, ::testing::Throws<Error>());
}

TEST(NcclWatch, DecidesDoneWaitingFailedOrTimedOut) {
  WatchState s;
  s.timeout_s = 300;
  EXPECT_EQ(watch_verdict(s), WatchVerdict::Waiting);  // queued, not reached: its own compute
  s.reached = true, s.waited_s = 299;
  EXPECT_EQ(watch_verdict(s), WatchVerdict::Waiting);
  s.waited_s = 301;
  EXPECT_EQ(watch_verdict(s), WatchVerdict::TimedOut);
  EXPECT_EQ(watch_message(2, "send to rank 3 (10 values)", s, WatchVerdict::TimedOut),
            "rank 2: NCCL send to rank 3 (10 values) has waited 301 s for its peers (--comm-timeout 300): a rank has "
            "stopped, hung or died; aborting the communicator");
  s.timeout_s = 0;  // never
  EXPECT_EQ(watch_verdict(s), WatchVerdict::Waiting);
  s.reached = false, s.waited_s = 1e9, s.timeout_s = 1;
  EXPECT_EQ(watch_verdict(s), WatchVerdict::Waiting);  // not yet reached: no peer to blame
  s.finished = true;
  EXPECT_EQ(watch_verdict(s), WatchVerdict::Done);
  s.error = "unhandled system error (connection closed by peer)";
  EXPECT_EQ(watch_verdict(s), WatchVerdict::Failed);  // an error outranks completion
  EXPECT_THAT(watch_message(0, "all_reduce", s, WatchVerdict::Failed),
              HasSubstr("rank 0: NCCL all_reduce failed: unhandled system error (connection closed by peer)"));
}

}  // namespace
}  // namespace pb
