// Strategies on GPUs against regular on a GPU; skip without a CUDA device.
#include "tests/test_strategies_support.h"

namespace pb {
namespace {

using namespace pb::strategies_test;

// On GPUs the reference is regular on a GPU, and cuDNN may pick other algorithms per chunk size:
// a looser tolerance.
TEST(Strategies, OnGpusMatchRegularOnAGpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const NetSpec net = small_great_net();
  StrategyOptions g = options(1);
  g.kind = DeviceKind::Cuda;
  const Trained ref = train("regular", g, net, {7});
  for (const char* s : {"dp", "ddp", "mp", "pipeline", "fsdp", "tp"}) {
    StrategyOptions o = g;
    o.devices = std::min(4, std::max(2, cuda_device_count()));
    o.oversubscribe = true;
    SCOPED_TRACE(fmt::format("{} on {} GPU workers", s, o.devices));
    const Trained r = train(s, o, net, {7});
    if (cuda_device_count() >= 2 && std::string(s) != "mp" && std::string(s) != "pipeline") {
#ifdef PARBENCH_HAVE_NCCL
      EXPECT_EQ(r.stats.communicator, "nccl");
#endif
    }
    expect_matches(r, ref, 1e-4, 1e-4, 1e-3);
  }
}

TEST(Strategies, OversubscribedWorkersShareAGpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  StrategyOptions o = options(cuda_device_count() + 1);
  o.kind = DeviceKind::Cuda;
  StrategyOptions g = o;
  g.devices = 1;
  EXPECT_THROW(make_strategy("ddp", o), UsageError);  // not without --oversubscribe
  o.oversubscribe = true;
  const Trained r = train("ddp", o, small_great_net(), {7});
  EXPECT_TRUE(r.stats.oversubscribed);
  EXPECT_EQ(r.stats.communicator, "inproc");  // NCCL cannot put two ranks on one GPU
  EXPECT_EQ(r.stats.workers.back().device, "cuda:0");
  expect_matches(r, train("regular", g, small_great_net(), {7}), 1e-4, 1e-4, 1e-3);
}

}  // namespace
}  // namespace pb
