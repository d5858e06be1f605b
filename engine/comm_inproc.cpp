// In-process communicator: the ranks are threads of this process meeting at a shared-memory
// rendezvous. Buffers are reached only through the ranks' backends' copies (or read directly when
// on the host), so it serves CPU workers and CUDA workers that share one GPU alike.
#include <chrono>
#include <condition_variable>
#include <deque>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>

#include "engine/check.h"
#include "engine/comm.h"
#include "engine/spin_wait.h"

namespace pb {

namespace {

class InProcComm final : public Communicator {
 public:
  explicit InProcComm(std::vector<Backend*> ranks)
      : Communicator(std::move(ranks)), src_(size()), ready_(size()), host_(size()), mail_(size() * size()),
        channels_(size() * size()), started_(size()), next_id_(size()), piece_(size()), queues_(size()) {}
  std::string name() const override { return "inproc"; }

  void abort() noexcept override {
    const auto lock = hold_polling(mu_);
    aborted_ = true;
    cv_.notify_all();
  }

 protected:
  void do_all_reduce(int rank, void* buf, int64_t n, DType t) override { sum(rank, buf, n, -1, t); }
  void do_wait(int) override {}  // every call above completes before returning
  void do_reduce(int rank, void* buf, int64_t n, int root, DType t) override { sum(rank, buf, n, root, t); }

  void do_broadcast(int rank, float* buf, int64_t n, int root) override {
    if (rank == root) src_[root] = buf, ready_[root] = mark(rank);
    meet(rank);  // root's pointer is published
    if (rank != root) copy(rank, device(rank), buf, device(root), src_[root], bytes(n), {ready_[root], mark(rank)});
    meet(rank);  // root's buffer must stay untouched until every rank has its copy
  }

  // A rendezvous: the sender posts its buffer and blocks until the receiver has copied it, so
  // the buffer needs no staging and the sender may reuse it as soon as send returns.
  void do_send(int rank, const void* buf, int64_t n, int peer, DType t) override {
    auto lock = hold_polling(mu_);
    Mail& m = mail_[rank * size() + peer];
    m.ptr = buf;
    m.n = n;
    m.t = t;
    m.ready = mark(rank);
    m.posted = true;
    cv_.notify_all();
    idle(rank, lock, [&] { return aborted_ || m.taken; });  // the copy is the receiver's
    m.posted = m.taken = false;
    throw_if_aborted();
  }

  void do_recv(int rank, void* buf, int64_t n, int peer, DType t) override {
    Mail& m = mail_[peer * size() + rank];
    const void* src = nullptr;
    Event* ready = nullptr;
    {
      auto lock = hold_polling(mu_);
      idle(rank, lock, [&] { return aborted_ || (m.posted && !m.taken); });
      throw_if_aborted();
      PB_CHECK(m.n == n && m.t == t, "rank {} receives {} values{} but rank {} sends {}{}", rank, n, in(t, m.t), peer,
               m.n, in(m.t, t));
      src = m.ptr;
      ready = m.ready;
    }
    // Outside the lock: the sender waits for `taken`, so its buffer (and event) stay valid meanwhile.
    copy(rank, device(rank), buf, device(peer), src, bytes(n, t), {ready, mark(rank)});
    const auto lock = hold_polling(mu_);
    m.taken = true;
    cv_.notify_all();
  }

  // Each rank copies every piece from its publisher (a host copy when on a GPU).
  void do_all_gather(int rank, const void* send, void* recv, int64_t n, DType t) override {
    Event* mine = mark(rank);
    src_[rank] = publish(rank, send, bytes(n, t), mine);
    meet(rank);  // every piece is published
    // Host pieces, ordered by the meet: only recv's earlier users to wait for. In place: no copy.
    for (int k = 0; k < size(); ++k) {
      char* to = static_cast<char*>(recv) + k * bytes(n, t);
      if (src_[k] != to) copy(rank, device(rank), to, cpu(), src_[k], bytes(n, t), {mine});
    }
    meet(rank);  // the pieces stay untouched until every rank has its copies
  }

  // Each rank sums its own piece over ranks in rank order, as sum() does: the values equal an
  // all-reduce's bit for bit.
  void do_reduce_scatter(int rank, const void* send, void* recv, int64_t n, DType t) override {
    Event* mine = mark(rank);
    src_[rank] = publish(rank, send, size() * bytes(n, t), mine);
    meet(rank);  // every input is published
    std::vector<float>& out = piece_[rank];
    out.resize(static_cast<std::size_t>(n));
    add_ranks(out.data(), rank * n, (rank + 1) * n, rank * n, t);
    meet(rank);  // nobody reads the inputs any more
    copy(rank, device(rank), recv, cpu(), out.data(), bytes(n, t), {mine});
  }

  // Non-blocking transfers: a channel per (sender, receiver) pair queues the sends and recvs not
  // yet matched, in start order. Whichever side starts second finds its match and copies straight
  // from the sender's buffer into the receiver's (both are stable until waited for), so a send
  // never waits for the receiver, and every micro-batch in flight stays in its own buffer.
  int64_t do_send_start(int rank, const void* buf, int64_t n, int peer, DType t) override {
    auto op = std::make_shared<Transfer>();
    op->src = buf, op->n = n, op->t = t, op->sender = rank, op->receiver = peer;
    op->ready = take_event(rank);
    return start(rank, std::move(op), channels_[rank * size() + peer].sends, channels_[rank * size() + peer].recvs);
  }

  int64_t do_recv_start(int rank, void* buf, int64_t n, int peer, DType t) override {
    auto op = std::make_shared<Transfer>();
    op->dst = buf, op->n = n, op->t = t, op->sender = peer, op->receiver = rank;
    op->ready = take_event(rank);
    return start(rank, std::move(op), channels_[peer * size() + rank].recvs, channels_[peer * size() + rank].sends);
  }

  void do_wait_transfer(int rank, int64_t id) override {
    auto it = started_[rank].find(id);
    PB_CHECK(it != started_[rank].end(), "rank {} waits for transfer {}, which it has not started or already waited for",
             rank, id);
    const std::shared_ptr<Transfer> op = std::move(it->second);
    started_[rank].erase(it);
    auto lock = hold_polling(mu_);
    idle(rank, lock, [&] { return aborted_ || op->done; });
    throw_if_aborted();
    // The copy is complete (done is set after it), so nobody waits on the event any more.
    queues_[rank].spare.push_back(std::move(op->ready));
  }

 private:
  struct Transfer {
    const void* src = nullptr;
    void* dst = nullptr;
    int64_t n = 0;
    DType t = DType::F32;
    int sender = 0, receiver = 0;
    bool done = false;
    // Recorded on the starter's compute queue at start: the copy waits for what wrote (or last
    // read) the buffer, and for none of the starter's later work.
    std::unique_ptr<Event> ready;
  };
  struct Channel {
    std::deque<std::shared_ptr<Transfer>> sends, recvs;  // started, not yet matched
  };

  // Queues `op` on its side of the channel, or completes it with the other side's oldest.
  int64_t start(int rank, std::shared_ptr<Transfer> op, std::deque<std::shared_ptr<Transfer>>& mine,
                std::deque<std::shared_ptr<Transfer>>& theirs) {
    const int64_t id = next_id_[rank]++;
    backend(rank).record(*op->ready);
    started_[rank].emplace(id, op);  // this rank's own map: no lock needed
    std::shared_ptr<Transfer> match;
    {
      const auto lock = hold_polling(mu_);
      throw_if_aborted();
      if (theirs.empty()) {
        mine.push_back(op);
        return id;
      }
      match = std::move(theirs.front());
      theirs.pop_front();
    }
    Transfer& send = op->src ? *op : *match;
    Transfer& recv = op->src ? *match : *op;
    PB_CHECK(send.n == recv.n && send.t == recv.t, "rank {} receives {} values{} but rank {} sends {}{}", recv.receiver,
             recv.n, in(recv.t, send.t), send.sender, send.n, in(send.t, recv.t));
    copy(rank, device(recv.receiver), recv.dst, device(send.sender), send.src, bytes(send.n, send.t),
         {send.ready.get(), recv.ready.get()});
    const auto lock = hold_polling(mu_);
    op->done = match->done = true;
    cv_.notify_all();
    return id;
  }

  // The host address of a rank's n input values: the buffer itself on the CPU, else a copy
  // (ordered after `written`, the rank's mark).
  const void* publish(int rank, const void* buf, std::size_t bytes, Event* written) {
    if (device(rank).kind == DeviceKind::Cpu) return buf;
    host_[rank].resize((bytes + sizeof(float) - 1) / sizeof(float));
    copy(rank, cpu(), host_[rank].data(), device(rank), buf, bytes, {written});
    return host_[rank].data();
  }

  // Every copy runs on the calling rank's own non-blocking stream, never on the legacy default
  // stream: on a GPU that several workers share, that one waits for every worker's queued
  // compute, so a copy would wait for (and book as transfer) a peer's next micro-batch. The
  // stream waits only for `after`, the marks of the buffers' owners (work queued before they
  // posted them), and the host for the stream: the copy is done on return.
  void copy(int rank, Device dst_dev, void* dst, Device src_dev, const void* src, std::size_t bytes,
            std::initializer_list<Event*> after) {
    if (bytes == 0) return;
    Backend& be = backend(rank);
    Queues& q = queues_[rank];
    if (!q.stream) q.stream = be.create_stream();
    for (Event* e : after)
      if (e) be.wait(*e, q.stream.get());
    be.copy(dst_dev, dst, src_dev, src, bytes, q.stream.get());
    be.synchronize(*q.stream);
  }

  // An event after the work queued so far on the rank's compute queue (the base class has also
  // synchronized it, but the copies' order does not rest on that). Reused by the rank's
  // blocking calls: the rendezvous keeps it from being recorded again while a peer waits on it.
  Event* mark(int rank) {
    Queues& q = queues_[rank];
    if (!q.mark) q.mark = backend(rank).create_event();
    backend(rank).record(*q.mark);
    return q.mark.get();
  }

  // An event for one non-blocking transfer, from the rank's spares (made only while the number
  // in flight grows).
  std::unique_ptr<Event> take_event(int rank) {
    auto& spare = queues_[rank].spare;
    if (spare.empty()) return backend(rank).create_event();
    std::unique_ptr<Event> e = std::move(spare.back());
    spare.pop_back();
    return e;
  }

  struct Mail {
    const void* ptr = nullptr;
    Event* ready = nullptr;  // the sender's mark
    int64_t n = 0;
    DType t = DType::F32;
    bool posted = false, taken = false;
  };

  // A transfer's dtype for a mismatch's message, where the other side's differs.
  static std::string in(DType t, DType other) { return t == other ? "" : fmt::format(" in {}", dtype_label(t)); }
  static std::size_t bytes(int64_t n, DType t = DType::F32) { return static_cast<std::size_t>(n) * dtype_size(t); }

  void throw_if_aborted() const {
    if (aborted_) throw Error("communicator aborted: another worker failed");
  }

  // Waits on cv_ until done(), booked as the rank's wait for its peers.
  template <class Pred>
  void idle(int rank, std::unique_lock<std::mutex>& lock, Pred done) {
    if (done()) return;
    const auto t0 = std::chrono::steady_clock::now();
    cv_.wait(lock, done);
    waited(rank, t0, std::chrono::steady_clock::now());
  }

  // Barrier among all ranks. The mutex also orders memory: whatever a rank wrote before meet()
  // (its published pointer, its slice of the sum) is visible to every rank after it.
  void meet(int rank) {
    auto lock = hold_polling(mu_);
    throw_if_aborted();
    const uint64_t gen = generation_;
    if (++arrived_ == size()) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    idle(rank, lock, [&] { return aborted_ || generation_ != gen; });
    throw_if_aborted();
  }

  // Sum over ranks in rank order (so every rank gets bit-identical values); each rank adds up
  // its own slice of the elements. root < 0: every rank receives the sum; else only root.
  void sum(int rank, void* buf, int64_t n, int root, DType t) {
    const Device dev = device(rank);
    Event* mine = mark(rank);
    src_[rank] = publish(rank, buf, bytes(n, t), mine);
    // Only rank 0 resizes, and nobody reads sum_ between the previous call's last meet and this one.
    if (rank == 0 && static_cast<int64_t>(sum_.size()) < n) sum_.resize(static_cast<std::size_t>(n));
    meet(rank);  // every rank's input is published
    add_ranks(sum_.data(), n * rank / size(), n * (rank + 1) / size(), 0, t);
    meet(rank);  // the sum is complete, and nobody reads the inputs any more
    if (root < 0 || root == rank) copy(rank, dev, buf, cpu(), sum_.data(), bytes(n, t), {mine});
    meet(rank);  // sum_ and host_ are free for the next call
  }

  // Elements [lo, hi) of the ranks' published inputs summed in rank order into out[i - base].
  // Bf16 rounds every partial sum to bf16, as one hop of NCCL's ring does; out then holds Bf16s.
  void add_ranks(float* out, int64_t lo, int64_t hi, int64_t base, DType t) const {
    const int64_t at = base;
    if (t == DType::F32) {
      for (int64_t i = lo; i < hi; ++i) out[i - at] = static_cast<const float*>(src_[0])[i];
      for (int k = 1; k < size(); ++k) {
        const float* in = static_cast<const float*>(src_[k]);
        for (int64_t i = lo; i < hi; ++i) out[i - at] += in[i];
      }
      return;
    }
    Bf16* o = reinterpret_cast<Bf16*>(out);
    for (int64_t i = lo; i < hi; ++i) o[i - at] = static_cast<const Bf16*>(src_[0])[i];
    for (int k = 1; k < size(); ++k) {
      const Bf16* in = static_cast<const Bf16*>(src_[k]);
      for (int64_t i = lo; i < hi; ++i) o[i - at] = to_bf16(from_bf16(o[i - at]) + from_bf16(in[i]));
    }
  }

  // Each on a cache line of its own: sharing one with whatever the allocator put beside them made
  // a small all-reduce's cost depend on the process (docs/internals.md, Waiting for peers).
  alignas(64) std::mutex mu_;
  alignas(64) SpinCondition cv_;  // one for all waits: few ranks, and every change may wake several
  alignas(64) int arrived_ = 0;
  uint64_t generation_ = 0;
  bool aborted_ = false;
  std::vector<const void*> src_;           // per rank, published before a meet()
  std::vector<Event*> ready_;              // per rank, published with src_: its mark
  std::vector<std::vector<float>> host_;   // per rank: host copy of a device buffer
  std::vector<float> sum_;                 // float or (its first half) Bf16 values
  std::vector<Mail> mail_;                 // [sender * size + receiver]
  std::vector<Channel> channels_;          // [sender * size + receiver], under mu_
  std::vector<std::map<int64_t, std::shared_ptr<Transfer>>> started_;  // per rank, its own thread's
  std::vector<int64_t> next_id_;           // per rank, its own thread's
  std::vector<std::vector<float>> piece_;  // per rank: its reduce-scatter piece
  struct Queues {  // a rank's own, made on its thread on first use
    std::unique_ptr<Stream> stream;  // its copies
    std::unique_ptr<Event> mark;     // its blocking calls' buffers
    std::vector<std::unique_ptr<Event>> spare;  // for transfers, back from wait_transfer
  };
  std::vector<Queues> queues_;  // per rank
};

}  // namespace

std::unique_ptr<Communicator> make_inproc_communicator(const std::vector<Backend*>& ranks) {
  return std::make_unique<InProcComm>(ranks);
}

}  // namespace pb
