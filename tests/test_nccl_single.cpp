// NCCL with a single rank, forced (Auto would give one rank the no-op communicator): the only
// way NCCL runs on a one-GPU machine. Init, every collective, destroy, and init again.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <vector>

#include "engine/check.h"
#include "engine/comm.h"
#include "engine/tensor.h"
#include "tests/gpu_skip.h"

namespace pb {
namespace {

#ifdef PARBENCH_HAVE_NCCL
std::vector<float> ramp(int64_t n, float base) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = base + static_cast<float>(i % 13);
  return v;
}
#endif

TEST(NcclSingleGpu, CollectivesLeaveTheOneRanksDataAndTearDown) {
  PB_REQUIRE_GPU();
#ifndef PARBENCH_HAVE_NCCL
  GTEST_SKIP() << "built without NCCL";
#else
  auto be = make_backend(cuda(0));
  for (int round = 0; round < 2; ++round) {  // a second communicator after the first is destroyed
    SCOPED_TRACE(fmt::format("communicator {}", round));
    auto comm = make_communicator({be.get()}, CommKind::Nccl);
    ASSERT_EQ(comm->name(), "nccl");
    ASSERT_EQ(comm->size(), 1);
    const int64_t len = 4099;
    const auto a = ramp(len, 1), b = ramp(len, 100);

    // With one rank, the sum over ranks is the rank's own data.
    Tensor t = Tensor::from_host({len}, a, comm->device(0));
    comm->all_reduce(0, t.data(), len);
    EXPECT_EQ(t.to_host(), a) << "all_reduce";
    comm->all_reduce_start(0, t.data(), 2000);
    comm->all_reduce_start(0, t.data() + 2000, len - 2000);
    comm->wait(0);
    EXPECT_EQ(t.to_host(), a) << "all_reduce_start + wait";

    Tensor u = Tensor::from_host({len}, b, comm->device(0));
    comm->broadcast(0, u.data(), len, 0);
    EXPECT_EQ(u.to_host(), b) << "broadcast";
    comm->reduce(0, u.data(), len, 0);
    EXPECT_EQ(u.to_host(), b) << "reduce";
    // Send and recv to oneself are refused up front: they are two separate calls here, and a
    // lone ncclSend to self outside a group would never complete.
    EXPECT_THROW(comm->send(0, u.data(), len, 0), Error);
    EXPECT_THROW(comm->recv(0, u.data(), len, 0), Error);
    EXPECT_EQ(comm->stats(0).calls, 7) << "all_reduce counts as start + wait";
    EXPECT_EQ(comm->stats(0).bytes, 0u) << "one rank moves nothing";
  }
#endif
}

}  // namespace
}  // namespace pb
