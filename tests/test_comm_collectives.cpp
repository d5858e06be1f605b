// Communicator collectives on small integers (exact in float), for 1 to 4 ranks on CPU, each rank
// on its own thread: all-reduce, broadcast, reduce, all-gather, reduce-scatter, bad arguments,
// a failing rank, and ranks of other processes.
#include "tests/test_comm_support.h"

namespace pb {
namespace {

using namespace pb::comm_test;

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

// all_gather_start (the prefetching fsdp's): the same values as all_gather once waited for, booked
// as an all-gather (its bytes at the start, the wait's time under all_gather, not all_reduce).
TEST(Comm, StartedAllGatherCompletesAtTheWaitAsAnAllGather) {
  for_each_group([](Group& g) {
    const int n = g.comm->size();
    const int64_t len = 5;
    std::vector<std::vector<float>> out(n);
    g.run([&](int r) {
      Tensor mine = Tensor::from_host({len}, rank_values(r, len), g.comm->device(r));
      Tensor all = Tensor::zeros({n * len}, g.comm->device(r));
      g.comm->all_gather_start(r, mine.data(), all.data(), len);
      g.comm->wait(r);
      out[r] = all.to_host();
    });
    std::vector<float> want;
    for (int k = 0; k < n; ++k)
      for (float v : rank_values(k, len)) want.push_back(v);
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(out[r], want) << "rank " << r;
      const CommStats& st = g.comm->stats(r);
      const auto& ag = st.kinds[static_cast<int>(CollKind::AllGather)];
      EXPECT_EQ(ag.bytes, n > 1 ? static_cast<std::size_t>(n * len) * sizeof(float) : 0) << "rank " << r;
      EXPECT_EQ(ag.calls, n > 1 ? 1 : 0) << "rank " << r;
      EXPECT_EQ(st.kinds[static_cast<int>(CollKind::AllReduce)].seconds, 0.0) << "rank " << r << ": the wait booked as an all-reduce";
      g.comm->reset_stats(r);
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
  EXPECT_THROW(g.comm->all_reduce(3, static_cast<float*>(nullptr), 4), Error);    // no rank 3
  EXPECT_THROW(g.comm->all_gather(0, static_cast<const float*>(nullptr), static_cast<float*>(nullptr), -1), Error);
  EXPECT_THROW(g.comm->reduce_scatter(2, static_cast<const float*>(nullptr), static_cast<float*>(nullptr), 4), Error);
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
