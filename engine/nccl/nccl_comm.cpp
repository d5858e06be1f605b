// NCCL communicator: one rank per distinct GPU in this process (ncclCommInitAll), each rank
// driven by its own worker thread. Compiled only when the build has NCCL.
#include <atomic>

#include <cuda_runtime.h>
#include <nccl.h>

#include "engine/check.h"
#include "engine/comm.h"

namespace pb {

namespace {

class NcclComm final : public Communicator {
 public:
  explicit NcclComm(std::vector<Backend*> ranks) : Communicator(std::move(ranks)) {
    const int n = size();
    std::vector<int> devs(n);
    for (int r = 0; r < n; ++r) devs[r] = device(r).index;
    comms_.assign(n, nullptr);
    streams_.assign(n, nullptr);
    scratch_.assign(n, nullptr);
    try {
      NCCL_CHECK(ncclCommInitAll(comms_.data(), n, devs.data()));
      for (int r = 0; r < n; ++r) {
        CUDA_CHECK(cudaSetDevice(devs[r]));
        // Its own non-blocking stream per rank: collectives overlap with the compute stream (ddp
        // buckets during backward) and never wait on unrelated legacy-stream work.
        CUDA_CHECK(cudaStreamCreateWithFlags(&streams_[r], cudaStreamNonBlocking));
        CUDA_CHECK(cudaMalloc(&scratch_[r], sizeof(float)));
      }
    } catch (...) {
      release();
      throw;
    }
  }

  ~NcclComm() override { release(); }

  std::string name() const override { return "nccl"; }

  // ncclCommAbort makes every rank's pending or future NCCL call fail, so blocked workers wake up.
  void abort() noexcept override {
    bool expected = false;
    if (!aborted_.compare_exchange_strong(expected, true)) return;
    for (ncclComm_t c : comms_)
      if (c) ncclCommAbort(c);
  }

 protected:
  // The base class synchronized this rank's backend first, so the buffer is ready; the result is
  // ready after wait(), which synchronizes the comm stream.
  void do_all_reduce(int rank, float* buf, int64_t n) override {
    on(rank);
    NCCL_CHECK(ncclAllReduce(buf, buf, count(n), ncclFloat, ncclSum, comms_[rank], streams_[rank]));
  }
  void do_wait(int rank) override {
    on(rank);
    CUDA_CHECK(cudaStreamSynchronize(streams_[rank]));
  }
  void do_broadcast(int rank, float* buf, int64_t n, int root) override {
    on(rank);
    NCCL_CHECK(ncclBroadcast(buf, buf, count(n), ncclFloat, root, comms_[rank], streams_[rank]));
    do_wait(rank);
  }
  void do_reduce(int rank, float* buf, int64_t n, int root) override {
    on(rank);
    NCCL_CHECK(ncclReduce(buf, buf, count(n), ncclFloat, ncclSum, root, comms_[rank], streams_[rank]));
    do_wait(rank);
  }
  void do_send(int rank, const float* buf, int64_t n, int peer) override {
    on(rank);
    NCCL_CHECK(ncclSend(buf, count(n), ncclFloat, peer, comms_[rank], streams_[rank]));
    do_wait(rank);
  }
  void do_recv(int rank, float* buf, int64_t n, int peer) override {
    on(rank);
    NCCL_CHECK(ncclRecv(buf, count(n), ncclFloat, peer, comms_[rank], streams_[rank]));
    do_wait(rank);
  }
  void do_barrier(int rank) override {
    on(rank);
    NCCL_CHECK(ncclAllReduce(scratch_[rank], scratch_[rank], 1, ncclFloat, ncclSum, comms_[rank], streams_[rank]));
    do_wait(rank);
  }

 private:
  // Worker threads call for their own rank; the CUDA current device is per thread, so set it.
  void on(int rank) {
    if (aborted_) throw Error("communicator aborted: another worker failed");
    CUDA_CHECK(cudaSetDevice(device(rank).index));
  }
  static size_t count(int64_t n) { return static_cast<size_t>(n); }
  void release() noexcept {
    for (int r = 0; r < size(); ++r) {
      cudaSetDevice(device(r).index);
      if (comms_[r] && !aborted_) ncclCommDestroy(comms_[r]);
      if (streams_[r]) cudaStreamDestroy(streams_[r]);
      if (scratch_[r]) cudaFree(scratch_[r]);
    }
  }

  std::vector<ncclComm_t> comms_;
  std::vector<cudaStream_t> streams_;
  std::vector<float*> scratch_;
  std::atomic<bool> aborted_{false};
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(const std::vector<Backend*>& ranks) {
  return std::make_unique<NcclComm>(ranks);
}

}  // namespace pb
