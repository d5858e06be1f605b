// The communicators' bf16 payloads and bf16 wire (docs/bf16.md): sums rounded to bf16 at every
// partial sum in rank order (in process), fp32 buffers rounded, reduced and widened, bytes halved.
#include "tests/support.h"
#include "tests/test_comm_support.h"

namespace pb::comm_test {
namespace {

// Values over several binades, so that partial sums round differently from the exact sum.
std::vector<float> bf16_values(test::Rand& r, int64_t n) {
  std::vector<float> v = r.vec(n);
  for (int64_t i = 0; i < n; ++i) v[i] = round_bf16(v[i] * static_cast<float>(1 << (i % 9)));
  return v;
}

// The reference of a bf16 sum: rank 0's value, then each next rank added in fp32 and rounded.
std::vector<float> ring_sum(const std::vector<std::vector<float>>& in) {
  std::vector<float> s = in[0];
  for (std::size_t k = 1; k < in.size(); ++k)
    for (std::size_t i = 0; i < s.size(); ++i) s[i] = round_bf16(s[i] + in[k][i]);
  return s;
}

std::vector<Bf16> to_bf16s(const std::vector<float>& v) {
  std::vector<Bf16> b(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) b[i] = to_bf16(v[i]);
  return b;
}

std::vector<std::vector<float>> inputs(test::Rand& r, int ranks, int64_t n) {
  std::vector<std::vector<float>> in;
  for (int k = 0; k < ranks; ++k) in.push_back(bf16_values(r, n));
  return in;
}

// How many elements of the rank-order rounded sum differ from the exact sum rounded once: the
// test's values make it several, so a sum rounded only at the end would fail the exact checks.
int rounded_differently(const std::vector<std::vector<float>>& in, const std::vector<float>& want) {
  int d = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    double exact = 0;
    for (const auto& v : in) exact += v[i];
    d += round_bf16(static_cast<float>(exact)) != want[i];
  }
  return d;
}

TEST(CommBf16, AllReduceRoundsEveryPartialSumInRankOrder) {
  test::Rand r;
  for (int ranks = 1; ranks <= 4; ++ranks) {
    SCOPED_TRACE(fmt::format("{} ranks, seed {}", ranks, r.seed));
    const int64_t n = 1000;
    const auto in = inputs(r, ranks, n);
    const std::vector<float> want = ring_sum(in);
    if (ranks >= 3) {
      EXPECT_GT(rounded_differently(in, want), 0);
    }
    Group g(cpus(ranks));
    std::vector<std::vector<Bf16>> buf(ranks);
    for (int k = 0; k < ranks; ++k) buf[k] = to_bf16s(in[k]);
    g.run([&](int k) { g.comm->all_reduce(k, buf[k].data(), n); });
    for (int k = 0; k < ranks; ++k)
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(from_bf16(buf[k][i]), want[i]) << "rank " << k << " [" << i << "]";
    for (int k = 0; k < ranks; ++k) EXPECT_EQ(g.comm->stats(k).bytes, ranks > 1 ? n * 2u : 0u);
  }
}

// fp32 buffers on a bf16 wire: each rank's values rounded to bf16, summed as above, widened; the
// bytes booked are the bf16 payload, half the fp32 call's.
TEST(CommBf16, FloatBuffersOnABf16WireAreRoundedSummedAndWidened) {
  test::Rand r;
  for (int ranks = 1; ranks <= 4; ++ranks) {
    SCOPED_TRACE(fmt::format("{} ranks, seed {}", ranks, r.seed));
    const int64_t n = 600;  // two buckets of 250 and one of 100, started before one wait
    std::vector<std::vector<float>> in;
    for (int k = 0; k < ranks; ++k) in.push_back(r.vec(n));  // fp32 values, not bf16 ones
    std::vector<std::vector<float>> rounded = in;
    for (auto& v : rounded)
      for (float& x : v) x = round_bf16(x);
    const std::vector<float> want = ring_sum(rounded);
    for (DType wire : {DType::F32, DType::Bf16}) {
      Group g(cpus(ranks));
      std::vector<std::vector<float>> buf = in;
      g.run([&](int k) {
        for (int64_t at : {0, 250, 500}) g.comm->all_reduce_start(k, buf[k].data() + at, at == 500 ? 100 : 250, wire);
        g.comm->wait(k);
      });
      for (int k = 0; k < ranks; ++k) {
        EXPECT_EQ(g.comm->stats(k).bytes, ranks > 1 ? n * dtype_size(wire) : 0u);
        if (wire == DType::F32) continue;
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(buf[k][i], want[i]) << "rank " << k << " [" << i << "]";
      }
    }
  }
}

TEST(CommBf16, ReduceScatterGatherAndReduceOnABf16Wire) {
  test::Rand r;
  for (int ranks = 2; ranks <= 4; ++ranks) {
    SCOPED_TRACE(fmt::format("{} ranks, seed {}", ranks, r.seed));
    const int64_t n = 300;  // per rank
    std::vector<std::vector<float>> in, rounded;
    for (int k = 0; k < ranks; ++k) in.push_back(r.vec(n * ranks));
    rounded = in;
    for (auto& v : rounded)
      for (float& x : v) x = round_bf16(x);
    const std::vector<float> sum = ring_sum(rounded);
    Group g(cpus(ranks));
    std::vector<std::vector<float>> piece(ranks, std::vector<float>(n)), gathered(ranks, std::vector<float>(n * ranks));
    std::vector<std::vector<float>> reduced = in;
    g.run([&](int k) {
      g.comm->reduce_scatter(k, in[k].data(), piece[k].data(), n, DType::Bf16);
      g.comm->all_gather(k, piece[k].data(), gathered[k].data(), n, DType::Bf16);
      g.comm->reduce(k, reduced[k].data(), n * ranks, ranks - 1, DType::Bf16);
    });
    for (int k = 0; k < ranks; ++k) {
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(piece[k][i], sum[k * n + i]) << "rank " << k << " piece [" << i << "]";
      // The pieces are bf16 values already: gathering them in bf16 is exact.
      for (int64_t i = 0; i < n * ranks; ++i) ASSERT_EQ(gathered[k][i], sum[i]) << "rank " << k << " gathered [" << i << "]";
      if (k == ranks - 1)
        for (int64_t i = 0; i < n * ranks; ++i) ASSERT_EQ(reduced[k][i], sum[i]) << "root [" << i << "]";
      else
        EXPECT_EQ(reduced[k], in[k]) << "a reduce leaves the others' buffers as they were";
      const CommStats& s = g.comm->stats(k);
      const std::size_t whole = static_cast<std::size_t>(n * ranks) * 2;  // bytes of the bf16 payload
      EXPECT_EQ(s.kinds[static_cast<int>(CollKind::ReduceScatter)].bytes, whole);
      EXPECT_EQ(s.kinds[static_cast<int>(CollKind::AllGather)].bytes, whole);
      EXPECT_EQ(s.kinds[static_cast<int>(CollKind::Reduce)].bytes, whole);
    }
  }
}

// The staging a bf16 wire uses is kept: after the first call, the same calls allocate nothing.
TEST(CommBf16, WireStagingIsReused) {
  Group g(cpus(2));
  std::vector<std::vector<float>> buf(2, std::vector<float>(512, 1.0f));
  auto step = [&] {
    g.run([&](int k) {
      g.comm->all_reduce_start(k, buf[k].data(), 256, DType::Bf16);
      g.comm->all_reduce_start(k, buf[k].data() + 256, 256, DType::Bf16);
      g.comm->wait(k);
    });
  };
  step();
  const std::size_t before = allocator_for(cpu(0)).allocations() + allocator_for(cpu(1)).allocations();
  step();
  EXPECT_EQ(allocator_for(cpu(0)).allocations() + allocator_for(cpu(1)).allocations(), before);
  EXPECT_EQ(buf[0][0], 4.0f);  // 1 + 1, twice
}

// Point-to-point on a bf16 wire (a pipeline's activations under --precision bf16): the sender
// rounds to nearest even, the receiver widens; blocking and started forms, both directions, the
// sender booking 2 bytes a value; the staging kept from the first round on.
TEST(CommBf16, SendAndRecvOnABf16WireRoundToNearestEven) {
  test::Rand r;
  SCOPED_TRACE(fmt::format("seed {}", r.seed));
  const int64_t n = 999, m = 300;
  std::vector<float> x = r.vec(n), dy = r.vec(m);
  x[0] = 1.0f + std::ldexp(1.0f, -8);      // a tie: to 1 (even)
  x[1] = 1.0f + 3 * std::ldexp(1.0f, -8);  // a tie: to 1 + 2^-6 (even)
  Group g(cpus(2));
  std::vector<float> got_x(n), got_x2(n), got_dy(m);
  auto round = [&] {
    g.run([&](int k) {
      if (k == 0) {
        g.comm->send(0, x.data(), n, 1, DType::Bf16);
        const int64_t s = g.comm->send_start(0, x.data(), n, 1, DType::Bf16);
        const int64_t q = g.comm->recv_start(0, got_dy.data(), m, 1, DType::Bf16);
        g.comm->wait_transfer(0, q);
        g.comm->wait_transfer(0, s);
      } else {
        g.comm->recv(1, got_x.data(), n, 0, DType::Bf16);
        const int64_t q = g.comm->recv_start(1, got_x2.data(), n, 0, DType::Bf16);
        const int64_t s = g.comm->send_start(1, dy.data(), m, 0, DType::Bf16);
        g.comm->wait_transfer(1, s);
        g.comm->wait_transfer(1, q);
      }
    });
  };
  round();
  EXPECT_EQ(got_x[0], 1.0f);
  EXPECT_EQ(got_x[1], 1.0f + std::ldexp(1.0f, -6));
  int changed = 0;
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(got_x[i], round_bf16(x[i])) << i;
    ASSERT_EQ(got_x2[i], round_bf16(x[i])) << i;
    changed += got_x[i] != x[i];
  }
  EXPECT_GT(changed, n / 2);  // the values were not bf16 ones: the wire rounded them
  for (int64_t i = 0; i < m; ++i) ASSERT_EQ(got_dy[i], round_bf16(dy[i])) << i;
  EXPECT_EQ(g.comm->stats(0).kinds[static_cast<int>(CollKind::SendRecv)].bytes, static_cast<std::size_t>(4 * n));
  EXPECT_EQ(g.comm->stats(1).kinds[static_cast<int>(CollKind::SendRecv)].bytes, static_cast<std::size_t>(2 * m));
  const std::size_t before = allocator_for(cpu(0)).allocations() + allocator_for(cpu(1)).allocations();
  round();
  EXPECT_EQ(allocator_for(cpu(0)).allocations() + allocator_for(cpu(1)).allocations(), before);
}

// Both sides name the wire: a receive in fp32 of a bf16 send is refused, naming both.
TEST(CommBf16, TransfersOfDifferentDtypesAreRefused) {
  Group g(cpus(2));
  std::vector<float> buf(16, 1.0f);
  EXPECT_THAT([&] {
    g.run([&](int k) {
      const int64_t id = k == 0 ? g.comm->send_start(0, buf.data(), 16, 1, DType::Bf16)
                                : g.comm->recv_start(1, buf.data(), 16, 0, DType::F32);
      g.comm->wait_transfer(k, id);
    });
  }, testing::ThrowsMessage<Error>(HasSubstr("rank 1 receives 16 values in fp32 but rank 0 sends 16 in bf16")));
}

// On GPUs: the wire's rounding and widening are CUDA kernels and its staging device memory.
// A ring of bf16 transfers delivers each rank's values rounded. In-process ranks sharing a GPU
// sum in rank order as on the CPU (bit for bit); NCCL in its own order, each partial sum rounded:
// within (N-1) 2^-8 sum|x| of the exact sum, a bf16 value.
TEST(CommBf16, OnGpusInProcessAndNccl) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  test::Rand r;
  const int64_t n = 3001;
  for (bool nccl : {false, true}) {
    const int ranks = nccl ? std::min(4, cuda_device_count()) : 3;
#ifndef PARBENCH_HAVE_NCCL
    if (nccl) GTEST_SKIP() << "built without NCCL";
#endif
    if (nccl && ranks < 2) GTEST_SKIP() << "NCCL needs 2 GPUs";
    SCOPED_TRACE(fmt::format("{} ranks, {}, seed {}", ranks, nccl ? "nccl" : "in process", r.seed));
    std::vector<Device> devs;
    for (int k = 0; k < ranks; ++k) devs.push_back(cuda(nccl ? k : 0));
    Group g(devs, nccl ? CommKind::Nccl : CommKind::InProcess);
    std::vector<std::vector<float>> in;
    for (int k = 0; k < ranks; ++k) in.push_back(r.vec(n));
    std::vector<std::vector<float>> rounded = in, got(ranks);
    for (auto& v : rounded)
      for (float& x : v) x = round_bf16(x);
    const std::vector<float> want = ring_sum(rounded);
    std::vector<std::vector<float>> passed(ranks);  // a ring of bf16 transfers: from the rank before
    g.run([&](int k) {
      Tensor t = Tensor::from_host({n}, in[k], g.comm->device(k)), r = Tensor::empty({n}, g.comm->device(k));
      g.comm->group_start(k);
      const int64_t s = g.comm->send_start(k, t.data(), n, (k + 1) % ranks, DType::Bf16);
      const int64_t q = g.comm->recv_start(k, r.data(), n, (k + ranks - 1) % ranks, DType::Bf16);
      g.comm->group_end(k);
      g.comm->wait_transfer(k, q);
      g.comm->wait_transfer(k, s);
      passed[k] = r.to_host();
      g.comm->all_reduce_start(k, t.data(), 1000, DType::Bf16);
      g.comm->all_reduce_start(k, t.data() + 1000, n - 1000, DType::Bf16);
      g.comm->wait(k);
      got[k] = t.to_host();
    });
    for (int k = 0; k < ranks; ++k)
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(passed[k][i], rounded[(k + ranks - 1) % ranks][i]) << "rank " << k << " [" << i << "]";
    for (int k = 0; k < ranks; ++k) {
      EXPECT_EQ(g.comm->stats(k).bytes, static_cast<std::size_t>(n) * 4);  // the send and the all-reduce, in bf16
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(got[k][i], round_bf16(got[k][i])) << "rank " << k << " [" << i << "] is not a bf16 value";
        if (!nccl) {
          ASSERT_EQ(got[k][i], want[i]) << "rank " << k << " [" << i << "]";
        }
        double exact = 0, mag = 0;
        for (const auto& v : rounded) exact += v[i], mag += std::abs(v[i]);
        ASSERT_LE(std::abs(got[k][i] - exact), (ranks - 1) * std::ldexp(mag, -8)) << "rank " << k << " [" << i << "]";
      }
    }
  }
}

}  // namespace
}  // namespace pb::comm_test
