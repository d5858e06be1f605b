// Communicators: the collectives strategies use between their workers (ranks). Every rank calls
// from its own thread with buffers on its own device; each call records its bytes and time.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/backend.h"
#include "engine/tensor.h"
#include "engine/trace.h"

namespace pb {

// The kinds of collective, for per-kind bytes and times (algorithm and bus bandwidth).
enum class CollKind : uint8_t { AllReduce, Broadcast, Reduce, SendRecv, AllGather, ReduceScatter, Other };
inline constexpr int kCollKinds = 7;
const char* coll_kind_name(CollKind k);
// nccl-tests' bus bandwidth factor for n ranks: all-reduce 2(n-1)/n; all-gather and
// reduce-scatter (n-1)/n; broadcast, reduce, send/recv 1.
double bus_factor(CollKind k, int n);

// One kind's share of CommStats: the payload (the nccl-tests "size" of each call, summed) and
// the transfer seconds of those calls.
struct CollStats {
  std::size_t bytes = 0;
  double seconds = 0;
  int64_t calls = 0;
};

// Per rank, since the last reset. bytes: the payload of each collective this rank took part in
// (all-reduce, reduce, broadcast: the buffer size; all-gather, reduce-scatter: the whole gathered
// buffer, N pieces; send: the message; recv: 0, the sender counts it; all 0 with a single rank) -- the nccl-tests "size", from which reports derive bus
// bandwidth. seconds: the transfers alone -- host copies on CPU, the collectives' own span on
// the device when the communicator orders itself with events (NCCL: from the moment every member
// has arrived, docs/reports.md). wait_s: time this rank sat idle in the calls instead: waiting for
// a peer to arrive, or for its own queued device work.
struct CommStats {
  double seconds = 0;
  double wait_s = 0;
  std::size_t bytes = 0;
  int64_t calls = 0;
  // Per CollKind: send counts the message at the sender (bytes) and its transfer time where it
  // happens (recv, on a host-side communicator), both under SendRecv.
  CollStats kinds[kCollKinds];
};

struct CommCall;

// The staging slots of bf16 transfers in flight: take() gives the first free slot, grown to n values
// if smaller; give() frees it. Deterministic, so a step that repeats the calls of the one before
// takes the same slots and grows none; the memory estimate replays a plan through it.
class WireSlots {
 public:
  int take(int64_t n);
  void give(int k) { busy_.at(k) = 0; }
  void reserve(const std::vector<int64_t>& sizes);  // slot k at least sizes[k]; none taken
  const std::vector<int64_t>& sizes() const { return sizes_; }  // values, per slot
  int64_t total() const;

 private:
  std::vector<int64_t> sizes_;
  std::vector<char> busy_;
};

// An event-ordered call's span (Communicator::device_spans): [arrive, from) the rank's wait for
// its peers (idle; arrive null: not measured), [from, to) the transfer.
struct CommDeviceSpan {
  Event* arrive = nullptr;
  Event* from = nullptr;
  Event* to = nullptr;
  // The span placed on the host clock instead (the events unused): [host_arrive, host_from)
  // idle, [host_from, host_to) transfer -- where the wait is known only from the peers' times.
  bool on_host = false;
  std::chrono::steady_clock::time_point host_arrive, host_from, host_to;
};

class Communicator {
 public:
  // ranks[r] is rank r's backend: its device, and the queue a collective must wait for. In a
  // multi-process job the ranks of other processes are null: only local ranks call in.
  explicit Communicator(std::vector<Backend*> ranks);
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  virtual std::string name() const = 0;
  int size() const { return static_cast<int>(ranks_.size()); }
  bool is_local(int rank) const { return ranks_.at(rank) != nullptr; }
  Device device(int rank) const;  // a local rank's

  // All ranks call the same sequence of collectives with the same n (and root). Each is ordered
  // after the work already queued on the rank's backend, and the backend's later work after it
  // (a host-side communicator completes it before returning; NCCL orders the streams with events
  // and returns at once) -- except all_reduce_start, whose result is ordered by wait().
  //
  // wire (all-reduce, reduce, all-gather, reduce-scatter): the dtype on the wire. Bf16 rounds the
  // fp32 values to bf16 on the rank's compute queue into staging the communicator keeps, runs the
  // bf16 collective below and widens the result back into the fp32 buffer (a started one at
  // wait()); the bytes booked are the bf16 payload's (--reduce-dtype, --param-dtype; docs/bf16.md).
  void all_reduce(int rank, float* buf, int64_t n, DType wire = DType::F32);  // sum, in place: start + wait
  void all_reduce_start(int rank, float* buf, int64_t n, DType wire = DType::F32);
  void wait(int rank);
  void broadcast(int rank, float* buf, int64_t n, int root);
  void reduce(int rank, float* buf, int64_t n, int root, DType wire = DType::F32);  // sum into root's buf; others keep theirs
  // send, recv and their started forms: wire Bf16 rounds on the sender and widens on the receiver
  // (both must name it) through staging of their own, the bytes booked the bf16 payload's: a
  // pipeline's activations and gradients under --precision bf16, which are bf16 values already.
  void send(int rank, const float* buf, int64_t n, int peer, DType wire = DType::F32);
  void recv(int rank, float* buf, int64_t n, int peer, DType wire = DType::F32);
  // Equal pieces of n values per rank, as NCCL takes them (callers pad uneven shards); bytes
  // booked: the whole gathered buffer, size() * n values (the nccl-tests size of both).
  // all_gather: recv[r*n, (r+1)*n) = rank r's send (n values); recv holds size() * n.
  void all_gather(int rank, const float* send, float* recv, int64_t n, DType wire = DType::F32);
  // reduce_scatter: recv (n values) = the sum over ranks of their send[rank*n, (rank+1)*n).
  void reduce_scatter(int rank, const float* send, float* recv, int64_t n, DType wire = DType::F32);
  // all_gather that returns at once, its result ordered by wait() as all_reduce_start's: the
  // prefetching fsdp variants gather the next unit while the current one computes. recv must stay
  // untouched, and send unchanged, until then. A host-side communicator may complete it in the call.
  void all_gather_start(int rank, const float* send, float* recv, int64_t n, DType wire = DType::F32);
  // fp32 values gathered into a bf16 buffer: rounded in as above, nothing widened out (fsdp's
  // whole parameters kept in bf16 under --param-dtype bf16, as FSDP's param_dtype keeps them).
  void all_gather(int rank, const float* send, Bf16* recv, int64_t n);
  void all_gather_start(int rank, const float* send, Bf16* recv, int64_t n);

  // The same collectives on bf16 buffers. A bf16 sum adds two bf16 values in fp32 and rounds the
  // result to bf16 at every partial sum, as NCCL's ncclBfloat16 sum does: in-process in rank order
  // (every rank gets the same bits), NCCL and MPI in their own algorithm's order.
  void all_reduce(int rank, Bf16* buf, int64_t n);
  void all_reduce_start(int rank, Bf16* buf, int64_t n);
  void reduce(int rank, Bf16* buf, int64_t n, int root);
  void all_gather(int rank, const Bf16* send, Bf16* recv, int64_t n);
  void all_gather_start(int rank, const Bf16* send, Bf16* recv, int64_t n);
  void reduce_scatter(int rank, const Bf16* send, Bf16* recv, int64_t n);

  // Point-to-point transfers that return at once, so a pipeline stage can start its next
  // micro-batch while its output travels. The send's buffer must stay unchanged, and the recv's
  // untouched, until wait_transfer(rank, id) of the id they return; after it the sent buffer is
  // free and the received values are ordered before the rank's later work. Between two ranks,
  // messages of one direction match in the order they were started (as MPI's). A transfer is
  // started after the rank's queued work, like every call above. On NCCL a rank's transfers also
  // run in the order started, one after another: starts that can only finish together (a send
  // forward and a receive from the same peer) go in one group (group_start below).
  int64_t send_start(int rank, const float* buf, int64_t n, int peer, DType wire = DType::F32);
  int64_t recv_start(int rank, float* buf, int64_t n, int peer, DType wire = DType::F32);
  void wait_transfer(int rank, int64_t id);
  // The starts between group_start and group_end go out together, as one ncclGroupStart/End on
  // NCCL: a step that sends one tensor and receives another cannot then wait on a peer that waits
  // on it, whatever order the two issue theirs in. Groups do not nest and hold only send_start and
  // recv_start; their ids are waited for after group_end. A no-op on host-side communicators,
  // whose starts never block.
  void group_start(int rank);
  void group_end(int rank);
  // Sizes the rank's bf16 transfer staging ahead, slot k at least values[k] (a replay of its step's
  // transfers through WireSlots): allocated before the step, so the step's peak holds all of it as
  // the memory estimate does, and no slot grows later. No transfer of the rank may be in flight.
  void reserve_transfer_staging(int rank, const std::vector<int64_t>& values);

  // Called when a worker failed: every rank blocked in (or later entering) a collective throws
  // Error instead of waiting forever for it. The communicator is unusable afterwards.
  virtual void abort() noexcept = 0;

  // Complete once the rank's backend has finished its queued work (after synchronize()).
  const CommStats& stats(int rank);
  void reset_stats(int rank);
  // Where the rank's calls record their transfer and idle spans (null: nowhere); set by the
  // thread that drives the rank.
  void set_tracer(int rank, Tracer* t) { tracers_.at(rank) = t; }

 protected:
  // The reductions and gathers take their buffers' dtype t (F32: float, Bf16: Bf16 values).
  virtual void do_all_reduce(int rank, void* buf, int64_t n, DType t) = 0;  // may return before done
  virtual void do_wait(int rank) = 0;
  virtual void do_broadcast(int rank, float* buf, int64_t n, int root) = 0;
  virtual void do_reduce(int rank, void* buf, int64_t n, int root, DType t) = 0;
  // Transfers of n values of dtype t (F32 or Bf16), the two sides naming the same.
  virtual void do_send(int rank, const void* buf, int64_t n, int peer, DType t) = 0;
  virtual void do_recv(int rank, void* buf, int64_t n, int peer, DType t) = 0;
  // Return an id, unique among the rank's transfers not yet waited for.
  virtual int64_t do_send_start(int rank, const void* buf, int64_t n, int peer, DType t) = 0;
  virtual int64_t do_recv_start(int rank, void* buf, int64_t n, int peer, DType t) = 0;
  virtual void do_wait_transfer(int rank, int64_t id) = 0;
  virtual void do_group_start(int) {}
  virtual void do_group_end(int) {}
  virtual void do_all_gather(int rank, const void* send, void* recv, int64_t n, DType t) = 0;
  virtual void do_reduce_scatter(int rank, const void* send, void* recv, int64_t n, DType t) = 0;
  // Completes by do_wait; by default at once, as do_all_gather.
  virtual void do_all_gather_start(int rank, const void* send, void* recv, int64_t n, DType t) {
    do_all_gather(rank, send, recv, n, t);
  }

  Backend& backend(int rank) const { return *ranks_.at(rank); }  // a local rank's
  // Implementations that order themselves after the rank's queued compute with events return
  // true; for the others the base class first synchronizes the rank's backend (booked as wait).
  virtual bool orders_with_events() const { return false; }
  // Seconds of the current call that the rank spent waiting for a peer, not moving data.
  void waited(int rank, double seconds) { pending_wait_[rank] += seconds; }
  // The same, with when: the span shows in the rank's trace where it happened.
  void waited(int rank, std::chrono::steady_clock::time_point from, std::chrono::steady_clock::time_point to);
  // For event-ordered implementations: one span per call that moved data since the reset, in
  // call order, complete once the rank's device work is. They become stats(rank) and the rank's
  // idle and transfer spans.
  using DeviceSpan = CommDeviceSpan;
  virtual std::vector<DeviceSpan> device_spans(int) { return {}; }
  virtual void reset_device_timers(int) {}

 private:
  // A call's bookkeeping: bytes and time, split into idle and transfer, per kind, into the tracer.
  // blocking: a send or recv that returns complete (refused inside a group).
  // elem: the bytes of one of the n values (a span's name gives the payload).
  template <class F>
  void timed(int rank, std::size_t bytes, F&& f, CollKind kind = CollKind::Other, int peer = -1, int64_t n = 0,
             bool blocking = false, std::size_t elem = sizeof(float));
  // The typed collectives behind the float and bf16 entry points.
  void all_reduce_typed(int rank, void* buf, int64_t n, DType t);
  void reduce_typed(int rank, void* buf, int64_t n, int root, DType t);
  void all_gather_typed(int rank, const void* send, void* recv, int64_t n, DType t, bool start);
  void reduce_scatter_typed(int rank, const void* send, void* recv, int64_t n, DType t);
  void send_typed(int rank, const void* buf, int64_t n, int peer, DType t);
  void recv_typed(int rank, void* buf, int64_t n, int peer, DType t);
  int64_t transfer_start(int rank, bool send, void* buf, int64_t n, int peer, DType t);
  // Bf16 wire staging (engine/comm_wire.cpp): slot k of the rank's grow-only staging, holding at
  // least n bf16 values on its device; a started all-reduce's slots stay taken until wait().
  Bf16* staging(int rank, int64_t n);
  Bf16* rounded(int rank, const float* x, int64_t n);  // staging(rank, n) holding x rounded to bf16
  struct Widen {  // a started bf16 all-reduce's result, widened into `to` at wait()
    const Bf16* from;
    float* to;
    int64_t n;
  };
  void observed(int rank, const CommCall& c) const;
  struct Call {  // a call that moved data, for event-ordered per-kind times
    CollKind kind;
    std::size_t bytes;
    int peer;
  };
  std::vector<Backend*> ranks_;
  // Entry r of each is touched only by rank r's thread.
  std::vector<CommStats> stats_;
  std::vector<double> pending_wait_;
  std::vector<char> settled_;
  std::vector<Tracer*> tracers_;
  std::vector<std::vector<std::pair<std::chrono::steady_clock::time_point, std::chrono::steady_clock::time_point>>> waits_;
  std::vector<std::vector<Call>> calls_;
  std::vector<char> grouped_;  // per rank: inside group_start .. group_end
  std::vector<CollKind> started_;  // per rank: the kind of the last start, whose time wait() books
  std::vector<std::vector<Tensor>> staging_;  // per rank: its slots
  std::vector<int> staged_;                   // per rank: slots taken
  std::vector<std::vector<Widen>> widen_;     // per rank
  // Bf16 p2p staging, per rank: slots taken by the transfers in flight (WireSlots), and per started
  // transfer its slot and, for a receive, where the values are widened at wait_transfer.
  struct Staged {
    int slot;
    float* to;  // null: a send
    int64_t n;
  };
  std::vector<WireSlots> p2p_slots_;
  std::vector<std::vector<Tensor>> p2p_staging_;
  std::vector<std::vector<std::pair<int64_t, Staged>>> p2p_staged_;  // (id, its staging): a few in flight
  Bf16* p2p_slot(int rank, int k);
  void staged_done(int rank, int64_t id);  // at wait_transfer: widen a receive, free the slot
};

// A call as a communicator's front end saw it, for checking on CPU the order of the calls NCCL
// would get (engine/nccl_order.h, tests/test_nccl_order.cpp).
struct CommCall {
  enum Op : uint8_t { GroupStart, GroupEnd, Send, Recv, WaitTransfer, Collective };
  Op op = Collective;
  CollKind kind = CollKind::Other;  // of a Collective
  int peer = -1;                    // Send, Recv (blocking ones: id -1)
  int64_t n = 0;                    // values
  int64_t id = -1;                  // send_start, recv_start, wait_transfer
  DType dtype = DType::F32;         // what its values travel in
};
using CommCallObserver = std::function<void(const Communicator&, int rank, const CommCall&)>;
// Process-wide, called on each rank's thread after the call was issued; empty: none. Set it only
// while no communicator is in use.
void set_comm_call_observer(CommCallObserver observer);

enum class CommKind { Auto, InProcess, Nccl };

// Auto: one rank gets a no-op communicator; several get NCCL when every rank is a distinct GPU
// and the build has NCCL, otherwise in-process (CPU workers, workers sharing a GPU). Ranks of
// other processes (null entries; ranks.size() must then be the MPI world size) get an MPI
// communicator: NCCL bootstrapped through MPI on GPUs, MPI collectives otherwise. Making one
// is then collective: every process calls it at the same point.
std::unique_ptr<Communicator> make_communicator(const std::vector<Backend*>& ranks,
                                                CommKind kind = CommKind::Auto);
std::unique_ptr<Communicator> make_inproc_communicator(const std::vector<Backend*>& ranks);
#ifdef PARBENCH_HAVE_NCCL
// engine/nccl/: every rank in this process; or this process's one rank joining the job's others
// through a unique id (opaque bytes) that one rank made and everyone received.
std::unique_ptr<Communicator> make_nccl_communicator(const std::vector<Backend*>& ranks);
std::string nccl_unique_id();
std::unique_ptr<Communicator> make_nccl_rank_communicator(const std::vector<Backend*>& ranks, int rank,
                                                          const std::string& id);
#endif
#ifdef PARBENCH_HAVE_MPI
// engine/mpi/: one local rank, the world's other ranks in other processes.
std::unique_ptr<Communicator> make_mpi_communicator(const std::vector<Backend*>& ranks, CommKind kind);
std::unique_ptr<Communicator> make_mpi_host_communicator(const std::vector<Backend*>& ranks);
// A communicator over one part of the job: the processes that pass the same color (>= 0), ranked
// by world rank. ranks: one entry per member, this process's backend at its place, null elsewhere.
// Collective over every process of the job (each passing its own part's ranks and color): NCCL
// when the whole job could use it, MPI otherwise.
std::unique_ptr<Communicator> make_mpi_split_communicator(const std::vector<Backend*>& ranks, int color);
// This process's part in such a call where it is in none of the parts (`mine`: its backend).
void mpi_split_without_part(const Backend& mine);
#if defined(PARBENCH_HAVE_NCCL)
// color < 0: every process of the job; else, collectively, the processes passing the same color
// (ranks as make_mpi_split_communicator's).
std::unique_ptr<Communicator> make_nccl_mpi_communicator(const std::vector<Backend*>& ranks, int color = -1);
#endif
#endif

}  // namespace pb
