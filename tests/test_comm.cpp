// Communicator collectives on small integers (exact in float), for 1 to 4 ranks, each rank on
// its own thread; the NCCL and shared-GPU variants skip without a CUDA device.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "engine/check.h"
#include "engine/comm.h"
#include "engine/tensor.h"
#include "strategies/pool.h"

namespace pb {
namespace {

using ::testing::HasSubstr;

// Ranks on the given devices, each with its own backend and thread.
struct Group {
  explicit Group(const std::vector<Device>& devs, CommKind kind = CommKind::InProcess) {
    BackendOptions bo;
    bo.threads = 1;
    for (const Device& d : devs) backends.push_back(make_backend(d, bo));
    std::vector<Backend*> raw;
    for (auto& b : backends) raw.push_back(b.get());
    comm = make_communicator(raw, kind);
  }
  // fn(rank) on one thread per rank; the first failure is rethrown after all joined.
  void run(const std::function<void(int)>& fn) {
    WorkerPool pool(comm->size());
    pool.run(comm->size(), fn, [&] { comm->abort(); });
  }
  std::vector<std::unique_ptr<Backend>> backends;
  std::unique_ptr<Communicator> comm;
};

std::vector<Device> cpus(int n) {
  std::vector<Device> d;
  for (int i = 0; i < n; ++i) d.push_back(cpu(i));
  return d;
}

float value(int rank, int64_t i) { return static_cast<float>((rank + 1) * (i % 7) + rank); }
float sum_over_ranks(int n, int64_t i) {
  float s = 0;
  for (int r = 0; r < n; ++r) s += value(r, i);
  return s;
}
std::vector<float> rank_values(int rank, int64_t n) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = value(rank, i);
  return v;
}

// Runs `body` for 1..4 in-process ranks on CPU, plus the automatic (no-op) communicator for 1.
void for_each_group(const std::function<void(Group&)>& body) {
  for (int n = 1; n <= 4; ++n) {
    SCOPED_TRACE(fmt::format("{} ranks", n));
    Group g(cpus(n));
    body(g);
  }
  SCOPED_TRACE("1 rank, no-op communicator");
  Group solo(cpus(1), CommKind::Auto);
  EXPECT_EQ(solo.comm->name(), "none");
  body(solo);
}

TEST(Comm, AllReduceSums) {
  for_each_group([](Group& g) {
    const int n = g.comm->size();
    const int64_t len = 1001;  // not a multiple of the rank count: uneven slices
    std::vector<std::vector<float>> out(n);
    g.run([&](int r) {
      Tensor t = Tensor::from_host({len}, rank_values(r, len), g.comm->device(r));
      g.comm->all_reduce(r, t.data(), len);
      out[r] = t.to_host();
    });
    for (int r = 0; r < n; ++r)
      for (int64_t i = 0; i < len; ++i) ASSERT_EQ(out[r][i], sum_over_ranks(n, i)) << "rank " << r << " [" << i << "]";
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(g.comm->stats(r).bytes, n > 1 ? static_cast<std::size_t>(len) * sizeof(float) : 0);
      EXPECT_EQ(g.comm->stats(r).calls, 2);  // start + wait
    }
  });
}

TEST(Comm, AllReduceInBucketsStartedBeforeWaiting) {
  for_each_group([](Group& g) {
    const int n = g.comm->size();
    const int64_t len = 1000;
    const int64_t cuts[] = {700, 300, 0};  // the order backward finishes them: last layers first
    std::vector<std::vector<float>> out(n);
    g.run([&](int r) {
      Tensor t = Tensor::from_host({len}, rank_values(r, len), g.comm->device(r));
      int64_t end = len;
      for (int64_t begin : cuts) {
        g.comm->all_reduce_start(r, t.data() + begin, end - begin);
        end = begin;
      }
      g.comm->wait(r);
      out[r] = t.to_host();
    });
    for (int r = 0; r < n; ++r)
      for (int64_t i = 0; i < len; ++i) ASSERT_EQ(out[r][i], sum_over_ranks(n, i)) << "rank " << r << " [" << i << "]";
  });
}

TEST(Comm, BroadcastFromEveryRoot) {
  for_each_group([](Group& g) {
    const int n = g.comm->size();
    const int64_t len = 37;
    for (int root = 0; root < n; ++root) {
      std::vector<std::vector<float>> out(n);
      g.run([&](int r) {
        Tensor t = Tensor::from_host({len}, rank_values(r, len), g.comm->device(r));
        g.comm->broadcast(r, t.data(), len, root);
        out[r] = t.to_host();
      });
      for (int r = 0; r < n; ++r) EXPECT_EQ(out[r], rank_values(root, len)) << "root " << root << ", rank " << r;
    }
  });
}

TEST(Comm, ReduceToEveryRoot) {
  for_each_group([](Group& g) {
    const int n = g.comm->size();
    const int64_t len = 53;
    for (int root = 0; root < n; ++root) {
      std::vector<std::vector<float>> out(n);
      g.run([&](int r) {
        Tensor t = Tensor::from_host({len}, rank_values(r, len), g.comm->device(r));
        g.comm->reduce(r, t.data(), len, root);
        out[r] = t.to_host();
      });
      for (int r = 0; r < n; ++r) {
        if (r != root) {
          EXPECT_EQ(out[r], rank_values(r, len)) << "non-root rank " << r << " keeps its values";
          continue;
        }
        for (int64_t i = 0; i < len; ++i) ASSERT_EQ(out[r][i], sum_over_ranks(n, i)) << "root " << root << " [" << i << "]";
      }
    }
  });
}

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

TEST(Comm, AllReduceWaitsForEveryRank) {
  for_each_group([](Group& g) {
    const int n = g.comm->size();
    std::atomic<int> arrived{0};
    std::vector<int> seen(n);
    g.run([&](int r) {
      if (r == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the late one
      arrived.fetch_add(1);
      float one = 1;
      g.comm->all_reduce(r, &one, 1);
      seen[r] = arrived.load();
    });
    for (int r = 0; r < n; ++r) EXPECT_EQ(seen[r], n) << "rank " << r;
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

TEST(Comm, AllGatherPlacesEachRanksPieceInRankOrder) {
  for_each_group([](Group& g) {
    const int n = g.comm->size();
    for (int64_t len : {int64_t{1}, int64_t{13}}) {
      std::vector<std::vector<float>> out(n), in_place(n);
      g.run([&](int r) {
        Tensor mine = Tensor::from_host({len}, rank_values(r, len), g.comm->device(r));
        Tensor all = Tensor::zeros({n * len}, g.comm->device(r));
        g.comm->all_gather(r, mine.data(), all.data(), len);
        out[r] = all.to_host();
        // The piece already in its slot of the gathered buffer (how fsdp gathers a shard).
        Tensor again = Tensor::zeros({n * len}, g.comm->device(r));
        again.copy_from_host(rank_values(r, len).data(), len, r * len);
        g.comm->all_gather(r, again.data() + r * len, again.data(), len);
        in_place[r] = again.to_host();
      });
      std::vector<float> want;
      for (int k = 0; k < n; ++k)
        for (float v : rank_values(k, len)) want.push_back(v);
      for (int r = 0; r < n; ++r) {
        EXPECT_EQ(out[r], want) << "rank " << r << ", " << len << " per rank";
        EXPECT_EQ(in_place[r], want) << "in place, rank " << r << ", " << len << " per rank";
        // nccl-tests' size: the gathered buffer, per call.
        EXPECT_EQ(g.comm->stats(r).bytes, n > 1 ? 2 * static_cast<std::size_t>(n * len) * sizeof(float) : 0);
      }
      for (int r = 0; r < n; ++r) g.comm->reset_stats(r);
    }
  });
}

TEST(Comm, ReduceScatterGivesEachRankTheSumOfItsPiece) {
  for_each_group([](Group& g) {
    const int n = g.comm->size();
    const int64_t len = 11;  // per rank; uneven shards are padded to equal pieces by the caller
    std::vector<std::vector<float>> out(n);
    std::vector<std::vector<float>> reduced(n);
    std::vector<std::size_t> booked(n);
    g.run([&](int r) {
      Tensor all = Tensor::from_host({n * len}, rank_values(r, n * len), g.comm->device(r));
      Tensor piece = Tensor::zeros({len}, g.comm->device(r));
      g.comm->reduce_scatter(r, all.data(), piece.data(), len);
      out[r] = piece.to_host();
      booked[r] = g.comm->stats(r).bytes;
      g.comm->all_reduce(r, all.data(), n * len);  // the same sums, bit for bit
      reduced[r] = all.to_host();
    });
    for (int r = 0; r < n; ++r) {
      for (int64_t i = 0; i < len; ++i) {
        ASSERT_EQ(out[r][i], sum_over_ranks(n, r * len + i)) << "rank " << r << " [" << i << "]";
        ASSERT_EQ(out[r][i], reduced[r][r * len + i]) << "rank " << r << " [" << i << "]";
      }
      EXPECT_EQ(booked[r], n > 1 ? static_cast<std::size_t>(n * len) * sizeof(float) : 0);  // the whole input
    }
  });
}

TEST(Comm, RejectsBadArguments) {
  Group g(cpus(2));
  EXPECT_THROW(g.comm->broadcast(0, nullptr, 4, 2), Error);  // no root 2
  EXPECT_THROW(g.comm->send(0, nullptr, 4, 0), Error);       // to itself
  EXPECT_THROW(g.comm->all_reduce(3, nullptr, 4), Error);    // no rank 3
  EXPECT_THROW(g.comm->all_gather(0, nullptr, nullptr, -1), Error);
  EXPECT_THROW(g.comm->reduce_scatter(2, nullptr, nullptr, 4), Error);
}

TEST(Comm, FailingRankAbortsTheOthers) {
  // Without abort, ranks 0 and 1 would wait in the all-reduce forever for rank 2.
  Group g(cpus(3));
  float v[3] = {1, 2, 3};
  try {
    g.run([&](int r) {
      if (r == 2) throw UsageError("rank 2 failed");
      g.comm->all_reduce(r, &v[r], 1);
    });
    FAIL() << "no exception";
  } catch (const UsageError& e) {
    EXPECT_THAT(e.what(), HasSubstr("rank 2 failed"));  // the cause, not the aborts it triggered
  }
  EXPECT_THROW(g.comm->all_reduce(0, &v[0], 1), Error);
}

TEST(Comm, NcclAllReduceBroadcastSendRecvOnGpus) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
#ifndef PARBENCH_HAVE_NCCL
  GTEST_SKIP() << "built without NCCL";
#else
  const int n = std::min(4, cuda_device_count());
  std::vector<Device> devs;
  for (int i = 0; i < n; ++i) devs.push_back(cuda(i));
  Group g(devs, n == 1 ? CommKind::Auto : CommKind::Nccl);
  EXPECT_EQ(g.comm->name(), n == 1 ? "none" : "nccl");
  const int64_t len = 4099;
  std::vector<std::vector<float>> sum(n), bc(n), chain(n), below(n), above(n);
  g.run([&](int r) {
    Tensor t = Tensor::from_host({len}, rank_values(r, len), g.comm->device(r));
    g.comm->all_reduce_start(r, t.data(), 2000);
    g.comm->all_reduce_start(r, t.data() + 2000, len - 2000);
    g.comm->wait(r);
    sum[r] = t.to_host();
    Tensor b = Tensor::from_host({len}, rank_values(r, len), g.comm->device(r));
    g.comm->broadcast(r, b.data(), len, n - 1);
    bc[r] = b.to_host();
    Tensor c = Tensor::from_host({len}, rank_values(r, len), g.comm->device(r));
    if (r > 0) g.comm->recv(r, c.data(), len, r - 1);
    if (r + 1 < n) g.comm->send(r, c.data(), len, r + 1);
    chain[r] = c.to_host();
    // Non-blocking, both directions at once: activations up the chain, gradients down.
    Tensor up = Tensor::from_host({len}, rank_values(r, len), g.comm->device(r));
    Tensor down = Tensor::from_host({len}, rank_values(r, len), g.comm->device(r));
    Tensor from_below = Tensor::zeros({len}, g.comm->device(r)), from_above = Tensor::zeros({len}, g.comm->device(r));
    // One group: NCCL runs a rank's transfers in the order started, and each send here waits for
    // a receive its peer starts after its own send.
    std::vector<int64_t> ids;
    g.comm->group_start(r);
    if (r + 1 < n) ids.push_back(g.comm->send_start(r, up.data(), len, r + 1));
    if (r > 0) ids.push_back(g.comm->send_start(r, down.data(), len, r - 1));
    if (r > 0) ids.push_back(g.comm->recv_start(r, from_below.data(), len, r - 1));
    if (r + 1 < n) ids.push_back(g.comm->recv_start(r, from_above.data(), len, r + 1));
    g.comm->group_end(r);
    for (int64_t id : ids) g.comm->wait_transfer(r, id);
    below[r] = from_below.to_host();
    above[r] = from_above.to_host();
    Tensor z = Tensor::zeros({1}, g.comm->device(r));  // every rank done before any frees its buffers
    g.comm->all_reduce(r, z.data(), 1);
    (void)z.to_host();
  });
  for (int r = 0; r < n; ++r) {
    for (int64_t i = 0; i < len; ++i) ASSERT_EQ(sum[r][i], sum_over_ranks(n, i)) << "rank " << r << " [" << i << "]";
    EXPECT_EQ(bc[r], rank_values(n - 1, len));
    EXPECT_EQ(chain[r], rank_values(0, len));
    if (r > 0) {
      EXPECT_EQ(below[r], rank_values(r - 1, len));
    }
    if (r + 1 < n) {
      EXPECT_EQ(above[r], rank_values(r + 1, len));
    }
  }
#endif
}

// all_gather (also in place) and reduce_scatter on GPU buffers: NCCL on distinct GPUs, and the
// in-process communicator's host staging for ranks sharing one.
TEST(Comm, AllGatherAndReduceScatterOnGpus) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  std::vector<std::pair<std::vector<Device>, CommKind>> groups = {{{cuda(0), cuda(0), cuda(0)}, CommKind::InProcess}};
#ifdef PARBENCH_HAVE_NCCL
  if (cuda_device_count() >= 2) {
    std::vector<Device> devs;
    for (int i = 0; i < std::min(4, cuda_device_count()); ++i) devs.push_back(cuda(i));
    groups.push_back({devs, CommKind::Nccl});
  }
#endif
  for (const auto& [devs, kind] : groups) {
    Group g(devs, kind);
    SCOPED_TRACE(g.comm->name());
    const int n = g.comm->size();
    const int64_t len = 1025;
    std::vector<std::vector<float>> gathered(n), in_place(n), piece(n);
    g.run([&](int r) {
      Tensor mine = Tensor::from_host({len}, rank_values(r, len), g.comm->device(r));
      Tensor all = Tensor::zeros({n * len}, g.comm->device(r));
      g.comm->all_gather(r, mine.data(), all.data(), len);
      gathered[r] = all.to_host();
      Tensor again = Tensor::zeros({n * len}, g.comm->device(r));
      again.copy_from_host(rank_values(r, len).data(), len, r * len);
      g.comm->all_gather(r, again.data() + r * len, again.data(), len);
      in_place[r] = again.to_host();
      Tensor src = Tensor::from_host({n * len}, rank_values(r, n * len), g.comm->device(r));
      Tensor out = Tensor::zeros({len}, g.comm->device(r));
      g.comm->reduce_scatter(r, src.data(), out.data(), len);
      piece[r] = out.to_host();
      Tensor z = Tensor::zeros({1}, g.comm->device(r));  // every rank done before any frees its buffers
      g.comm->all_reduce(r, z.data(), 1);
      (void)z.to_host();
    });
    std::vector<float> want;
    for (int k = 0; k < n; ++k)
      for (float v : rank_values(k, len)) want.push_back(v);
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(gathered[r], want) << "rank " << r;
      EXPECT_EQ(in_place[r], want) << "in place, rank " << r;
      for (int64_t i = 0; i < len; ++i) ASSERT_EQ(piece[r][i], sum_over_ranks(n, r * len + i)) << "rank " << r << " [" << i << "]";
    }
  }
}

TEST(Comm, InProcessRanksSharingOneGpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  Group g({cuda(0), cuda(0), cuda(0)});
  EXPECT_EQ(g.comm->name(), "inproc");
  const int64_t len = 777;
  std::vector<std::vector<float>> sum(3), red(3);
  g.run([&](int r) {
    Tensor t = Tensor::from_host({len}, rank_values(r, len), g.comm->device(r));
    g.comm->all_reduce(r, t.data(), len);
    sum[r] = t.to_host();
    Tensor u = Tensor::from_host({len}, rank_values(r, len), g.comm->device(r));
    g.comm->reduce(r, u.data(), len, 1);
    red[r] = u.to_host();
  });
  for (int r = 0; r < 3; ++r)
    for (int64_t i = 0; i < len; ++i) ASSERT_EQ(sum[r][i], sum_over_ranks(3, i)) << "rank " << r << " [" << i << "]";
  EXPECT_EQ(red[1], sum[0]);
  EXPECT_EQ(red[0], rank_values(0, len));
}

}  // namespace
}  // namespace pb

namespace pb {
namespace {

// Ranks of other processes are null entries; outside an MPI job of that size no communicator
// can reach them, and an all-null rank list has no local rank at all.
TEST(Comm, RanksOfOtherProcessesNeedAnMpiJob) {
  BackendOptions bo;
  bo.threads = 1;
  auto b = make_backend(cpu(0), bo);
  EXPECT_THROW(make_communicator({b.get(), nullptr}), Error);
  EXPECT_THROW(make_communicator({nullptr, nullptr}), Error);
}

}  // namespace
}  // namespace pb
