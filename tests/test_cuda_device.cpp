// The CUDA build without a GPU and with one: counting GPUs, the system info, a missing GPU as an
// error; allocator accounting and out-of-memory reporting. GPU tests skip where there is no GPU
// or no CUDA build.
#include "tests/test_cuda_support.h"

namespace pb {
namespace {

using namespace pb::cuda_test;

// --- runs everywhere ---------------------------------------------------------------------

TEST(Cuda, GpuCountNeverCrashes) {
  const int n = cuda_device_count();
  EXPECT_GE(n, 0);
#ifndef PARBENCH_HAVE_CUDA
  EXPECT_EQ(n, 0);
#endif
  EXPECT_EQ(cuda_device_count(), n) << "the count is stable";
}

TEST(Cuda, SystemInfoListsTheBuildAndEveryGpu) {
  const SystemInfo info = system_info(CudaInfo::Always);
  EXPECT_EQ(static_cast<int>(info.gpus.size()), cuda_device_count());
#ifdef PARBENCH_HAVE_CUDA
  EXPECT_TRUE(info.cuda_built);
  EXPECT_FALSE(info.cuda_module.empty()) << info.cuda_note;
  EXPECT_GT(info.cuda_runtime_version, 0);
  EXPECT_GE(info.cudnn_version, 90000) << "cuDNN 9 or later";
  if (info.gpus.empty()) {
    EXPECT_FALSE(info.cuda_note.empty()) << "says why there is no GPU";
  }
#else
  EXPECT_FALSE(info.cuda_built);
#endif
#ifdef PARBENCH_HAVE_NCCL
  EXPECT_TRUE(info.nccl_built);
  EXPECT_GT(info.nccl_version, 0);
#endif
  for (const GpuInfo& g : info.gpus) {
    EXPECT_FALSE(g.name.empty());
    EXPECT_GT(g.total_bytes, 0u);
    EXPECT_GE(g.cc_major, 1);
  }
  const std::string text = info.str();
  EXPECT_NE(text.find("cuda"), std::string::npos) << text;
}

TEST(Cuda, MissingGpuIsAnErrorNotACrash) {
  const Device missing = cuda(cuda_device_count());
  EXPECT_THROW(make_backend(missing), Error);
  EXPECT_THROW(allocator_for(missing), Error);
  EXPECT_THROW(Tensor::empty({4}, missing), Error);
}

TEST(CudaGpu, OutOfMemoryNamesTheDevice) {
  PB_REQUIRE_GPU();
  const std::size_t before = allocator_for(cuda()).current_bytes();
  const int64_t absurd = int64_t(1) << 38;  // floats: 1 TiB, several times any GPU's memory
  try {
    Tensor t = Tensor::empty({absurd}, cuda());
    FAIL() << "a 1 TiB allocation succeeded";
  } catch (const OutOfMemory& e) {
    EXPECT_EQ(e.device, "cuda:0");
    EXPECT_EQ(e.requested, static_cast<std::size_t>(absurd) * sizeof(float));
    EXPECT_GT(e.free_bytes, 0u);
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
  }
  EXPECT_EQ(allocator_for(cuda()).current_bytes(), before) << "a failed allocation is not counted";
  // The failure left no error behind: allocation, a kernel and its launch check still work.
  auto be = gpu_backend(Precision::Fp32);
  Tensor t = gpu(std::vector<float>(1000, -3.0f));
  be->relu_forward(1000, t.data(), t.data());
  be->synchronize();
  EXPECT_EQ(t.to_host(), std::vector<float>(1000, 0.0f));
}

TEST(CudaGpu, AllocatorCountsCurrentAndPeak) {
  PB_REQUIRE_GPU();
  Allocator& a = allocator_for(cuda());
  const std::size_t before = a.current_bytes();
  a.reset_peak();
  EXPECT_EQ(a.peak_bytes(), before);
  const std::size_t big = std::size_t(64) << 20;
  {
    Tensor t = Tensor::empty({static_cast<int64_t>(big / sizeof(float))}, cuda());
    Tensor u = Tensor::empty({1024}, cuda());
    EXPECT_EQ(a.current_bytes(), before + big + 4096);
    EXPECT_EQ(a.peak_bytes(), before + big + 4096);
  }
  EXPECT_EQ(a.current_bytes(), before);
  EXPECT_EQ(a.peak_bytes(), before + big + 4096) << "peak survives the release";
  a.reset_peak();
  EXPECT_EQ(a.peak_bytes(), before);
}

}  // namespace
}  // namespace pb
