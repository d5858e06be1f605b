// The communicator front end (argument checks, per-rank stats), the one-rank no-op communicator
// and the factory that picks an implementation.
#include "engine/comm.h"

#include <algorithm>
#include <chrono>
#include <set>

#include "engine/check.h"

namespace pb {

const char* coll_kind_name(CollKind k) {
  switch (k) {
    case CollKind::AllReduce: return "all_reduce";
    case CollKind::Broadcast: return "broadcast";
    case CollKind::Reduce: return "reduce";
    case CollKind::SendRecv: return "send_recv";
    case CollKind::AllGather: return "all_gather";
    case CollKind::ReduceScatter: return "reduce_scatter";
    case CollKind::Other: return "other";
  }
  return "?";
}

namespace {
CommCallObserver g_observer;
bool g_observed = false;  // g_observer is set; read on every call
}  // namespace

void set_comm_call_observer(CommCallObserver observer) {
  g_observer = std::move(observer);
  g_observed = static_cast<bool>(g_observer);
}

double bus_factor(CollKind k, int n) {
  switch (k) {
    case CollKind::AllReduce: return 2.0 * (n - 1) / n;
    case CollKind::AllGather:
    case CollKind::ReduceScatter: return static_cast<double>(n - 1) / n;
    default: return 1.0;
  }
}

Communicator::Communicator(std::vector<Backend*> ranks)
    : ranks_(std::move(ranks)),
      stats_(ranks_.size()),
      pending_wait_(ranks_.size()),
      settled_(ranks_.size()),
      tracers_(ranks_.size(), nullptr),
      waits_(ranks_.size()),
      calls_(ranks_.size()),
      grouped_(ranks_.size(), 0),
      started_(ranks_.size(), CollKind::AllReduce),
      staging_(ranks_.size()),
      staged_(ranks_.size(), 0),
      widen_(ranks_.size()),
      p2p_slots_(ranks_.size()),
      p2p_staging_(ranks_.size()),
      p2p_staged_(ranks_.size()) {
  PB_CHECK(!ranks_.empty(), "a communicator needs at least one rank");
  bool any = false;
  for (Backend* b : ranks_) any = any || b != nullptr;
  PB_CHECK(any, "a communicator needs at least one local rank");
}

Device Communicator::device(int rank) const {
  PB_CHECK(is_local(rank), "rank {} belongs to another process", rank);
  return ranks_[rank]->device();
}

const CommStats& Communicator::stats(int rank) {
  CommStats& s = stats_.at(rank);
  if (!settled_[rank]) {
    const auto spans = device_spans(rank);
    Backend& be = *ranks_[rank];
    Tracer* tr = tracers_[rank];
    const bool per_call = spans.size() == calls_[rank].size();  // else (one rank) only totals
    for (std::size_t i = 0; i < spans.size(); ++i) {
      const DeviceSpan& d = spans[i];
      using sec = std::chrono::duration<double>;
      const double transfer = d.on_host ? sec(d.host_to - d.host_from).count() : be.elapsed_s(*d.from, *d.to);
      s.seconds += transfer;
      if (d.on_host) s.wait_s += sec(d.host_from - d.host_arrive).count();
      else if (d.arrive) s.wait_s += be.elapsed_s(*d.arrive, *d.from);
      if (!per_call) continue;
      const Call& c = calls_[rank][i];
      s.kinds[static_cast<int>(c.kind)].seconds += transfer;
      if (!tr) continue;
      const bool named = tr->named();
      const std::string idle =
          !named ? std::string() : c.peer >= 0 ? fmt::format("wait for peer {}", c.peer) : "wait for peers";
      const std::string what =
          named ? fmt::format("{} {}{}", coll_kind_name(c.kind), bytes_str(static_cast<double>(c.bytes)),
                              c.peer >= 0 ? fmt::format(" peer {}", c.peer) : "")
                : std::string();
      if (d.on_host) {
        if (d.host_from > d.host_arrive) tr->host_span(Phase::Idle, Lane::Comm, idle, d.host_arrive, d.host_from);
        tr->host_span(Phase::Transfer, Lane::Comm, what, d.host_from, d.host_to);
        continue;
      }
      if (d.arrive) tr->device_span(Phase::Idle, Lane::Comm, idle, *d.arrive, *d.from);
      tr->device_span(Phase::Transfer, Lane::Comm, what, *d.from, *d.to);
    }
    settled_[rank] = 1;
  }
  return s;
}

void Communicator::reset_stats(int rank) {
  stats_.at(rank) = CommStats{};
  settled_[rank] = 0;
  calls_[rank].clear();
  reset_device_timers(rank);
}

void Communicator::waited(int rank, std::chrono::steady_clock::time_point from, std::chrono::steady_clock::time_point to) {
  pending_wait_[rank] += std::chrono::duration<double>(to - from).count();
  waits_[rank].emplace_back(from, to);
}

// The host time of a call is split into wait (for the rank's queued device work, for peers) and
// transfer; an event-ordered implementation spends only the time to enqueue on the host, and
// its transfers are timed on the device instead. With a tracer, a host-side call cuts the open
// compute span (the worker's thread is busy here) and leaves its idle and transfer spans where
// they happened.
template <class F>
void Communicator::timed(int rank, std::size_t bytes, F&& f, CollKind kind, int peer, int64_t n, bool blocking,
                         std::size_t elem) {
  PB_CHECK(0 <= rank && rank < size(), "rank {} of {}", rank, size());
  PB_CHECK(is_local(rank), "rank {} of {} belongs to another process", rank, size());
  PB_CHECK(!grouped_[rank] || (kind == CollKind::SendRecv && peer >= 0 && !blocking),
           "rank {} of {}: only send_start and recv_start may come between group_start and group_end", rank, size());
  using clock = std::chrono::steady_clock;
  CommStats& s = stats_[rank];
  Tracer* tr = tracers_[rank];
  const bool events = orders_with_events();
  const bool moves = n > 0 && size() > 1;
  if (tr && !events) tr->suspend();
  const auto t0 = clock::now();
  if (!events) ranks_[rank]->synchronize();  // buffers that queued device work may still produce
  const auto t1 = clock::now();
  pending_wait_[rank] = 0;
  waits_[rank].clear();
  if (tr) tr->nvtx_push(coll_kind_name(kind));
  f();
  if (tr) tr->nvtx_pop();
  const auto t2 = clock::now();
  const double call = std::chrono::duration<double>(t2 - t1).count();
  const double wait = std::chrono::duration<double>(t1 - t0).count() + pending_wait_[rank];
  const double transfer = events ? 0.0 : std::max(0.0, call - pending_wait_[rank]);
  s.wait_s += wait;
  s.seconds += transfer;
  s.bytes += size() > 1 ? bytes : 0;  // one rank moves nothing
  ++s.calls;
  CollStats& k = s.kinds[static_cast<int>(kind)];
  k.bytes += size() > 1 ? bytes : 0;
  k.seconds += transfer;
  k.calls += moves ? 1 : 0;
  if (events && moves) calls_[rank].push_back({kind, bytes, peer});
  if (!tr) return;
  if (!events) {
    const bool named = tr->named();
    const std::string what =
        !named ? std::string()
        : (kind == CollKind::AllReduce || kind == CollKind::AllGather) && n <= 0 ? fmt::format("{} completion", coll_kind_name(kind))
        : fmt::format("{} {}{}", coll_kind_name(kind), bytes_str(static_cast<double>(n > 0 ? n : 0) * elem),
                            peer >= 0 ? fmt::format(" peer {}", peer) : "");
    const std::string idle = named ? (peer >= 0 ? fmt::format("wait for peer {}", peer) : std::string("wait for peers")) : std::string();
    if (ranks_[rank]->device().kind != DeviceKind::Cpu && t1 > t0)  // a CPU backend never queues
      tr->host_span(Phase::Idle, Lane::Comm, named ? "wait for own device" : "", t0, t1);
    // The call's time between its waits is transfer.
    auto at = t1;
    for (const auto& [from, to] : waits_[rank]) {
      if (from > at) tr->host_span(Phase::Transfer, Lane::Comm, what, at, from);
      tr->host_span(Phase::Idle, Lane::Comm, idle, from, to);
      at = std::max(at, to);
    }
    if (t2 > at) tr->host_span(Phase::Transfer, Lane::Comm, what, at, t2);
    tr->resume();
  }
}

void Communicator::observed(int rank, const CommCall& c) const {
  if (g_observed) g_observer(*this, rank, c);
}

void Communicator::group_start(int rank) {
  PB_CHECK(0 <= rank && rank < size() && is_local(rank), "group_start at rank {} of {}, not local", rank, size());
  PB_CHECK(!grouped_[rank], "rank {} of {}: group_start inside a group (groups do not nest)", rank, size());
  do_group_start(rank);
  grouped_[rank] = 1;
  observed(rank, {CommCall::GroupStart});
}

void Communicator::group_end(int rank) {
  PB_CHECK(0 <= rank && rank < size() && is_local(rank), "group_end at rank {} of {}, not local", rank, size());
  PB_CHECK(grouped_[rank], "rank {} of {}: group_end without group_start", rank, size());
  grouped_[rank] = 0;
  do_group_end(rank);
  observed(rank, {CommCall::GroupEnd});
}

// Started collectives complete here (MPI): the call's transfer time is theirs, booked under the
// kind last started (ddp starts only all-reduces, the prefetching fsdp only all-gathers). Bf16
// wire results are widened after it, on the rank's compute queue.
void Communicator::wait(int rank) {
  timed(rank, 0, [&] { do_wait(rank); }, started_.at(rank));
  for (const Widen& w : widen_[rank]) backend(rank).from_bf16(w.n, w.from, w.to);
  widen_[rank].clear();
  staged_[rank] = 0;
}

void Communicator::all_reduce_typed(int rank, void* buf, int64_t n, DType t) {
  PB_CHECK(n >= 0, "all_reduce of {} values", n);
  timed(rank, n * dtype_size(t), [&] {
    if (n > 0) do_all_reduce(rank, buf, n, t);
  }, CollKind::AllReduce, -1, n, false, dtype_size(t));
  started_.at(rank) = CollKind::AllReduce;
  observed(rank, {CommCall::Collective, CollKind::AllReduce, -1, n, -1, t});
}

void Communicator::broadcast(int rank, float* buf, int64_t n, int root) {
  PB_CHECK(n >= 0 && 0 <= root && root < size(), "broadcast of {} values from root {} of {}", n, root, size());
  timed(rank, n * sizeof(float), [&] {
    if (n > 0) do_broadcast(rank, buf, n, root);
  }, CollKind::Broadcast, -1, n);
  observed(rank, {CommCall::Collective, CollKind::Broadcast, root, n});
}

void Communicator::reduce_typed(int rank, void* buf, int64_t n, int root, DType t) {
  PB_CHECK(n >= 0 && 0 <= root && root < size(), "reduce of {} values to root {} of {}", n, root, size());
  timed(rank, n * dtype_size(t), [&] {
    if (n > 0) do_reduce(rank, buf, n, root, t);
  }, CollKind::Reduce, -1, n, false, dtype_size(t));
  observed(rank, {CommCall::Collective, CollKind::Reduce, root, n, -1, t});
}

void Communicator::send_typed(int rank, const void* buf, int64_t n, int peer, DType t) {
  PB_CHECK(n >= 0 && 0 <= peer && peer < size() && peer != rank, "send of {} values from rank {} to {} of {}", n,
           rank, peer, size());
  timed(rank, n * dtype_size(t), [&] {
    if (n > 0) do_send(rank, buf, n, peer, t);
  }, CollKind::SendRecv, peer, n, true, dtype_size(t));
  observed(rank, {CommCall::Send, CollKind::SendRecv, peer, n, -1, t});
}

void Communicator::recv_typed(int rank, void* buf, int64_t n, int peer, DType t) {
  PB_CHECK(n >= 0 && 0 <= peer && peer < size() && peer != rank, "recv of {} values at rank {} from {} of {}", n,
           rank, peer, size());
  timed(rank, 0, [&] {
    if (n > 0) do_recv(rank, buf, n, peer, t);
  }, CollKind::SendRecv, peer, n, true, dtype_size(t));
  observed(rank, {CommCall::Recv, CollKind::SendRecv, peer, n, -1, t});
}

int64_t Communicator::transfer_start(int rank, bool send, void* buf, int64_t n, int peer, DType t) {
  PB_CHECK(n >= 0 && 0 <= peer && peer < size() && peer != rank, "{} of {} values {} rank {} {} {} of {}",
           send ? "send" : "recv", n, send ? "from" : "at", rank, send ? "to" : "from", peer, size());
  int64_t id = -1;
  timed(rank, send ? n * dtype_size(t) : 0, [&] {
    id = send ? do_send_start(rank, buf, n, peer, t) : do_recv_start(rank, buf, n, peer, t);
  }, CollKind::SendRecv, peer, n, false, dtype_size(t));
  observed(rank, {send ? CommCall::Send : CommCall::Recv, CollKind::SendRecv, peer, n, id, t});
  return id;
}

void Communicator::wait_transfer(int rank, int64_t id) {
  timed(rank, 0, [&] { do_wait_transfer(rank, id); }, CollKind::SendRecv);
  observed(rank, {CommCall::WaitTransfer, CollKind::SendRecv, -1, 0, id});
  staged_done(rank, id);
}

void Communicator::all_gather_typed(int rank, const void* send, void* recv, int64_t n, DType t, bool start) {
  PB_CHECK(n >= 0, "all_gather of {} values per rank", n);
  timed(rank, static_cast<std::size_t>(n) * size() * dtype_size(t), [&] {
    if (n > 0 && start) do_all_gather_start(rank, send, recv, n, t);
    else if (n > 0) do_all_gather(rank, send, recv, n, t);
  }, CollKind::AllGather, -1, n * size(), false, dtype_size(t));
  if (start) started_.at(rank) = CollKind::AllGather;
  observed(rank, {CommCall::Collective, CollKind::AllGather, -1, n, -1, t});
}

void Communicator::reduce_scatter_typed(int rank, const void* send, void* recv, int64_t n, DType t) {
  PB_CHECK(n >= 0, "reduce_scatter of {} values per rank", n);
  timed(rank, static_cast<std::size_t>(n) * size() * dtype_size(t), [&] {
    if (n > 0) do_reduce_scatter(rank, send, recv, n, t);
  }, CollKind::ReduceScatter, -1, n * size(), false, dtype_size(t));
  observed(rank, {CommCall::Collective, CollKind::ReduceScatter, -1, n, -1, t});
}

namespace {

// One rank: every collective is the identity, so strategies need no `if (n > 1)`.
class SoloComm final : public Communicator {
 public:
  using Communicator::Communicator;
  std::string name() const override { return "none"; }
  void abort() noexcept override {}

 protected:
  void do_all_reduce(int, void*, int64_t, DType) override {}
  void do_wait(int) override {}
  void do_broadcast(int, float*, int64_t, int) override {}
  void do_reduce(int, void*, int64_t, int, DType) override {}
  void do_send(int, const void*, int64_t, int, DType) override {}  // unreachable: peer != rank is checked
  void do_recv(int, void*, int64_t, int, DType) override {}
  int64_t do_send_start(int, const void*, int64_t, int, DType) override { return 0; }  // unreachable, as do_send
  int64_t do_recv_start(int, void*, int64_t, int, DType) override { return 0; }
  void do_wait_transfer(int, int64_t) override {}
  // The one piece is the whole buffer: a copy on the rank's device (queued after its work).
  void do_all_gather(int rank, const void* send, void* recv, int64_t n, DType t) override { copy(rank, send, recv, n, t); }
  void do_reduce_scatter(int rank, const void* send, void* recv, int64_t n, DType t) override {
    copy(rank, send, recv, n, t);
  }
  void copy(int rank, const void* src, void* dst, int64_t n, DType t) {
    if (src != dst) backend(rank).copy(device(rank), dst, device(rank), src, static_cast<std::size_t>(n) * dtype_size(t));
  }
  bool orders_with_events() const override { return true; }  // nothing to order
};

}  // namespace

std::unique_ptr<Communicator> make_communicator(const std::vector<Backend*>& ranks, CommKind kind) {
  PB_CHECK(!ranks.empty(), "a communicator needs at least one rank");
  bool all_local = true;
  for (Backend* b : ranks) all_local = all_local && b != nullptr;
  if (!all_local) {
#ifdef PARBENCH_HAVE_MPI
    return make_mpi_communicator(ranks, kind);
#else
    throw Error("ranks in other processes need a build with MPI");
#endif
  }
  if (ranks.size() == 1 && kind == CommKind::Auto) return std::make_unique<SoloComm>(ranks);
  bool distinct_gpus = true;
  std::set<int> gpus;
  for (Backend* b : ranks)
    distinct_gpus = distinct_gpus && b->device().kind == DeviceKind::Cuda && gpus.insert(b->device().index).second;
  if (kind == CommKind::Nccl) {
#ifdef PARBENCH_HAVE_NCCL
    if (!distinct_gpus) throw Error("the NCCL communicator needs one distinct GPU per rank");
    return make_nccl_communicator(ranks);
#else
    throw Error("NCCL communicator requested, but this build has no NCCL");
#endif
  }
#ifdef PARBENCH_HAVE_NCCL
  if (kind == CommKind::Auto && distinct_gpus) return make_nccl_communicator(ranks);
#endif
  return make_inproc_communicator(ranks);
}

}  // namespace pb
