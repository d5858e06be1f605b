// In-process communicator: the ranks are threads of this process meeting at a shared-memory
// rendezvous. Buffers are reached only through copy_bytes (or read directly when on the host), so
// it serves CPU workers and CUDA workers that share one GPU alike.
#include <chrono>
#include <condition_variable>
#include <mutex>

#include "engine/check.h"
#include "engine/comm.h"

namespace pb {

namespace {

class InProcComm final : public Communicator {
 public:
  explicit InProcComm(std::vector<Backend*> ranks)
      : Communicator(std::move(ranks)), src_(size()), host_(size()), mail_(size() * size()), piece_(size()) {}
  std::string name() const override { return "inproc"; }

  void abort() noexcept override {
    std::lock_guard<std::mutex> lock(mu_);
    aborted_ = true;
    cv_.notify_all();
  }

 protected:
  void do_all_reduce(int rank, float* buf, int64_t n) override { sum(rank, buf, n, -1); }
  void do_wait(int) override {}  // every call above completes before returning
  void do_reduce(int rank, float* buf, int64_t n, int root) override { sum(rank, buf, n, root); }

  void do_broadcast(int rank, float* buf, int64_t n, int root) override {
    if (rank == root) src_[root] = buf;
    meet(rank);  // root's pointer is published
    if (rank != root) copy_bytes(device(rank), buf, device(root), src_[root], bytes(n));
    meet(rank);  // root's buffer must stay untouched until every rank has its copy
  }

  // A rendezvous: the sender posts its buffer and blocks until the receiver has copied it, so
  // the buffer needs no staging and the sender may reuse it as soon as send returns.
  void do_send(int rank, const float* buf, int64_t n, int peer) override {
    std::unique_lock<std::mutex> lock(mu_);
    Mail& m = mail_[rank * size() + peer];
    m.ptr = buf;
    m.n = n;
    m.posted = true;
    cv_.notify_all();
    idle(rank, lock, [&] { return aborted_ || m.taken; });  // the copy is the receiver's
    m.posted = m.taken = false;
    throw_if_aborted();
  }

  void do_recv(int rank, float* buf, int64_t n, int peer) override {
    Mail& m = mail_[peer * size() + rank];
    const float* src = nullptr;
    {
      std::unique_lock<std::mutex> lock(mu_);
      idle(rank, lock, [&] { return aborted_ || (m.posted && !m.taken); });
      throw_if_aborted();
      PB_CHECK(m.n == n, "rank {} receives {} values but rank {} sends {}", rank, n, peer, m.n);
      src = m.ptr;
    }
    // Outside the lock: the sender waits for `taken`, so its buffer stays valid meanwhile.
    copy_bytes(device(rank), buf, device(peer), src, bytes(n));
    std::lock_guard<std::mutex> lock(mu_);
    m.taken = true;
    cv_.notify_all();
  }

  // Each rank copies every piece from its publisher (a host copy when on a GPU).
  void do_all_gather(int rank, const float* send, float* recv, int64_t n) override {
    src_[rank] = publish(rank, send, n);
    meet(rank);  // every piece is published
    for (int k = 0; k < size(); ++k)
      if (src_[k] != recv + k * n) copy_bytes(device(rank), recv + k * n, cpu(), src_[k], bytes(n));  // in place
    meet(rank);  // the pieces stay untouched until every rank has its copies
  }

  // Each rank sums its own piece over ranks in rank order, as sum() does: the values equal an
  // all-reduce's bit for bit.
  void do_reduce_scatter(int rank, const float* send, float* recv, int64_t n) override {
    src_[rank] = publish(rank, send, size() * n);
    meet(rank);  // every input is published
    std::vector<float>& out = piece_[rank];
    out.assign(src_[0] + rank * n, src_[0] + (rank + 1) * n);
    for (int k = 1; k < size(); ++k) {
      const float* in = src_[k] + rank * n;
      for (int64_t i = 0; i < n; ++i) out[i] += in[i];
    }
    meet(rank);  // nobody reads the inputs any more
    copy_bytes(device(rank), recv, cpu(), out.data(), bytes(n));
  }

 private:
  // The host address of a rank's n input values: the buffer itself on the CPU, else a copy.
  const float* publish(int rank, const float* buf, int64_t n) {
    if (device(rank).kind == DeviceKind::Cpu) return buf;
    host_[rank].resize(static_cast<std::size_t>(n));
    copy_bytes(cpu(), host_[rank].data(), device(rank), buf, bytes(n));
    return host_[rank].data();
  }

  struct Mail {
    const float* ptr = nullptr;
    int64_t n = 0;
    bool posted = false, taken = false;
  };

  static std::size_t bytes(int64_t n) { return static_cast<std::size_t>(n) * sizeof(float); }

  void throw_if_aborted() const {
    if (aborted_) throw Error("communicator aborted: another worker failed");
  }

  // Waits on cv_ until done(), booked as the rank's wait for its peers.
  template <class Pred>
  void idle(int rank, std::unique_lock<std::mutex>& lock, Pred done) {
    if (done()) return;
    const auto t0 = std::chrono::steady_clock::now();
    cv_.wait(lock, done);
    waited(rank, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }

  // Barrier among all ranks. The mutex also orders memory: whatever a rank wrote before meet()
  // (its published pointer, its slice of the sum) is visible to every rank after it.
  void meet(int rank) {
    std::unique_lock<std::mutex> lock(mu_);
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
  void sum(int rank, float* buf, int64_t n, int root) {
    const Device dev = device(rank);
    if (dev.kind == DeviceKind::Cpu) {
      src_[rank] = buf;
    } else {
      host_[rank].resize(static_cast<std::size_t>(n));
      copy_bytes(cpu(), host_[rank].data(), dev, buf, bytes(n));
      src_[rank] = host_[rank].data();
    }
    // Only rank 0 resizes, and nobody reads sum_ between the previous call's last meet and this one.
    if (rank == 0 && static_cast<int64_t>(sum_.size()) < n) sum_.resize(static_cast<std::size_t>(n));
    meet(rank);  // every rank's input is published
    const int64_t lo = n * rank / size(), hi = n * (rank + 1) / size();
    float* out = sum_.data();
    for (int64_t i = lo; i < hi; ++i) out[i] = src_[0][i];
    for (int k = 1; k < size(); ++k) {
      const float* in = src_[k];
      for (int64_t i = lo; i < hi; ++i) out[i] += in[i];
    }
    meet(rank);  // the sum is complete, and nobody reads the inputs any more
    if (root < 0 || root == rank) copy_bytes(dev, buf, cpu(), sum_.data(), bytes(n));
    meet(rank);  // sum_ and host_ are free for the next call
  }

  std::mutex mu_;
  std::condition_variable cv_;  // one for all waits: few ranks, and every change may wake several
  int arrived_ = 0;
  uint64_t generation_ = 0;
  bool aborted_ = false;
  std::vector<const float*> src_;          // per rank, published before a meet()
  std::vector<std::vector<float>> host_;   // per rank: host copy of a device buffer
  std::vector<float> sum_;
  std::vector<Mail> mail_;                 // [sender * size + receiver]
  std::vector<std::vector<float>> piece_;  // per rank: its reduce-scatter piece
};

}  // namespace

std::unique_ptr<Communicator> make_inproc_communicator(const std::vector<Backend*>& ranks) {
  return std::make_unique<InProcComm>(ranks);
}

}  // namespace pb
