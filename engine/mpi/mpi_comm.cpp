// MPI communicator: one rank per process, this process's rank the only local one. Collectives
// are MPI's on a duplicate of MPI_COMM_WORLD (so they never match the harness's own world
// collectives). Buffers on a GPU are staged through host memory; GPU ranks normally get NCCL
// bootstrapped through MPI instead (nccl_mpi_comm.cpp), which make_mpi_communicator prefers.
// Each call's wait for its peers is booked as idle apart from its data movement (docs/mpi.md).
#include <algorithm>
#include <chrono>
#include <climits>
#include <map>

#include <mpi.h>

#include "engine/check.h"
#include "engine/comm.h"
#include "engine/gpu_placement.h"
#include "engine/mpi/mpi_progress.h"
#include "engine/process.h"

namespace pb {

namespace {

int local_rank_of(const std::vector<Backend*>& ranks) {
  const ProcessInfo& p = process();
  PB_CHECK(static_cast<int>(ranks.size()) == p.size, "a communicator of {} ranks in an MPI job of {} processes",
           ranks.size(), p.size);
  for (int r = 0; r < static_cast<int>(ranks.size()); ++r)
    PB_CHECK((ranks[r] != nullptr) == (r == p.rank), "process {} must own exactly rank {} of the communicator",
             p.rank, p.rank);
  return p.rank;
}

// This process's rank in `comm` (a part of the job), checked against the communicator's ranks.
int member_rank_of(const std::vector<Backend*>& ranks, MPI_Comm comm) {
  int me = 0, size = 0;
  MPI_CHECK(MPI_Comm_rank(comm, &me));
  MPI_CHECK(MPI_Comm_size(comm, &size));
  PB_CHECK(static_cast<int>(ranks.size()) == size, "a communicator of {} ranks over {} processes", ranks.size(), size);
  for (int r = 0; r < size; ++r)
    PB_CHECK((ranks[r] != nullptr) == (r == me), "process {} must own exactly rank {} of the communicator",
             process().rank, me);
  return me;
}

// MPI has no bf16 type: bf16 values travel as MPI_UINT16_T and are summed by this user op, which
// adds in fp32 and rounds each partial sum to bf16 (as NCCL's bf16 sum), in MPI's own order.
void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  const Bf16* a = static_cast<const Bf16*>(in);
  Bf16* b = static_cast<Bf16*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = to_bf16(from_bf16(a[i]) + from_bf16(b[i]));
}

// A dtype's MPI type and sum.
struct MpiType {
  MPI_Datatype type;
  MPI_Op sum;
};
MpiType mpi_type(DType t) {
  if (t == DType::F32) return {MPI_FLOAT, MPI_SUM};
  static const MPI_Op op = [] {
    MPI_Op o = MPI_OP_NULL;
    MPI_CHECK(MPI_Op_create(&bf16_sum, /*commute=*/1, &o));
    return o;
  }();
  return {MPI_UINT16_T, op};
}

class MpiComm final : public Communicator {
 public:
  // Over the processes of `base` (a duplicate of it is used), this process being rank `me`.
  MpiComm(const std::vector<Backend*>& ranks, MPI_Comm base, int me) : Communicator(ranks), me_(me) {
    MPI_CHECK(MPI_Comm_dup(base, &comm_));
    MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  }
  ~MpiComm() override {
    mpi_progress_end(static_cast<int>(pending_.size() + transfers_.size()));  // left by an abort
    if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }
  std::string name() const override { return "mpi"; }

  // A failed rank ends the job (main calls MPI_Abort), which wakes every blocked peer; here only
  // later calls of this process are refused.
  void abort() noexcept override { aborted_ = true; }

 protected:
  // MPI_Iallreduce in place, completed by wait(): ddp's buckets are started during backward.
  // A GPU buffer is reduced in host memory, synchronously (the staging copy needs the result).
  void do_all_reduce(int rank, void* buf, int64_t n, DType t) override {
    check(rank);
    const MpiType m = mpi_type(t);
    if (on_host()) {
      pending_.emplace_back();
      MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf, count(n), m.type, m.sum, comm_, &pending_.back()));
      mpi_progress_begin();
      return;
    }
    void* h = stage_in(buf, n, t);
    {
      arrive(rank);
      CommWatch watch("MPI_Allreduce");
      MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, h, count(n), m.type, m.sum, comm_));
    }
    stage_out(buf, n, t);
  }
  void do_wait(int rank) override {
    check(rank);
    if (pending_.empty()) return;
    arrive(rank);  // the started operations complete once every rank is here
    {
      CommWatch watch("MPI_Waitall (all-reduce)");
      MPI_CHECK(MPI_Waitall(static_cast<int>(pending_.size()), pending_.data(), MPI_STATUSES_IGNORE));
    }
    mpi_progress_end(static_cast<int>(pending_.size()));
    pending_.clear();
  }
  void do_broadcast(int rank, float* buf, int64_t n, int root) override {
    check(rank);
    float* h = rank == root ? stage_in(buf, n) : host(buf, n);
    {
      arrive(rank);
      CommWatch watch("MPI_Bcast");
      MPI_CHECK(MPI_Bcast(h, count(n), MPI_FLOAT, root, comm_));
    }
    if (rank != root) stage_out(buf, n);
  }
  void do_reduce(int rank, void* buf, int64_t n, int root, DType t) override {
    check(rank);
    const MpiType m = mpi_type(t);
    void* h = stage_in(buf, n, t);
    {
      arrive(rank);
      CommWatch watch("MPI_Reduce");
      MPI_CHECK(MPI_Reduce(rank == root ? MPI_IN_PLACE : h, rank == root ? h : nullptr, count(n), m.type, m.sum, root,
                           comm_));
    }
    if (rank == root) stage_out(buf, n, t);
  }
  void do_send(int rank, const void* buf, int64_t n, int peer, DType t) override {
    check(rank);
    const void* h = stage_in(const_cast<void*>(buf), n, t);
    // The whole send is idle, as in-process: the copy is the receiver's (its MPI_Mrecv).
    const auto from = Clock::now();
    {
      CommWatch watch("MPI_Send");
      MPI_CHECK(MPI_Send(h, count(n), mpi_type(t).type, peer, 0, comm_));
    }
    waited(rank, from, Clock::now());
  }
  void do_recv(int rank, void* buf, int64_t n, int peer, DType t) override {
    check(rank);
    // Idle until the message's envelope is here (MPI_Mprobe), the transfer the matched receive.
    MPI_Message msg = MPI_MESSAGE_NULL;
    {
      const auto from = Clock::now();
      CommWatch watch("MPI_Mprobe");
      MPI_CHECK(MPI_Mprobe(peer, 0, comm_, &msg, MPI_STATUS_IGNORE));
      waited(rank, from, Clock::now());
    }
    {
      CommWatch watch("MPI_Mrecv");
      MPI_CHECK(MPI_Mrecv(host(buf, n, t), count(n), mpi_type(t).type, &msg, MPI_STATUS_IGNORE));
    }
    stage_out(buf, n, t);
  }

  // MPI_Isend / MPI_Irecv under their own tag (never matching the blocking calls'); a GPU buffer
  // goes through a host copy of its own per transfer in flight.
  int64_t do_send_start(int rank, const void* buf, int64_t n, int peer, DType t) override {
    check(rank);
    Transfer& x = transfers_[next_id_];
    x.send = true;
    const void* h = buf;
    const std::size_t bytes = static_cast<std::size_t>(n) * dtype_size(t);
    if (!on_host()) {
      x.host.resize(bytes);
      copy_bytes(cpu(), x.host.data(), device(me_), buf, bytes);
      h = x.host.data();
    }
    MPI_CHECK(MPI_Isend(h, count(n), mpi_type(t).type, peer, kTransferTag, comm_, &x.request));
    mpi_progress_begin();
    return next_id_++;
  }
  int64_t do_recv_start(int rank, void* buf, int64_t n, int peer, DType t) override {
    check(rank);
    Transfer& x = transfers_[next_id_];
    void* h = buf;
    if (!on_host()) {
      x.host.resize(static_cast<std::size_t>(n) * dtype_size(t));
      x.device_dst = buf;
      h = x.host.data();
    }
    MPI_CHECK(MPI_Irecv(h, count(n), mpi_type(t).type, peer, kTransferTag, comm_, &x.request));
    mpi_progress_begin();
    return next_id_++;
  }
  void do_wait_transfer(int rank, int64_t id) override {
    check(rank);
    auto it = transfers_.find(id);
    PB_CHECK(it != transfers_.end(), "rank {} waits for transfer {}, which it has not started or already waited for",
             rank, id);
    Transfer t = std::move(it->second);
    transfers_.erase(it);
    mpi_progress_end();
    // A send's wait is idle throughout (the copy is the receiver's). A receive is polled: the
    // polls that found it incomplete are idle, the one that completed it (the copy of an eager
    // message, or a rendezvous message's last fragment) the transfer.
    {
      CommWatch watch("MPI_Test (send/recv)");
      auto from = Clock::now();
      for (int done = 0;;) {
        const auto poll = Clock::now();
        MPI_CHECK(MPI_Test(&t.request, &done, MPI_STATUS_IGNORE));
        if (done) {
          if (t.send) waited(rank, from, Clock::now());
          else if (poll > from) waited(rank, from, poll);
          break;
        }
      }
    }
    if (t.device_dst)
      copy_bytes(device(me_), t.device_dst, cpu(), t.host.data(), t.host.size());
  }
  // Host buffers directly (MPI_IN_PLACE when the piece already sits in its slot); a GPU's
  // through host copies.
  void do_all_gather(int rank, const void* send, void* recv, int64_t n, DType t) override {
    check(rank);
    const MPI_Datatype ty = mpi_type(t).type;
    const std::size_t bytes = static_cast<std::size_t>(n) * dtype_size(t);
    if (on_host()) {
      arrive(rank);
      CommWatch watch("MPI_Allgather");
      const void* in = send == static_cast<char*>(recv) + rank * bytes ? MPI_IN_PLACE : send;
      MPI_CHECK(MPI_Allgather(in, count(n), ty, recv, count(n), ty, comm_));
      return;
    }
    std::vector<char> mine(bytes);
    copy_bytes(cpu(), mine.data(), device(me_), send, bytes);
    void* all = host(recv, n * size(), t);
    arrive(rank);
    {
      CommWatch watch("MPI_Allgather");
      MPI_CHECK(MPI_Allgather(mine.data(), count(n), ty, all, count(n), ty, comm_));
    }
    stage_out(recv, n * size(), t);
  }
  // MPI_Iallgather on host buffers, completed by wait() with the started all-reduces; a GPU's
  // through the staged, blocking gather above.
  void do_all_gather_start(int rank, const void* send, void* recv, int64_t n, DType t) override {
    if (!on_host()) return do_all_gather(rank, send, recv, n, t);
    check(rank);
    const MPI_Datatype ty = mpi_type(t).type;
    const void* in = send == static_cast<char*>(recv) + rank * n * dtype_size(t) ? MPI_IN_PLACE : send;
    pending_.emplace_back();
    MPI_CHECK(MPI_Iallgather(in, count(n), ty, recv, count(n), ty, comm_, &pending_.back()));
    mpi_progress_begin();
  }
  void do_reduce_scatter(int rank, const void* send, void* recv, int64_t n, DType t) override {
    check(rank);
    const MpiType m = mpi_type(t);
    const void* h = stage_in(const_cast<void*>(send), n * size(), t);
    std::vector<char> piece(on_host() ? 0 : static_cast<std::size_t>(n) * dtype_size(t));
    {
      arrive(rank);
      CommWatch watch("MPI_Reduce_scatter_block");
      MPI_CHECK(MPI_Reduce_scatter_block(h, on_host() ? recv : piece.data(), count(n), m.type, m.sum, comm_));
    }
    if (!on_host()) copy_bytes(device(me_), recv, cpu(), piece.data(), piece.size());
  }

 private:
  static constexpr int kTransferTag = 1;
  struct Transfer {
    MPI_Request request = MPI_REQUEST_NULL;
    std::vector<char> host;      // GPU buffers: the staging copy (bytes)
    void* device_dst = nullptr;  // GPU recv: where the staging copy goes after the wait
    bool send = false;
  };
  using Clock = std::chrono::steady_clock;

  // Idle until every member has reached this point (a barrier), so the collective after it is
  // timed as data movement alone.
  void arrive(int rank) {
    const auto from = Clock::now();
    {
      CommWatch watch("MPI_Barrier (arrival)");
      MPI_CHECK(MPI_Barrier(comm_));
    }
    waited(rank, from, Clock::now());
  }

  void check(int rank) const {
    if (aborted_) throw Error("communicator aborted: this rank failed");
    PB_CHECK(rank == me_, "rank {} called into the communicator of process {}", rank, me_);
  }
  bool on_host() const { return device(me_).kind == DeviceKind::Cpu; }
  static int count(int64_t n) {
    PB_CHECK(n <= INT_MAX, "an MPI message of {} values", n);
    return static_cast<int>(n);
  }
  // The buffer MPI works on: the device buffer itself on CPU, else a host copy.
  template <class T>
  T* host(T* buf, int64_t n, DType t = DType::F32) {
    if (on_host()) return buf;
    staging_.resize((static_cast<std::size_t>(n) * dtype_size(t) + sizeof(float) - 1) / sizeof(float));
    return reinterpret_cast<T*>(staging_.data());
  }
  template <class T>
  T* stage_in(T* buf, int64_t n, DType t = DType::F32) {
    T* h = host(buf, n, t);
    if (h != buf) copy_bytes(cpu(), h, device(me_), buf, static_cast<std::size_t>(n) * dtype_size(t));
    return h;
  }
  void stage_out(void* buf, int64_t n, DType t = DType::F32) {
    if (!on_host()) copy_bytes(device(me_), buf, cpu(), staging_.data(), static_cast<std::size_t>(n) * dtype_size(t));
  }

  int me_ = 0;
  MPI_Comm comm_ = MPI_COMM_NULL;
  std::vector<MPI_Request> pending_;
  std::vector<float> staging_;
  std::map<int64_t, Transfer> transfers_;  // started, not yet waited for
  int64_t next_id_ = 0;
  bool aborted_ = false;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_host_communicator(const std::vector<Backend*>& ranks) {
  return std::make_unique<MpiComm>(ranks, MPI_COMM_WORLD, local_rank_of(ranks));
}

namespace {

// Whether every process of the job can use NCCL: one distinct GPU per rank. Every process must
// pick the same kind: they agree on whether any rank is on a CPU (collective), and GPU ranks then
// read the one placement all computed alike from the gathered PCI bus ids (engine/gpu_placement.h),
// so ranks bound to distinct GPUs that each see as device 0 still use NCCL.
bool job_uses_nccl(const Backend& mine, CommKind kind) {
  double cpu_ranks = mine.device().kind == DeviceKind::Cuda ? 0 : 1;
  world_sum(&cpu_ranks, 1);
  const bool nccl = cpu_ranks == 0 && job_gpus().placement.nccl;
  if (kind == CommKind::Nccl && !nccl) throw Error("the NCCL communicator needs one distinct GPU per rank");
  if (kind == CommKind::InProcess) throw Error("an in-process communicator cannot span processes");
  return nccl;
}

// Frees a split communicator when its scope ends.
struct SplitComm {
  MPI_Comm comm = MPI_COMM_NULL;
  ~SplitComm() {
    if (comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
  }
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(const std::vector<Backend*>& ranks, CommKind kind) {
  const int me = local_rank_of(ranks);
  const bool nccl = job_uses_nccl(*ranks[me], kind);
#ifdef PARBENCH_HAVE_NCCL
  if (nccl) return make_nccl_mpi_communicator(ranks);
#else
  (void)nccl;
#endif
  return make_mpi_host_communicator(ranks);
}

std::unique_ptr<Communicator> make_mpi_split_communicator(const std::vector<Backend*>& ranks, int color) {
  PB_CHECK(color >= 0, "a communicator's color must not be negative, got {}", color);
  const Backend* mine = nullptr;
  for (const Backend* b : ranks)
    if (b) mine = b;
  PB_CHECK(mine != nullptr, "process {} has no rank in the communicator of color {}", process().rank, color);
#ifdef PARBENCH_HAVE_NCCL
  if (job_uses_nccl(*mine, CommKind::Auto)) return make_nccl_mpi_communicator(ranks, color);
#else
  job_uses_nccl(*mine, CommKind::Auto);  // collective: every process takes part
#endif
  SplitComm part;
  MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, color, process().rank, &part.comm));
  return std::make_unique<MpiComm>(ranks, part.comm, member_rank_of(ranks, part.comm));
}

void mpi_split_without_part(const Backend& mine) {
  job_uses_nccl(mine, CommKind::Auto);  // as the members' calls
  SplitComm none;
  MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, MPI_UNDEFINED, process().rank, &none.comm));
}

}  // namespace pb
