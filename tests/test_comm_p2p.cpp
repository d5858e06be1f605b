// Point-to-point transfers between in-process ranks on CPU: blocking and started sends and
// receives, their order, running ahead of the receiver, abort, and misuse.
#include "tests/test_comm_support.h"

namespace pb {
namespace {

using namespace pb::comm_test;

TEST(Comm, SendRecvAlongAChainAndBack) {
  for_each_group([](Group& g) {
    const int n = g.comm->size();
    const int64_t len = 9;
    std::vector<std::vector<float>> forward(n), back(n);
    g.run([&](int r) {
      // Forward along 0 -> 1 -> ... adding the rank, then back the same way (a pipeline's pattern).
      Tensor t = Tensor::zeros({len}, g.comm->device(r));
      std::vector<float> v(len);
      if (r > 0) g.comm->recv(r, t.data(), len, r - 1);
      v = t.to_host();
      for (float& x : v) x += static_cast<float>(r + 1);
      t.copy_from_host(v.data(), len);
      forward[r] = v;
      if (r + 1 < n) g.comm->send(r, t.data(), len, r + 1);
      if (r + 1 < n) g.comm->recv(r, t.data(), len, r + 1);
      back[r] = t.to_host();
      if (r > 0) g.comm->send(r, t.data(), len, r - 1);
    });
    const float total = static_cast<float>(n * (n + 1) / 2);
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(forward[r], std::vector<float>(len, static_cast<float>((r + 1) * (r + 2) / 2))) << "rank " << r;
      EXPECT_EQ(back[r], std::vector<float>(len, total)) << "rank " << r;
    }
    if (n > 1) {
      EXPECT_EQ(g.comm->stats(0).bytes, len * sizeof(float));  // sent once; receiving counts nothing
      EXPECT_EQ(g.comm->stats(n - 1).bytes, len * sizeof(float));
    }
  });
}

// Message k of rank r to its next rank, distinct for every (r, k).
std::vector<float> message(int rank, int k, int64_t n) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(1000 * rank + 100 * k + i % 97);
  return v;
}

// Every rank sends K messages down a chain, all in flight at once: half of the receives are
// started before the matching sends exist, the other half after; waits run in reverse order.
// Messages match in start order, land in their own buffers, and the sender's bytes are counted.
TEST(Comm, NonBlockingTransfersInFlightMatchInOrder) {
  constexpr int K = 6;
  const int64_t len = 513;
  for (int n = 2; n <= 4; ++n) {
    SCOPED_TRACE(fmt::format("{} ranks", n));
    Group g(cpus(n));
    std::vector<std::vector<std::vector<float>>> got(n);
    std::vector<CommStats> stats(n);
    g.run([&](int r) {
      g.comm->reset_stats(r);
      std::vector<Tensor> out, in;
      std::vector<int64_t> ids;
      for (int k = 0; k < K; ++k) {
        out.push_back(Tensor::from_host({len}, message(r, k, len), g.comm->device(r)));
        in.push_back(Tensor::zeros({len}, g.comm->device(r)));
      }
      if (r > 0)
        for (int k = 0; k < K / 2; ++k) ids.push_back(g.comm->recv_start(r, in[k].data(), len, r - 1));
      if (r + 1 < n)
        for (int k = 0; k < K; ++k) ids.push_back(g.comm->send_start(r, out[k].data(), len, r + 1));
      if (r > 0)
        for (int k = K / 2; k < K; ++k) ids.push_back(g.comm->recv_start(r, in[k].data(), len, r - 1));
      for (auto it = ids.rbegin(); it != ids.rend(); ++it) g.comm->wait_transfer(r, *it);
      for (int k = 0; k < K; ++k) got[r].push_back(in[k].to_host());
      stats[r] = g.comm->stats(r);
    });
    for (int r = 1; r < n; ++r)
      for (int k = 0; k < K; ++k) EXPECT_EQ(got[r][k], message(r - 1, k, len)) << "rank " << r << " message " << k;
    for (int r = 0; r < n; ++r)
      EXPECT_EQ(stats[r].bytes, r + 1 < n ? K * len * sizeof(float) : 0u) << "rank " << r;
  }
}

// The exchange a 1F1B stage makes: rank 0 sends several activations before it receives the
// first gradient back. With blocking rendezvous sends this deadlocks (rank 0 waits for rank 1
// to take activation 1, rank 1 for rank 0 to take gradient 0); started sends do not.
TEST(Comm, NonBlockingSendsRunAheadOfTheReceiver) {
  Group g(cpus(2));
  constexpr int K = 4;
  const int64_t len = 64;
  std::vector<std::vector<float>> back(K);
  g.run([&](int r) {
    std::vector<Tensor> bufs;
    for (int k = 0; k < K; ++k) bufs.push_back(Tensor::from_host({len}, message(r, k, len), g.comm->device(r)));
    if (r == 0) {
      std::vector<int64_t> sends;
      for (int k = 0; k < K; ++k) sends.push_back(g.comm->send_start(0, bufs[k].data(), len, 1));
      std::vector<Tensor> grads;
      for (int k = 0; k < K; ++k) {
        grads.push_back(Tensor::zeros({len}, g.comm->device(0)));
        g.comm->wait_transfer(0, g.comm->recv_start(0, grads[k].data(), len, 1));
        back[k] = grads[k].to_host();
      }
      for (int64_t id : sends) g.comm->wait_transfer(0, id);
    } else {
      for (int k = 0; k < K; ++k) {
        Tensor x = Tensor::zeros({len}, g.comm->device(1));
        g.comm->wait_transfer(1, g.comm->recv_start(1, x.data(), len, 0));
        g.comm->wait_transfer(1, g.comm->send_start(1, x.data(), len, 0));  // echoed
      }
    }
  });
  for (int k = 0; k < K; ++k) EXPECT_EQ(back[k], message(0, k, len)) << "message " << k;
}

// A rank blocked waiting for a message that will never come wakes up when a peer fails.
TEST(Comm, AbortWakesARankWaitingForATransfer) {
  Group g(cpus(3));
  std::atomic<bool> waiting{false};
  float v[3] = {0, 0, 0};
  try {
    g.run([&](int r) {
      if (r == 2) {
        while (!waiting) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        std::this_thread::sleep_for(std::chrono::milliseconds(20));  // rank 1 is blocked by now
        throw UsageError("rank 2 failed");
      }
      if (r == 1) {
        const int64_t id = g.comm->recv_start(1, &v[1], 1, 2);
        waiting = true;
        g.comm->wait_transfer(1, id);
      }
    });
    FAIL() << "no exception";
  } catch (const UsageError& e) {
    EXPECT_THAT(e.what(), HasSubstr("rank 2 failed"));
  }
  EXPECT_THROW(g.comm->send_start(0, &v[0], 1, 1), Error);  // unusable afterwards
}

TEST(Comm, NonBlockingTransfersRejectMisuse) {
  {
    Group g(cpus(2));
    EXPECT_THROW(g.comm->send_start(0, nullptr, 4, 0), Error);  // to itself
    EXPECT_THROW(g.comm->recv_start(1, nullptr, 4, 2), Error);  // no rank 2
    EXPECT_THROW(g.comm->wait_transfer(0, 12345), Error);        // never started
  }
  Group g(cpus(2));
  float a[4] = {1, 2, 3, 4}, b[3] = {};
  try {
    g.run([&](int r) {
      if (r == 0) g.comm->wait_transfer(0, g.comm->send_start(0, a, 4, 1));
      else g.comm->wait_transfer(1, g.comm->recv_start(1, b, 3, 0));
    });
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("rank 1 receives 3 values but rank 0 sends 4"));
  }
}

}  // namespace
}  // namespace pb
