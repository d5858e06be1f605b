// The communicator front end (argument checks, per-rank stats), the one-rank no-op communicator
// and the factory that picks an implementation.
#include "engine/comm.h"

#include <algorithm>
#include <chrono>
#include <set>

#include "engine/check.h"

namespace pb {

Communicator::Communicator(std::vector<Backend*> ranks)
    : ranks_(std::move(ranks)), stats_(ranks_.size()), pending_wait_(ranks_.size()), settled_(ranks_.size()) {
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
    s.seconds += device_transfer_s(rank);
    settled_[rank] = 1;
  }
  return s;
}

void Communicator::reset_stats(int rank) {
  stats_.at(rank) = CommStats{};
  settled_[rank] = 0;
  reset_device_timers(rank);
}

// The host time of a call is split into wait (for the rank's queued device work, for peers) and
// transfer; an event-ordered implementation spends only the time to enqueue on the host, and
// its transfers are timed on the device instead.
template <class F>
void Communicator::timed(int rank, std::size_t bytes, F&& f) {
  PB_CHECK(0 <= rank && rank < size(), "rank {} of {}", rank, size());
  PB_CHECK(is_local(rank), "rank {} of {} belongs to another process", rank, size());
  using clock = std::chrono::steady_clock;
  CommStats& s = stats_[rank];
  const bool events = orders_with_events();
  const auto t0 = clock::now();
  if (!events) ranks_[rank]->synchronize();  // buffers that queued device work may still produce
  const auto t1 = clock::now();
  pending_wait_[rank] = 0;
  f();
  const double call = std::chrono::duration<double>(clock::now() - t1).count();
  const double wait = std::chrono::duration<double>(t1 - t0).count() + pending_wait_[rank];
  s.wait_s += wait;
  if (!events) s.seconds += std::max(0.0, call - pending_wait_[rank]);
  s.bytes += size() > 1 ? bytes : 0;  // one rank moves nothing
  ++s.calls;
}

void Communicator::all_reduce(int rank, float* buf, int64_t n) {
  all_reduce_start(rank, buf, n);
  wait(rank);
}

void Communicator::all_reduce_start(int rank, float* buf, int64_t n) {
  PB_CHECK(n >= 0, "all_reduce of {} values", n);
  timed(rank, n * sizeof(float), [&] {
    if (n > 0) do_all_reduce(rank, buf, n);
  });
}

void Communicator::wait(int rank) { timed(rank, 0, [&] { do_wait(rank); }); }

void Communicator::broadcast(int rank, float* buf, int64_t n, int root) {
  PB_CHECK(n >= 0 && 0 <= root && root < size(), "broadcast of {} values from root {} of {}", n, root, size());
  timed(rank, n * sizeof(float), [&] {
    if (n > 0) do_broadcast(rank, buf, n, root);
  });
}

void Communicator::reduce(int rank, float* buf, int64_t n, int root) {
  PB_CHECK(n >= 0 && 0 <= root && root < size(), "reduce of {} values to root {} of {}", n, root, size());
  timed(rank, n * sizeof(float), [&] {
    if (n > 0) do_reduce(rank, buf, n, root);
  });
}

void Communicator::send(int rank, const float* buf, int64_t n, int peer) {
  PB_CHECK(n >= 0 && 0 <= peer && peer < size() && peer != rank, "send of {} values from rank {} to {} of {}", n,
           rank, peer, size());
  timed(rank, n * sizeof(float), [&] {
    if (n > 0) do_send(rank, buf, n, peer);
  });
}

void Communicator::recv(int rank, float* buf, int64_t n, int peer) {
  PB_CHECK(n >= 0 && 0 <= peer && peer < size() && peer != rank, "recv of {} values at rank {} from {} of {}", n,
           rank, peer, size());
  timed(rank, 0, [&] {
    if (n > 0) do_recv(rank, buf, n, peer);
  });
}

void Communicator::all_gather(int rank, const float* send, float* recv, int64_t n) {
  PB_CHECK(n >= 0, "all_gather of {} values per rank", n);
  timed(rank, static_cast<std::size_t>(n) * size() * sizeof(float), [&] {
    if (n > 0) do_all_gather(rank, send, recv, n);
  });
}

void Communicator::reduce_scatter(int rank, const float* send, float* recv, int64_t n) {
  PB_CHECK(n >= 0, "reduce_scatter of {} values per rank", n);
  timed(rank, static_cast<std::size_t>(n) * size() * sizeof(float), [&] {
    if (n > 0) do_reduce_scatter(rank, send, recv, n);
  });
}

namespace {

// One rank: every collective is the identity, so strategies need no `if (n > 1)`.
class SoloComm final : public Communicator {
 public:
  using Communicator::Communicator;
  std::string name() const override { return "none"; }
  void abort() noexcept override {}

 protected:
  void do_all_reduce(int, float*, int64_t) override {}
  void do_wait(int) override {}
  void do_broadcast(int, float*, int64_t, int) override {}
  void do_reduce(int, float*, int64_t, int) override {}
  void do_send(int, const float*, int64_t, int) override {}  // unreachable: peer != rank is checked
  void do_recv(int, float*, int64_t, int) override {}
  // The one piece is the whole buffer: a copy on the rank's device (queued after its work).
  void do_all_gather(int rank, const float* send, float* recv, int64_t n) override { copy(rank, send, recv, n); }
  void do_reduce_scatter(int rank, const float* send, float* recv, int64_t n) override { copy(rank, send, recv, n); }
  void copy(int rank, const float* src, float* dst, int64_t n) {
    if (src != dst) copy_bytes(device(rank), dst, device(rank), src, static_cast<std::size_t>(n) * sizeof(float));
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
