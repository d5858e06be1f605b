// parbench's own bf16 kernels for the CUDA backend's autocast path: conversions, ReLU, bias
// broadcasts, fp32 weight gradients from bf16 ones. Grid-stride loops on grids from
// engine/kernel_shapes.h; the bias gradients' sums are in cuda_channel_sums.cu.
#include <cuda_bf16.h>

#include "engine/check.h"
#include "engine/cuda/cuda_bf16.h"
#include "engine/kernel_shapes.h"

namespace pb::cu {

namespace {

using kernels::kThreads;
unsigned grid(const kernels::Launch& l) { return static_cast<unsigned>(l.blocks); }
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
// y[i] = b[(i / inner) % channels]: rows or NHWC (inner 1), NCHW channels (inner P*Q).
__global__ void broadcast_kernel(int64_t n, int64_t channels, int64_t inner, const bf* b, bf* y) {
  const int64_t first = blockIdx.x * int64_t(blockDim.x) + threadIdx.x, stride = int64_t(blockDim.x) * gridDim.x;
  if (first >= n) return;
  kernels::ChannelStep at(first, stride, channels, inner);
  for (int64_t i = first; i < n; i += stride, at.next()) y[i] = b[at.channel()];
}
__global__ void widen_kernel(int64_t n, const bf* x, float* y, bool accumulate) {
  PB_GRID_LOOP(i, n) y[i] = accumulate ? y[i] + __bfloat162float(x[i]) : __bfloat162float(x[i]);
}

}  // namespace

void launch_to_bf16(cudaStream_t s, int64_t n, const float* x, Bf16* y) {
  if (n <= 0) return;
  to_bf16_kernel<<<grid(kernels::to_bf16(n)), kThreads, 0, s>>>(n, x, B(y));
  CUDA_CHECK_LAST();
}
void launch_from_bf16(cudaStream_t s, int64_t n, const Bf16* x, float* y) {
  if (n <= 0) return;
  from_bf16_kernel<<<grid(kernels::from_bf16(n)), kThreads, 0, s>>>(n, B(x), y);
  CUDA_CHECK_LAST();
}
void launch_relu_bf16(cudaStream_t s, int64_t n, const Bf16* x, Bf16* y) {
  if (n <= 0) return;
  relu_kernel<<<grid(kernels::relu_bf16(n)), kThreads, 0, s>>>(n, B(x), B(y));
  CUDA_CHECK_LAST();
}
void launch_relu_backward_bf16(cudaStream_t s, int64_t n, const Bf16* y, const Bf16* dy, Bf16* dx) {
  if (n <= 0) return;
  relu_backward_kernel<<<grid(kernels::relu_backward_bf16(n)), kThreads, 0, s>>>(n, B(y), B(dy), B(dx));
  CUDA_CHECK_LAST();
}
void launch_broadcast_bf16(cudaStream_t s, int64_t n, int64_t channels, int64_t inner, const Bf16* b, Bf16* y) {
  if (n <= 0) return;
  broadcast_kernel<<<grid(kernels::broadcast_bf16(n, channels)), kThreads, 0, s>>>(n, channels, inner, B(b), B(y));
  CUDA_CHECK_LAST();
}
void launch_widen_bf16(cudaStream_t s, int64_t n, const Bf16* x, float* y, bool accumulate) {
  if (n <= 0) return;
  widen_kernel<<<grid(kernels::widen_bf16(n, accumulate)), kThreads, 0, s>>>(n, B(x), y, accumulate);
  CUDA_CHECK_LAST();
}

}  // namespace pb::cu
