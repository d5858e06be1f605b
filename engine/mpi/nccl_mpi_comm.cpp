// NCCL across processes: one GPU rank per process, the communicator's unique id made by rank 0
// (ncclGetUniqueId) and broadcast over MPI, then ncclCommInitRank -- the nccl-tests bootstrap.
// Compiled only when the build has both MPI and NCCL.
#if defined(PARBENCH_HAVE_MPI) && defined(PARBENCH_HAVE_NCCL)
#include <atomic>

#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include "engine/check.h"
#include "engine/comm.h"
#include "engine/process.h"

namespace pb {

namespace {

class NcclMpiComm final : public Communicator {
 public:
  explicit NcclMpiComm(const std::vector<Backend*>& ranks) : Communicator(ranks), me_(process().rank) {
    PB_CHECK(size() == process().size && is_local(me_), "process {} must own rank {} of {}", me_, me_, size());
    ncclUniqueId id;
    if (me_ == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    MPI_CHECK(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD));
    CUDA_CHECK(cudaSetDevice(device(me_).index));
    try {
      NCCL_CHECK(ncclCommInitRank(&comm_, size(), id, me_));
      // Its own non-blocking stream: collectives overlap with the compute stream (ddp buckets
      // during backward) and never wait on unrelated legacy-stream work.
      CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
      CUDA_CHECK(cudaMalloc(&scratch_, sizeof(float)));
    } catch (...) {
      release();
      throw;
    }
  }
  ~NcclMpiComm() override { release(); }

  std::string name() const override { return "nccl"; }

  // Wakes this process's blocked NCCL calls; the other processes are ended by main's MPI_Abort.
  void abort() noexcept override {
    bool expected = false;
    if (aborted_.compare_exchange_strong(expected, true) && comm_) ncclCommAbort(comm_);
  }

 protected:
  // The base class synchronized the rank's backend first; results are ready after wait().
  void do_all_reduce(int rank, float* buf, int64_t n) override {
    on(rank);
    NCCL_CHECK(ncclAllReduce(buf, buf, count(n), ncclFloat, ncclSum, comm_, stream_));
  }
  void do_wait(int rank) override {
    on(rank);
    CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void do_broadcast(int rank, float* buf, int64_t n, int root) override {
    on(rank);
    NCCL_CHECK(ncclBroadcast(buf, buf, count(n), ncclFloat, root, comm_, stream_));
    do_wait(rank);
  }
  void do_reduce(int rank, float* buf, int64_t n, int root) override {
    on(rank);
    NCCL_CHECK(ncclReduce(buf, buf, count(n), ncclFloat, ncclSum, root, comm_, stream_));
    do_wait(rank);
  }
  void do_send(int rank, const float* buf, int64_t n, int peer) override {
    on(rank);
    NCCL_CHECK(ncclSend(buf, count(n), ncclFloat, peer, comm_, stream_));
    do_wait(rank);
  }
  void do_recv(int rank, float* buf, int64_t n, int peer) override {
    on(rank);
    NCCL_CHECK(ncclRecv(buf, count(n), ncclFloat, peer, comm_, stream_));
    do_wait(rank);
  }
  void do_barrier(int rank) override {
    on(rank);
    NCCL_CHECK(ncclAllReduce(scratch_, scratch_, 1, ncclFloat, ncclSum, comm_, stream_));
    do_wait(rank);
  }

 private:
  // The worker thread calls; the CUDA current device is per thread, so set it.
  void on(int rank) {
    if (aborted_) throw Error("communicator aborted: this rank failed");
    PB_CHECK(rank == me_, "rank {} called into the communicator of process {}", rank, me_);
    CUDA_CHECK(cudaSetDevice(device(me_).index));
  }
  static size_t count(int64_t n) { return static_cast<size_t>(n); }
  void release() noexcept {
    cudaSetDevice(device(me_).index);
    if (comm_ && !aborted_) ncclCommDestroy(comm_);
    if (stream_) cudaStreamDestroy(stream_);
    if (scratch_) cudaFree(scratch_);
    comm_ = nullptr, stream_ = nullptr, scratch_ = nullptr;
  }

  int me_ = 0;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  float* scratch_ = nullptr;
  std::atomic<bool> aborted_{false};
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_mpi_communicator(const std::vector<Backend*>& ranks) {
  return std::make_unique<NcclMpiComm>(ranks);
}

}  // namespace pb
#endif
