// NCCL communicator, one class for both bootstraps: every rank in this process, one per distinct
// GPU (ncclCommInitAll), or this process's single rank joining the others through a unique id
// that rank 0 made and the job broadcast (ncclCommInitRank; engine/mpi/nccl_mpi_comm.cpp). Each
// local rank is driven by its own worker thread and has one NCCL communicator and one stream:
// its calls wait for the compute queued before them and the compute queued after waits for them,
// through events, so the host never blocks and ddp's buckets overlap backward.
//
// One communicator and one stream keep every rank's NCCL calls in issue order, the order NCCL
// needs; point-to-point starts go out in batches (one per start, or one per Communicator group:
// ncclGroupStart/End), as engine/nccl_order.h describes and tests/test_nccl_order.cpp checks for
// every pipeline schedule. Transfer is the data movement alone (docs/reports.md): a collective
// follows a one-value all-reduce whose span is the wait for its members; a point-to-point
// launch's wait for its peers is split off afterwards from when they reached theirs (in one
// process, where every rank's events are at hand); a watchdog
// (nccl_watchdog.h) turns errors and hung peers into an abort with a message.
#include <atomic>
#include <cstring>
#include <map>
#include <thread>

#include <cuda_runtime.h>
#include <nccl.h>

#include "engine/check.h"
#include "engine/comm.h"
#include "engine/nccl/nccl_arrivals.h"
#include "engine/nccl/nccl_watchdog.h"
#include "engine/nccl_order.h"
#include "engine/process.h"

namespace pb {

namespace {

class NcclComm final : public Communicator {
 public:
  // id null: every rank is local (ncclCommInitAll). Else `me` is the one local rank.
  NcclComm(std::vector<Backend*> ranks, const ncclUniqueId* id, int me)
      : Communicator(std::move(ranks)), multi_process_(id != nullptr), watchdog_(size()), arrivals_(size()) {
    lanes_.resize(size());
    try {
      if (!id) {
        std::vector<int> devs(size());
        std::vector<ncclComm_t> comms(size(), nullptr);
        for (int r = 0; r < size(); ++r) devs[r] = device(r).index;
        NCCL_CHECK(ncclCommInitAll(comms.data(), size(), devs.data()));
        for (int r = 0; r < size(); ++r) lanes_[r].comm = comms[r];
      } else {
        PB_CHECK(is_local(me), "process must own rank {} of {}", me, size());
        CUDA_CHECK(cudaSetDevice(device(me).index));
        NCCL_CHECK(ncclCommInitRank(&lanes_[me].comm, size(), *id, me));
      }
      for (int r = 0; r < size(); ++r) {
        if (!is_local(r)) continue;
        Backend& be = backend(r);
        Lane& l = lanes_[r];
        CUDA_CHECK(cudaSetDevice(device(r).index));
        CUDA_CHECK(cudaMalloc(&l.scratch, kArrivalCount * sizeof(float)));
        CUDA_CHECK(cudaMemset(l.scratch, 0, kArrivalCount * sizeof(float)));
        l.stream = be.create_stream();
        l.ready = be.create_event();
        l.done = be.create_event();
        l.clock = be.create_stream();
        l.origin = be.create_event();
        watchdog_.add_rank(r, l.comm);
      }
      watchdog_.start([this](const std::string& msg) { fail(msg); });
    } catch (...) {
      release();
      throw;
    }
  }

  ~NcclComm() override { release(); }

  std::string name() const override { return "nccl"; }

  // ncclCommAbort makes every local rank's pending or future NCCL call fail, so blocked workers
  // wake up; other processes are ended by main's MPI_Abort.
  void abort() noexcept override { abort_comms("communicator aborted: another worker failed"); }

 protected:
  bool orders_with_events() const override { return true; }

  static ncclDataType_t type(DType t) { return t == DType::F32 ? ncclFloat : ncclBfloat16; }
  void do_all_reduce(int rank, void* buf, int64_t n, DType t) override {
    collective(rank, false, "all_reduce", [&](ncclComm_t c, cudaStream_t s) {
      NCCL_CHECK(ncclAllReduce(buf, buf, count(n), type(t), ncclSum, c, s));
    });
  }
  // The compute queued from now on waits for every all-reduce started before.
  void do_wait(int rank) override {
    on(rank);
    Lane& l = lanes_[rank];
    backend(rank).record(*l.done, l.stream.get());
    backend(rank).wait(*l.done);
  }
  void do_broadcast(int rank, float* buf, int64_t n, int root) override {
    collective(rank, true, fmt::format("broadcast from root {}", root), [&](ncclComm_t c, cudaStream_t s) {
      NCCL_CHECK(ncclBroadcast(buf, buf, count(n), ncclFloat, root, c, s));
    });
  }
  void do_reduce(int rank, void* buf, int64_t n, int root, DType t) override {
    collective(rank, true, fmt::format("reduce to root {}", root), [&](ncclComm_t c, cudaStream_t s) {
      NCCL_CHECK(ncclReduce(buf, buf, count(n), type(t), ncclSum, root, c, s));
    });
  }
  void do_send(int rank, const void* buf, int64_t n, int peer, DType t) override {
    issue(rank, {P2pStart{true, peer, n, const_cast<void*>(buf), -1, t}}, true);
  }
  void do_recv(int rank, void* buf, int64_t n, int peer, DType t) override {
    issue(rank, {P2pStart{false, peer, n, buf, -1, t}}, true);
  }

  // Outside a group, on the stream at once; inside, at group_end. wait_transfer makes the compute
  // queued afterwards wait for it.
  int64_t do_send_start(int rank, const void* buf, int64_t n, int peer, DType t) override {
    return start(rank, P2pStart{true, peer, n, const_cast<void*>(buf), -1, t});
  }
  int64_t do_recv_start(int rank, void* buf, int64_t n, int peer, DType t) override {
    return start(rank, P2pStart{false, peer, n, buf, -1, t});
  }
  void do_group_start(int rank) override {
    on(rank);
    lanes_[rank].batch.group_start();
  }
  void do_group_end(int rank) override { issue(rank, lanes_[rank].batch.take(), false); }
  void do_wait_transfer(int rank, int64_t id) override {
    on(rank);
    Lane& l = lanes_[rank];
    auto it = l.pending.find(id);
    PB_CHECK(it != l.pending.end(), "rank {} waits for transfer {}, which it has not started or already waited for",
             rank, id);
    backend(rank).wait(*l.events[it->second]);
    l.free_events.push_back(it->second);
    l.pending.erase(it);
  }
  // complete false: started; the compute queued later waits for it only at do_wait, as for do_all_reduce.
  void gather_on(int rank, const void* send, void* recv, int64_t n, DType t, bool complete) {
    collective(rank, complete, "all_gather", [&](ncclComm_t c, cudaStream_t s) { NCCL_CHECK(ncclAllGather(send, recv, count(n), type(t), c, s)); });
  }
  void do_all_gather(int rank, const void* send, void* recv, int64_t n, DType t) override { gather_on(rank, send, recv, n, t, true); }
  void do_all_gather_start(int rank, const void* send, void* recv, int64_t n, DType t) override { gather_on(rank, send, recv, n, t, false); }
  void do_reduce_scatter(int rank, const void* send, void* recv, int64_t n, DType t) override {
    collective(rank, true, "reduce_scatter", [&](ncclComm_t c, cudaStream_t s) { NCCL_CHECK(ncclReduceScatter(send, recv, count(n), type(t), ncclSum, c, s)); });
  }

  // Complete once the rank's compute is; a send never waited for may still run on the NCCL
  // stream, so the host waits for that too (polling, so that a failure surfaces).
  std::vector<DeviceSpan> device_spans(int rank) override {
    drain(rank);
    auto spans = lanes_[rank].spans;
    if (!multi_process_) arrivals_.split(rank, spans);  // else their wait stays in (docs/reports.md)
    return spans;
  }
  void reset_device_timers(int rank) override {
    Lane& l = lanes_[rank];
    l.timed = 0;
    l.spans.clear();
    CUDA_CHECK(cudaSetDevice(device(rank).index));
    if (!multi_process_) arrivals_.reset(rank, backend(rank), *l.clock, *l.origin);
  }

 private:
  struct Timer {
    std::unique_ptr<Event> arrive, from, to;  // before a collective's handshake, after it, after the launch
  };
  struct Lane {
    ncclComm_t comm = nullptr;
    float* scratch = nullptr;  // device memory of the collectives' arrival all-reduce
    std::unique_ptr<Stream> stream;
    std::unique_ptr<Event> ready, done;
    std::unique_ptr<Stream> clock;  // idle: where the origin of the rank's step is recorded
    std::unique_ptr<Event> origin;
    std::vector<std::unique_ptr<Timer>> timers;  // one per launch, reused each step
    int timed = 0;                               // timers used since the last reset
    std::vector<DeviceSpan> spans;               // per call that moved data, for the base class
    P2pBatcher batch;
    std::vector<std::unique_ptr<Event>> events;  // one per transfer in flight, reused
    std::vector<int> free_events;
    std::map<int64_t, int> pending;  // issued transfer id -> its event
    int64_t next_id = 0;
  };

  // Worker threads call for their own rank; the CUDA current device is per thread: set it.
  void on(int rank) {
    if (aborted_) throw Error(failure());
    CUDA_CHECK(cudaSetDevice(device(rank).index));
    ncclResult_t async = ncclSuccess;
    NCCL_CHECK(ncclCommGetAsyncError(lanes_[rank].comm, &async));
    if (async != ncclSuccess && async != ncclInProgress) {
      fail(fmt::format("rank {}: the NCCL communicator failed: {} ({})", rank, ncclGetErrorString(async),
                       ncclGetLastError(lanes_[rank].comm)));
      throw Error(failure());
    }
  }

  // One launch on the rank's stream after the compute queued so far: the arrival handshake, then
  // the op, between the timer's events (engine/nccl_order.h).
  template <class Arrival, class Op>
  Timer& launch(int rank, const std::string& call, Arrival&& arrival, Op&& op) {
    Lane& l = lanes_[rank];
    Backend& be = backend(rank);
    be.record(*l.ready);
    be.wait(*l.ready, l.stream.get());
    if (l.timed == static_cast<int>(l.timers.size()))
      l.timers.push_back(std::make_unique<Timer>(Timer{be.create_event(), be.create_event(), be.create_event()}));
    Timer& t = *l.timers[l.timed++];
    const auto s = static_cast<cudaStream_t>(l.stream->native());
    be.record(*t.arrive, l.stream.get());
    watchdog_.watch(rank, call, s, [&] {
      arrival(s);
      be.record(*t.from, l.stream.get());
      op(s);
    });
    be.record(*t.to, l.stream.get());
    return t;
  }

  // complete: the compute queued later waits for it too.
  template <class Op>
  void collective(int rank, bool complete, const std::string& what, Op&& op) {
    on(rank);
    Lane& l = lanes_[rank];
    Timer& t = launch(
        rank, what,
        [&](cudaStream_t s) {
          NCCL_CHECK(ncclAllReduce(l.scratch, l.scratch, kArrivalCount, ncclFloat, ncclSum, l.comm, s));
        },
        [&](cudaStream_t s) { op(l.comm, s); });
    l.spans.push_back(span_of(t.arrive.get(), t.from.get(), t.to.get()));
    if (complete) {
      backend(rank).record(*l.done, l.stream.get());
      backend(rank).wait(*l.done);
    }
  }

  int64_t start(int rank, P2pStart s) {
    on(rank);
    Lane& l = lanes_[rank];
    s.id = l.next_id++;
    if (l.batch.add(s)) issue(rank, l.batch.take(), false);
    return s.id;
  }

  // A group exits NCCL's group mode even when a call inside it throws.
  struct Group {
    Group() { NCCL_CHECK(ncclGroupStart()); }
    void end() { open = false, NCCL_CHECK(ncclGroupEnd()); }
    ~Group() { open ? (void)ncclGroupEnd() : (void)0; }
    bool open = true;
  };

  // A batch of starts, one group; the batch's first call that moves data carries its span, the
  // others none (their time is the same launch's).
  void issue(int rank, const std::vector<P2pStart>& batch, bool complete) {
    if (batch.empty()) return;
    on(rank);
    Lane& l = lanes_[rank];
    std::string call;
    for (const P2pStart& p : batch)
      call += fmt::format("{}{} rank {} ({} values)", call.empty() ? "" : ", ", p.send ? "send to" : "receive from",
                          p.peer, p.n);
    Timer& t = launch(
        rank, call, [](cudaStream_t) {},
        [&](cudaStream_t s) {
          Group g;
          for (const P2pStart& p : batch) {
            if (p.send) NCCL_CHECK(ncclSend(p.buf, count(p.n), type(p.t), p.peer, l.comm, s));
            else NCCL_CHECK(ncclRecv(p.buf, count(p.n), type(p.t), p.peer, l.comm, s));
          }
          g.end();
        });
    int span = -1;  // the batch's, on its first call that moves data
    for (const P2pStart& p : batch) {
      if (p.n > 0 && span < 0) {
        span = static_cast<int>(l.spans.size());
        l.spans.push_back(span_of(nullptr, t.from.get(), t.to.get()));
      } else if (p.n > 0) {
        l.spans.push_back(span_of(nullptr, t.to.get(), t.to.get()));
      }
      if (p.id < 0) continue;
      if (l.free_events.empty()) {
        l.events.push_back(backend(rank).create_event());
        l.free_events.push_back(static_cast<int>(l.events.size()) - 1);
      }
      const int e = l.free_events.back();
      l.free_events.pop_back();
      backend(rank).record(*l.events[e], l.stream.get());
      l.pending.emplace(p.id, e);
    }
    if (span >= 0 && !multi_process_) arrivals_.launched(rank, batch, t.from.get(), t.to.get(), span);
    if (complete) {
      backend(rank).record(*l.done, l.stream.get());
      backend(rank).wait(*l.done);
    }
  }

  // The host waits for the rank's NCCL stream, polling: a failure the watchdog found (or an
  // abort) ends the wait with its message instead of blocking forever.
  void drain(int rank) {
    const auto s = static_cast<cudaStream_t>(lanes_[rank].stream->native());
    CUDA_CHECK(cudaSetDevice(device(rank).index));
    for (cudaError_t e; (e = cudaStreamQuery(s)) != cudaSuccess;) {
      if (e != cudaErrorNotReady) CUDA_CHECK(e);
      if (aborted_) throw Error(failure());
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    if (aborted_) throw Error(failure());
  }

  // The first failure: its message is what every later call on the communicator throws.
  void fail(const std::string& msg) noexcept {
    abort_comms(msg);
    if (multi_process_) abort_job(msg, 1);  // the other processes' ranks wait for this one
  }
  void abort_comms(const std::string& msg) noexcept {
    {
      std::lock_guard<std::mutex> lock(failure_mu_);
      if (failure_.empty()) failure_ = msg;
    }
    bool expected = false;
    if (!aborted_.compare_exchange_strong(expected, true)) return;
    watchdog_.stop();  // it polls the communicators aborted here
    for (int r = 0; r < static_cast<int>(lanes_.size()); ++r) {
      if (!lanes_[r].comm) continue;
      // Not inside the rank's own calls, unless its thread is stuck there (then only abort frees it).
      const auto held = watchdog_.hold(r, std::chrono::milliseconds(1000));
      ncclCommAbort(lanes_[r].comm);
      lanes_[r].comm = nullptr;
    }
  }
  std::string failure() {
    std::lock_guard<std::mutex> lock(failure_mu_);
    return failure_;
  }

  static size_t count(int64_t n) { return static_cast<size_t>(n); }
  static DeviceSpan span_of(Event* arrive, Event* from, Event* to) {
    DeviceSpan d;
    d.arrive = arrive, d.from = from, d.to = to;
    return d;
  }

  void release() noexcept {
    watchdog_.stop();
    for (int r = 0; r < static_cast<int>(lanes_.size()); ++r) {
      Lane& l = lanes_[r];
      if (!is_local(r)) continue;
      cudaSetDevice(device(r).index);
      // ncclCommDestroy waits for queued work, which a hung peer never lets finish: wait at most
      // --comm-timeout, then abort instead.
      bool idle = true;
      const auto since = std::chrono::steady_clock::now();
      while (l.stream && !aborted_ && cudaStreamQuery(static_cast<cudaStream_t>(l.stream->native())) == cudaErrorNotReady) {
        const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
        if (comm_timeout() > 0 && waited > comm_timeout()) {
          idle = false;
          break;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
      if (l.comm && !aborted_) idle ? (void)ncclCommDestroy(l.comm) : (void)ncclCommAbort(l.comm);
      l.comm = nullptr;
      if (l.scratch) cudaFree(l.scratch);
      l.scratch = nullptr;
    }
  }

  const bool multi_process_;
  NcclWatchdog watchdog_;  // before lanes_: stopped by release() before the communicators go
  P2pArrivals arrivals_;
  std::vector<Lane> lanes_;  // per rank; only local ones are set up
  std::atomic<bool> aborted_{false};
  std::mutex failure_mu_;
  std::string failure_;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(const std::vector<Backend*>& ranks) {
  return std::make_unique<NcclComm>(ranks, nullptr, 0);
}

std::string nccl_unique_id() {
  ncclUniqueId id;
  NCCL_CHECK(ncclGetUniqueId(&id));
  return std::string(reinterpret_cast<const char*>(&id), sizeof id);
}

std::unique_ptr<Communicator> make_nccl_rank_communicator(const std::vector<Backend*>& ranks, int rank,
                                                          const std::string& id) {
  ncclUniqueId nid;
  PB_CHECK(id.size() == sizeof nid, "an NCCL unique id of {} bytes, expected {}", id.size(), sizeof nid);
  std::memcpy(&nid, id.data(), sizeof nid);
  return std::make_unique<NcclComm>(ranks, &nid, rank);
}

}  // namespace pb
