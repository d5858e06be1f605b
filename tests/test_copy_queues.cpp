// Which queues the in-process communicator's copies go through, seen by a logging fake backend
// that stands in for workers sharing one GPU (host memory behind a CUDA device name, so the
// communicator takes its GPU paths). On a GPU the legacy default stream waits for every worker's
// queued compute; a copy there waits for a peer's next micro-batch. Each copy must run on the
// copying rank's own side stream, ordered after its buffers' owners' work up to the moment they
// posted them, and after nothing else.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "engine/check.h"
#include "engine/comm.h"

namespace pb {
namespace {

// A point in a compute queue: backend `owner`'s first `seq` ops.
struct Point {
  int owner = -1;
  int64_t seq = 0;
};

struct CopyRecord {
  int by = -1;               // the backend that queued it
  bool on_compute = false;   // on a backend's compute queue rather than a side stream
  int stream_owner = -1;
  std::vector<Point> after;  // what it was ordered after
};

struct Log {
  std::mutex mu;
  std::vector<CopyRecord> copies;
  std::vector<CopyRecord> take() {
    std::lock_guard<std::mutex> lock(mu);
    return std::exchange(copies, {});
  }
};

class FakeBackend final : public Backend {
 public:
  FakeBackend(int id, Log& log) : id_(id), log_(log) {}
  Device device() const override { return cuda(0); }  // all ranks share "one GPU"
  std::string name() const override { return fmt::format("fake {}", id_); }
  int64_t queued() const { return queued_; }

  // One compute op: a worker's micro-batch, as far as the queues are concerned.
  void relu_forward(int64_t, const float*, float*) override { ++queued_; }
  void add(int64_t, const float*, const float*, float*) override { ++queued_; }
  void max_pool2x2_forward(const Planes&, const float*, float*) override { ++queued_; }
  void max_pool2x2_backward(const Planes&, const float*, const float*, float*) override { ++queued_; }
  void upsample2x_forward(const Planes&, const float*, float*) override { ++queued_; }
  void upsample2x_backward(const Planes&, const float*, float*) override { ++queued_; }
  void add_channel_bias(int64_t, int64_t, int64_t, const float*, float*) override { ++queued_; }
  void channel_sums(int64_t, int64_t, int64_t, const float*, float*, bool) override { ++queued_; }

  void fill(float*, int64_t, float, Stream* s) override { queue_op(s); }
  void copy_2d(float*, int64_t, const float*, int64_t, int64_t, int64_t, Stream* s) override { queue_op(s); }
  void copy(Device, void* dst, Device, const void* src, std::size_t bytes, Stream* s) override {
    std::memcpy(dst, src, bytes);  // host memory behind the names: done at once
    CopyRecord r;
    r.by = id_;
    r.on_compute = s == nullptr;
    if (s) {
      auto& fs = static_cast<FakeStream&>(*s);
      r.stream_owner = fs.owner;
      r.after = fs.after;
    } else {
      r.stream_owner = id_;
      r.after = {Point{id_, queued_}};
      ++queued_;
    }
    std::lock_guard<std::mutex> lock(log_.mu);
    log_.copies.push_back(r);
  }
  void synchronize(Stream& s) override { static_cast<FakeStream&>(s).after.clear(); }  // all done
  void synchronize() override {}

  std::unique_ptr<Stream> create_stream() override { return std::make_unique<FakeStream>(id_); }
  std::unique_ptr<Event> create_event() override { return std::make_unique<FakeEvent>(); }
  void record(Event& e, Stream* s) override {
    auto& fe = static_cast<FakeEvent&>(e);
    fe.at = s ? static_cast<FakeStream&>(*s).after : std::vector<Point>{Point{id_, queued_}};
  }
  void wait(Event& e, Stream* s) override {
    PB_CHECK(s != nullptr, "the fake models waits of side streams only");
    auto& fs = static_cast<FakeStream&>(*s);
    const auto& at = static_cast<FakeEvent&>(e).at;
    fs.after.insert(fs.after.end(), at.begin(), at.end());
  }
  void synchronize(Event&) override {}
  double elapsed_s(Event&, Event&) override { return 0; }

  // Not used by a communicator.
  void conv2d_forward(const ConvGeom&, const float*, const float*, const float*, float*) override { ++queued_; }
  void conv2d_backward_data(const ConvGeom&, const float*, const float*, float*) override { ++queued_; }
  void conv2d_backward_weights(const ConvGeom&, const float*, const float*, float*, float*, bool) override {
    ++queued_;
  }
  void linear_forward(int64_t, int64_t, int64_t, const float*, const float*, const float*, float*) override {
    ++queued_;
  }
  void linear_backward_data(int64_t, int64_t, int64_t, const float*, const float*, float*) override { ++queued_; }
  void linear_backward_weights(int64_t, int64_t, int64_t, const float*, const float*, float*, float*,
                               bool) override {
    ++queued_;
  }
  void relu_backward(int64_t, const float*, const float*, float*) override { ++queued_; }
  void mse_loss_grad(int64_t, const float*, const float*, float, float*, float*) override { ++queued_; }
  void adam_step(int64_t, float*, const float*, float*, float*, const AdamParams&, int64_t) override { ++queued_; }

 private:
  struct FakeStream final : Stream {
    explicit FakeStream(int o) : owner(o) {}
    void* native() const override { return nullptr; }
    int owner;
    std::vector<Point> after;  // waited for since the host last synchronized it
  };
  struct FakeEvent final : Event {
    std::vector<Point> at;
  };
  void queue_op(Stream* s) {
    if (!s) ++queued_;
  }

  int id_;
  Log& log_;
  int64_t queued_ = 0;
};

struct Ranks {
  explicit Ranks(int n) {
    for (int i = 0; i < n; ++i) fakes.push_back(std::make_unique<FakeBackend>(i, log));
    std::vector<Backend*> raw;
    for (auto& f : fakes) raw.push_back(f.get());
    comm = make_inproc_communicator(raw);
  }
  void run(const std::function<void(int)>& fn) {
    std::vector<std::thread> threads;
    for (int r = 0; r < comm->size(); ++r) threads.emplace_back(fn, r);
    for (auto& t : threads) t.join();
  }
  Log log;
  std::vector<std::unique_ptr<FakeBackend>> fakes;
  std::unique_ptr<Communicator> comm;
};

bool has(const CopyRecord& c, Point p) {
  for (const Point& q : c.after)
    if (q.owner == p.owner && q.seq == p.seq) return true;
  return false;
}

// Every copy on the copier's own side stream, ordered after exactly the posts given (each rank's
// compute up to its post), and after no other point of any queue.
void expect_copies(const std::vector<CopyRecord>& copies, const std::vector<int64_t>& post,
                   const std::function<std::vector<int>(const CopyRecord&)>& owners, std::size_t expected) {
  EXPECT_EQ(copies.size(), expected) << "copies through the backends";
  for (const CopyRecord& c : copies) {
    SCOPED_TRACE(fmt::format("a copy by rank {}", c.by));
    EXPECT_FALSE(c.on_compute) << "on a compute queue";
    EXPECT_EQ(c.stream_owner, c.by) << "on another rank's stream";
    const std::vector<int> mine = owners(c);
    for (int o : mine) EXPECT_TRUE(has(c, {o, post[o]})) << "not ordered after rank " << o << "'s work";
    for (const Point& p : c.after) {
      EXPECT_NE(std::find(mine.begin(), mine.end(), p.owner), mine.end()) << "waits for rank " << p.owner;
      EXPECT_LE(p.seq, post[p.owner]) << "waits for work rank " << p.owner << " queued after posting";
    }
  }
}

// A pipeline's transfer: the side that starts first queues its next micro-batch before the other
// starts (and copies); the copy must not wait for it, but must wait for both sides' earlier work.
TEST(CopyQueues, TransfersWaitForThePostsNotForLaterWork) {
  for (bool sender_first : {true, false}) {
    SCOPED_TRACE(sender_first ? "sender starts first" : "receiver starts first");
    Ranks g(2);
    const int64_t n = 5;
    std::vector<float> a(n, 3.0f), b(n, 0.0f);
    std::vector<int64_t> post(2);
    std::atomic<int> turn{0};
    const int first = sender_first ? 0 : 1;
    g.run([&](int r) {
      FakeBackend& be = *g.fakes[r];
      while (turn.load() != (r == first ? 0 : 1)) std::this_thread::yield();
      be.relu_forward(1, nullptr, nullptr);  // work on the buffer before posting it
      post[r] = be.queued();
      const int64_t id = r == 0 ? g.comm->send_start(0, a.data(), n, 1) : g.comm->recv_start(1, b.data(), n, 0);
      if (r == first) be.relu_forward(1, nullptr, nullptr);  // the next micro-batch, queued in flight
      turn.fetch_add(1);
      g.comm->wait_transfer(r, id);
    });
    EXPECT_EQ(b, a);
    expect_copies(g.log.take(), post, [](const CopyRecord&) { return std::vector<int>{0, 1}; }, 1);
  }
}

// Host-staged collectives and blocking point-to-point: each copy waits for its own rank's work
// and, where it reads another rank's device buffer (broadcast, recv), that rank's post.
TEST(CopyQueues, CollectivesWaitOnlyForTheirBuffersOwners) {
  const int n = 3;
  const int64_t m = 4;
  struct Case {
    const char* name;
    std::function<void(Communicator&, int, std::vector<float>&, std::vector<float>&)> call;
    std::function<std::vector<int>(const CopyRecord&)> owners;
    std::size_t copies;
    std::function<float(int rank, int64_t i)> expect;  // in `out`
  };
  auto own = [](const CopyRecord& c) { return std::vector<int>{c.by}; };
  const std::vector<Case> cases = {
      {"all_reduce", [](Communicator& c, int r, std::vector<float>& in, std::vector<float>& out) {
         out = in;
         c.all_reduce(r, out.data(), m);
       }, own, 2 * n, [](int, int64_t i) { return static_cast<float>(6 * i + 3); }},
      {"broadcast", [](Communicator& c, int r, std::vector<float>& in, std::vector<float>& out) {
         out = in;
         c.broadcast(r, out.data(), m, 1);
       }, [](const CopyRecord& c) { return std::vector<int>{c.by, 1}; }, n - 1,
       [](int, int64_t i) { return static_cast<float>(2 * i + 1); }},
      {"all_gather", [](Communicator& c, int r, std::vector<float>& in, std::vector<float>& out) {
         out.assign(n * m, 0.0f);
         c.all_gather(r, in.data(), out.data(), m);
       }, own, n + n * n, [](int, int64_t i) { return static_cast<float>((i / m + 1) * (i % m) + i / m); }},
      {"reduce_scatter", [](Communicator& c, int r, std::vector<float>& in, std::vector<float>& out) {
         std::vector<float> whole(n * m);
         for (int64_t i = 0; i < n * m; ++i) whole[i] = in[i % m];
         out.assign(m, 0.0f);
         c.reduce_scatter(r, whole.data(), out.data(), m);
       }, own, 2 * n, [](int, int64_t i) { return static_cast<float>(6 * i + 3); }},
      {"send/recv", [](Communicator& c, int r, std::vector<float>& in, std::vector<float>& out) {
         out = in;
         if (r == 0) c.send(0, in.data(), m, 2);
         if (r == 2) c.recv(2, out.data(), m, 0);
       }, [](const CopyRecord& c) { return std::vector<int>{c.by, 0}; }, 1,
       [](int r, int64_t i) { return static_cast<float>(r == 2 ? i : (r + 1) * i + r); }},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    Ranks g(n);
    std::vector<int64_t> post(n);
    std::vector<std::vector<float>> outs(n);
    g.run([&](int r) {
      FakeBackend& be = *g.fakes[r];
      std::vector<float> in(m);
      for (int64_t i = 0; i < m; ++i) in[i] = static_cast<float>((r + 1) * i + r);
      be.relu_forward(1, nullptr, nullptr);  // what wrote its buffers
      post[r] = be.queued();
      k.call(*g.comm, r, in, outs[r]);
    });
    for (int r = 0; r < n; ++r)
      for (std::size_t i = 0; i < outs[r].size(); ++i)
        EXPECT_EQ(outs[r][i], k.expect(r, static_cast<int64_t>(i))) << "rank " << r << " [" << i << "]";
    expect_copies(g.log.take(), post, k.owners, k.copies);
  }
}

}  // namespace
}  // namespace pb
