// Backend::fill_normal on a GPU: one hash per element in a grid-stride loop, the same function as
// the host's (engine/random_fill.h), so a CPU and a GPU profile compute on the same values.
#include "engine/cuda/cuda_random_fill.h"

#include <algorithm>

#include "engine/check.h"
#include "engine/random_fill.h"

namespace pb::cu {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 8192;  // enough to fill any current GPU several times over

__global__ void fill_normal_kernel(int64_t n, uint64_t seed, uint64_t offset, float scale, float* y) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = hashed_normal(seed, offset + static_cast<uint64_t>(i), scale);
}

}  // namespace

void launch_fill_normal(cudaStream_t stream, int64_t n, uint64_t seed, uint64_t offset, float scale, float* y) {
  if (n <= 0) return;
  const auto blocks = static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, kMaxBlocks));
  fill_normal_kernel<<<blocks, kThreads, 0, stream>>>(n, seed, offset, scale, y);
  CUDA_CHECK_LAST();
}

}  // namespace pb::cu
