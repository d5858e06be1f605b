// NCCL communicator, one class for both bootstraps: every rank in this process, one per distinct
// GPU (ncclCommInitAll), or this process's single rank joining the others through a unique id
// that rank 0 made and the job broadcast (ncclCommInitRank; engine/mpi/nccl_mpi_comm.cpp). Each
// local rank is driven by its own worker thread and has its own stream from its backend:
// collectives wait for the compute queued before them and the compute queued after waits for
// them, through events, so the host never blocks and ddp's buckets overlap backward.
#include <atomic>
#include <cstring>
#include <map>

#include <cuda_runtime.h>
#include <nccl.h>

#include "engine/check.h"
#include "engine/comm.h"

namespace pb {

namespace {

class NcclComm final : public Communicator {
 public:
  // id null: every rank is local (ncclCommInitAll). Else `me` is the one local rank.
  NcclComm(std::vector<Backend*> ranks, const ncclUniqueId* id, int me) : Communicator(std::move(ranks)) {
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
      // Non-blocking transfers get two communicators of their own, split off collectively: one
      // for messages to higher ranks, one for those to lower ranks, each on its own stream.
      // NCCL runs a communicator's calls in issue order; with both directions on one, a stage
      // that sends its next activation before it receives a gradient (1F1B) could wait on a
      // peer that waits on it. Per direction the order is a chain and cannot close a cycle.
      for (int dir = 0; dir < 2; ++dir) {  // one split per group: each rank's calls in the same order
        NCCL_CHECK(ncclGroupStart());
        for (int r = 0; r < size(); ++r)
          if (is_local(r)) NCCL_CHECK(ncclCommSplit(lanes_[r].comm, 0, r, &lanes_[r].p2p[dir].comm, nullptr));
        NCCL_CHECK(ncclGroupEnd());
      }
      for (int r = 0; r < size(); ++r) {
        if (!is_local(r)) continue;
        Backend& be = backend(r);
        Lane& l = lanes_[r];
        l.stream = be.create_stream();
        l.ready = be.create_event();
        l.done = be.create_event();
        for (Direction& d : l.p2p) d.stream = be.create_stream();
      }
    } catch (...) {
      release();
      throw;
    }
  }

  ~NcclComm() override { release(); }

  std::string name() const override { return "nccl"; }

  // ncclCommAbort makes every local rank's pending or future NCCL call fail, so blocked workers
  // wake up; other processes are ended by main's MPI_Abort.
  void abort() noexcept override {
    bool expected = false;
    if (!aborted_.compare_exchange_strong(expected, true)) return;
    for (Lane& l : lanes_) {
      for (auto& d : l.p2p)
        if (d.comm) ncclCommAbort(d.comm);
      if (l.comm) ncclCommAbort(l.comm);
    }
  }

 protected:
  bool orders_with_events() const override { return true; }

  void do_all_reduce(int rank, float* buf, int64_t n) override {
    collective(rank, false, [&](ncclComm_t c, cudaStream_t s) {
      NCCL_CHECK(ncclAllReduce(buf, buf, count(n), ncclFloat, ncclSum, c, s));
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
    collective(rank, true, [&](ncclComm_t c, cudaStream_t s) {
      NCCL_CHECK(ncclBroadcast(buf, buf, count(n), ncclFloat, root, c, s));
    });
  }
  void do_reduce(int rank, float* buf, int64_t n, int root) override {
    collective(rank, true, [&](ncclComm_t c, cudaStream_t s) {
      NCCL_CHECK(ncclReduce(buf, buf, count(n), ncclFloat, ncclSum, root, c, s));
    });
  }
  void do_send(int rank, const float* buf, int64_t n, int peer) override {
    collective(rank, true, [&](ncclComm_t c, cudaStream_t s) {
      NCCL_CHECK(ncclSend(buf, count(n), ncclFloat, peer, c, s));
    });
  }
  void do_recv(int rank, float* buf, int64_t n, int peer) override {
    collective(rank, true, [&](ncclComm_t c, cudaStream_t s) {
      NCCL_CHECK(ncclRecv(buf, count(n), ncclFloat, peer, c, s));
    });
  }

  // On the direction's stream after the compute queued so far; wait_transfer makes the compute
  // queued afterwards wait for it.
  int64_t do_send_start(int rank, const float* buf, int64_t n, int peer) override {
    return transfer(rank, peer, [&](ncclComm_t c, cudaStream_t s) {
      NCCL_CHECK(ncclSend(buf, count(n), ncclFloat, peer, c, s));
    });
  }
  int64_t do_recv_start(int rank, float* buf, int64_t n, int peer) override {
    return transfer(rank, peer, [&](ncclComm_t c, cudaStream_t s) {
      NCCL_CHECK(ncclRecv(buf, count(n), ncclFloat, peer, c, s));
    });
  }
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
  void do_all_gather(int rank, const float* send, float* recv, int64_t n) override {
    collective(rank, true, [&](ncclComm_t c, cudaStream_t s) {
      NCCL_CHECK(ncclAllGather(send, recv, count(n), ncclFloat, c, s));
    });
  }
  void do_reduce_scatter(int rank, const float* send, float* recv, int64_t n) override {
    collective(rank, true, [&](ncclComm_t c, cudaStream_t s) {
      NCCL_CHECK(ncclReduceScatter(send, recv, count(n), ncclFloat, ncclSum, c, s));
    });
  }

  double device_transfer_s(int rank) override {
    Lane& l = lanes_[rank];
    if (l.timed == 0) return 0;
    double s = 0;
    for (int k = 0; k < l.timed; ++k) {
      backend(rank).synchronize(*l.timers[k].second);  // transfers run on up to three streams
      s += backend(rank).elapsed_s(*l.timers[k].first, *l.timers[k].second);
    }
    return s;
  }
  void reset_device_timers(int rank) override { lanes_[rank].timed = 0; }
  std::vector<std::pair<Event*, Event*>> device_transfer_events(int rank) override {
    std::vector<std::pair<Event*, Event*>> out;
    Lane& l = lanes_[rank];
    for (int k = 0; k < l.timed; ++k) out.emplace_back(l.timers[k].first.get(), l.timers[k].second.get());
    return out;
  }

 private:
  struct Direction {
    ncclComm_t comm = nullptr;
    std::unique_ptr<Stream> stream;
  };
  struct Lane {
    ncclComm_t comm = nullptr;
    std::unique_ptr<Stream> stream;
    std::unique_ptr<Event> ready, done;
    std::vector<std::pair<std::unique_ptr<Event>, std::unique_ptr<Event>>> timers;  // start, end per call
    int timed = 0;  // timers used since the last reset
    Direction p2p[2];  // non-blocking transfers: [0] to higher ranks, [1] to lower ranks
    std::vector<std::unique_ptr<Event>> events;  // one per transfer in flight, reused
    std::vector<int> free_events;
    std::map<int64_t, int> pending;  // transfer id -> its event
    int64_t next_id = 0;
  };

  // Worker threads call for their own rank; the CUDA current device is per thread, so set it.
  void on(int rank) {
    if (aborted_) throw Error("communicator aborted: another worker failed");
    CUDA_CHECK(cudaSetDevice(device(rank).index));
  }

  // op on the rank's stream after the compute queued so far, timed there; complete: the compute
  // queued later waits for it too.
  template <class Op>
  void collective(int rank, bool complete, Op&& op) {
    on(rank);
    Lane& l = lanes_[rank];
    Backend& be = backend(rank);
    be.record(*l.ready);
    be.wait(*l.ready, l.stream.get());
    if (l.timed == static_cast<int>(l.timers.size())) l.timers.emplace_back(be.create_event(), be.create_event());
    auto& [start, end] = l.timers[l.timed++];
    be.record(*start, l.stream.get());
    op(l.comm, static_cast<cudaStream_t>(l.stream->native()));
    be.record(*end, l.stream.get());
    if (complete) {
      be.record(*l.done, l.stream.get());
      be.wait(*l.done);
    }
  }

  template <class Op>
  int64_t transfer(int rank, int peer, Op&& op) {
    on(rank);
    Lane& l = lanes_[rank];
    Backend& be = backend(rank);
    Direction& d = l.p2p[peer > rank ? 0 : 1];
    be.record(*l.ready);
    be.wait(*l.ready, d.stream.get());
    if (l.timed == static_cast<int>(l.timers.size())) l.timers.emplace_back(be.create_event(), be.create_event());
    auto& [start, end] = l.timers[l.timed++];
    be.record(*start, d.stream.get());
    op(d.comm, static_cast<cudaStream_t>(d.stream->native()));
    be.record(*end, d.stream.get());
    if (l.free_events.empty()) {
      l.events.push_back(be.create_event());
      l.free_events.push_back(static_cast<int>(l.events.size()) - 1);
    }
    const int e = l.free_events.back();
    l.free_events.pop_back();
    be.record(*l.events[e], d.stream.get());
    l.pending.emplace(l.next_id, e);
    return l.next_id++;
  }

  static size_t count(int64_t n) { return static_cast<size_t>(n); }

  void release() noexcept {
    for (int r = 0; r < static_cast<int>(lanes_.size()); ++r) {
      Lane& l = lanes_[r];
      if (!is_local(r)) continue;
      cudaSetDevice(device(r).index);
      if (l.stream) cudaStreamSynchronize(static_cast<cudaStream_t>(l.stream->native()));
      for (auto& d : l.p2p) {
        if (d.stream) cudaStreamSynchronize(static_cast<cudaStream_t>(d.stream->native()));
        if (d.comm && !aborted_) ncclCommDestroy(d.comm);
        d.comm = nullptr;
      }
      if (l.comm && !aborted_) ncclCommDestroy(l.comm);
      l.comm = nullptr;
    }
  }

  std::vector<Lane> lanes_;  // per rank; only local ones are set up
  std::atomic<bool> aborted_{false};
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
