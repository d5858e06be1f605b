// parbench's own bf16 kernels for the CUDA backend's autocast path: conversions, ReLU, bias
// broadcasts and fp32 bias-gradient sums, fp32 weight gradients from bf16 ones. Grid-stride loops.
#include <cuda_bf16.h>

#include <algorithm>

#include "engine/check.h"
#include "engine/cuda/cuda_bf16.h"

namespace pb::cu {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;
unsigned blocks_for(int64_t n) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((n + kThreads - 1) / kThreads, kMaxBlocks)));
}
using bf = __nv_bfloat16;
const bf* B(const Bf16* p) { return reinterpret_cast<const bf*>(p); }
bf* B(Bf16* p) { return reinterpret_cast<bf*>(p); }

#define PB_GRID_LOOP(i, n) \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); i += int64_t(blockDim.x) * gridDim.x)

__global__ void to_bf16_kernel(int64_t n, const float* x, bf* y) { PB_GRID_LOOP(i, n) y[i] = __float2bfloat16_rn(x[i]); }
__global__ void from_bf16_kernel(int64_t n, const bf* x, float* y) { PB_GRID_LOOP(i, n) y[i] = __bfloat162float(x[i]); }
__global__ void relu_kernel(int64_t n, const bf* x, bf* y) {
  PB_GRID_LOOP(i, n) y[i] = __bfloat162float(x[i]) > 0.0f ? x[i] : __float2bfloat16_rn(0.0f);
}
__global__ void relu_backward_kernel(int64_t n, const bf* y, const bf* dy, bf* dx) {
  PB_GRID_LOOP(i, n) dx[i] = __bfloat162float(y[i]) > 0.0f ? dy[i] : __float2bfloat16_rn(0.0f);
}
// y[i] = b[(i / inner) % channels]: rows (inner 1) or NCHW channels (inner P*Q).
__global__ void broadcast_kernel(int64_t n, int64_t channels, int64_t inner, const bf* b, bf* y) {
  PB_GRID_LOOP(i, n) y[i] = b[(i / inner) % channels];
}
// db[c] (+)= sum over outer and inner of dy[o, c, i], in fp32; one thread per channel (small c).
__global__ void channel_sums_kernel(int64_t outer, int64_t channels, int64_t inner, const bf* dy, float* db,
                                    bool accumulate) {
  PB_GRID_LOOP(c, channels) {
    float s = 0.0f;
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) s += __bfloat162float(dy[(o * channels + c) * inner + i]);
    db[c] = accumulate ? db[c] + s : s;
  }
}
__global__ void widen_kernel(int64_t n, const bf* x, float* y, bool accumulate) {
  PB_GRID_LOOP(i, n) y[i] = accumulate ? y[i] + __bfloat162float(x[i]) : __bfloat162float(x[i]);
}

}  // namespace

void launch_to_bf16(cudaStream_t s, int64_t n, const float* x, Bf16* y) {
  if (n <= 0) return;
  to_bf16_kernel<<<blocks_for(n), kThreads, 0, s>>>(n, x, B(y));
  CUDA_CHECK_LAST();
}
void launch_from_bf16(cudaStream_t s, int64_t n, const Bf16* x, float* y) {
  if (n <= 0) return;
  from_bf16_kernel<<<blocks_for(n), kThreads, 0, s>>>(n, B(x), y);
  CUDA_CHECK_LAST();
}
void launch_relu_bf16(cudaStream_t s, int64_t n, const Bf16* x, Bf16* y) {
  if (n <= 0) return;
  relu_kernel<<<blocks_for(n), kThreads, 0, s>>>(n, B(x), B(y));
  CUDA_CHECK_LAST();
}
void launch_relu_backward_bf16(cudaStream_t s, int64_t n, const Bf16* y, const Bf16* dy, Bf16* dx) {
  if (n <= 0) return;
  relu_backward_kernel<<<blocks_for(n), kThreads, 0, s>>>(n, B(y), B(dy), B(dx));
  CUDA_CHECK_LAST();
}
void launch_broadcast_bf16(cudaStream_t s, int64_t n, int64_t channels, int64_t inner, const Bf16* b, Bf16* y) {
  if (n <= 0) return;
  broadcast_kernel<<<blocks_for(n), kThreads, 0, s>>>(n, channels, inner, B(b), B(y));
  CUDA_CHECK_LAST();
}
void launch_channel_sums_bf16(cudaStream_t s, int64_t outer, int64_t channels, int64_t inner, const Bf16* dy,
                              float* db, bool accumulate) {
  if (channels <= 0) return;
  channel_sums_kernel<<<blocks_for(channels), kThreads, 0, s>>>(outer, channels, inner, B(dy), db, accumulate);
  CUDA_CHECK_LAST();
}
void launch_widen_bf16(cudaStream_t s, int64_t n, const Bf16* x, float* y, bool accumulate) {
  if (n <= 0) return;
  widen_kernel<<<blocks_for(n), kThreads, 0, s>>>(n, B(x), y, accumulate);
  CUDA_CHECK_LAST();
}

}  // namespace pb::cu
