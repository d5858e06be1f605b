// NCCL collectives and the in-process communicator on GPU buffers, on distinct GPUs and on one
// shared GPU; skip without a CUDA device.
#include "tests/test_comm_support.h"

namespace pb {
namespace {

using namespace pb::comm_test;

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
