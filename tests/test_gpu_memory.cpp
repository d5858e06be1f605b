// GPU memory figures: this process's own use of the device, and the conv workspace's peak (an
// outgrown workspace freed once the stream is idle, not kept). Skip without a GPU.
#include <gtest/gtest.h>

#include "engine/backend.h"
#include "engine/tensor.h"
#include "tests/gpu_skip.h"
#include "tests/support.h"

namespace pb {
namespace {

TEST(GpuMemory, ProcessUseFollowsThisProcesssAllocations) {
  PB_REQUIRE_GPU();
  auto be = make_backend(cuda(0));
  const Allocator& a = allocator_for(cuda(0));
  const std::size_t before = a.process_used_bytes();
  const std::size_t gib = std::size_t(1) << 30;
  {
    Tensor t = Tensor::empty({static_cast<int64_t>(gib / sizeof(float))}, cuda(0));
    EXPECT_GE(a.process_used_bytes(), before + gib);
  }
  EXPECT_LT(a.process_used_bytes(), before + gib / 2) << "the freed GiB still counted";
}

// cuDNN's legacy search wants more workspace at batch 32 than at batch 1 for this shape (the graph
// API's engines for it took none at batch 1 on an H200, so the legacy API); the buffer of batch 1
// is outgrown. Grow-only kept it (current = peak); freed at synchronize, the current workspace
// is the last buffer alone, below the peak when both were alive.
TEST(GpuMemory, OutgrownConvWorkspaceIsFreedOnceTheStreamIsIdle) {
  PB_REQUIRE_GPU();
  test::ScopedEnv api("PARBENCH_CUDNN_API", "legacy");
  BackendOptions o;
  o.exhaustive_conv_search = true;
  auto be = make_backend(cuda(0), o);
  Allocator& a = allocator_for(cuda(0));
  auto run = [&](int64_t n) {
    ConvGeom g;
    g.n = n, g.c = 64, g.h = g.w = 56, g.k = 64, g.r = g.s = 3, g.pad_h = g.pad_w = 1;
    Tensor x = Tensor::zeros({n * g.c * g.h * g.w}, *be), w = Tensor::zeros({g.k * g.c * g.r * g.s}, *be);
    Tensor b = Tensor::zeros({g.k}, *be), y = Tensor::empty({n * g.k * g.p() * g.q()}, cuda(0));
    be->conv2d_forward(g, x.data(), w.data(), b.data(), y.data());
    be->synchronize();
  };
  run(1);
  const std::size_t first = a.current_bytes(MemoryPool::Workspace);
  a.reset_peak();
  run(32);
  const std::size_t peak = a.peak_bytes(MemoryPool::Workspace), now = a.current_bytes(MemoryPool::Workspace);
  if (first == 0 || peak == first) GTEST_SKIP() << "no workspace at batch 1, or no growth at 32: nothing outgrown";
  EXPECT_LT(now, peak) << "an outgrown workspace is still held";
}

}  // namespace
}  // namespace pb
