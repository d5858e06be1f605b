// NCCL communicator, one class for both bootstraps: every rank in this process, one per distinct
// GPU (ncclCommInitAll), or this process's single rank joining the others through a unique id
// that rank 0 made and the job broadcast (ncclCommInitRank; engine/mpi/nccl_mpi_comm.cpp). Each
// local rank is driven by its own worker thread and has its own stream from its backend:
// collectives wait for the compute queued before them and the compute queued after waits for
// them, through events, so the host never blocks and ddp's buckets overlap backward.
#include <atomic>
#include <cstring>

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
      for (int r = 0; r < size(); ++r) {
        if (!is_local(r)) continue;
        Backend& be = backend(r);
        Lane& l = lanes_[r];
        l.stream = be.create_stream();
        l.ready = be.create_event();
        l.done = be.create_event();
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
    for (Lane& l : lanes_)
      if (l.comm) ncclCommAbort(l.comm);
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
    backend(rank).synchronize(*l.timers[l.timed - 1].second);  // the stream runs its calls in order
    double s = 0;
    for (int k = 0; k < l.timed; ++k) s += backend(rank).elapsed_s(*l.timers[k].first, *l.timers[k].second);
    return s;
  }
  void reset_device_timers(int rank) override { lanes_[rank].timed = 0; }

 private:
  struct Lane {
    ncclComm_t comm = nullptr;
    std::unique_ptr<Stream> stream;
    std::unique_ptr<Event> ready, done;
    std::vector<std::pair<std::unique_ptr<Event>, std::unique_ptr<Event>>> timers;  // start, end per call
    int timed = 0;  // timers used since the last reset
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

  static size_t count(int64_t n) { return static_cast<size_t>(n); }

  void release() noexcept {
    for (int r = 0; r < static_cast<int>(lanes_.size()); ++r) {
      Lane& l = lanes_[r];
      if (!is_local(r)) continue;
      cudaSetDevice(device(r).index);
      if (l.stream) cudaStreamSynchronize(static_cast<cudaStream_t>(l.stream->native()));
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
