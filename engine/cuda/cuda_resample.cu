// The CUDA kernels of nets with skips: the residual add, 2x2 max pooling and nearest 2x
// upsampling, fp32 and bf16 (computed in fp32, rounded once), as the CPU backend computes them
// (engine/cpu_resample.cpp). Each is a grid-stride loop over the values it writes, adjacent
// threads writing adjacent values; no atomics, so every run sums in one order.
#include "engine/cuda/cuda_resample.h"

#include <cuda_bf16.h>

#include "engine/check.h"
#include "engine/kernel_shapes.h"

namespace pb::cu {

namespace {

using kernels::kThreads;
using bf = __nv_bfloat16;
unsigned grid(const kernels::Launch& l) { return static_cast<unsigned>(l.blocks); }

__device__ inline float load(float v) { return v; }
__device__ inline float load(bf v) { return __bfloat162float(v); }
template <class T>
__device__ inline T store(float v);
template <>
__device__ inline float store<float>(float v) { return v; }
template <>
__device__ inline bf store<bf>(float v) { return __float2bfloat16_rn(v); }

#define PB_GRID_LOOP(i, n) \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); i += int64_t(blockDim.x) * gridDim.x)

// A window's first largest value (0: top left ... 3: bottom right), a NaN winning (PyTorch's rule).
__device__ inline int argmax4(const float v[4]) {
  int at = 0;
  for (int i = 1; i < 4; ++i)
    if (v[i] > v[at] || isnan(v[i])) at = i;
  return at;
}

template <class T>
__device__ inline void window(const T* x, int64_t h, int64_t w, int64_t plane, int64_t i, int64_t j, float v[4]) {
  const T* at = x + plane * h * w + 2 * i * w + 2 * j;
  v[0] = load(at[0]), v[1] = load(at[1]), v[2] = load(at[w]), v[3] = load(at[w + 1]);
}

template <class T>
__global__ void add_kernel(int64_t n, const T* a, const T* b, T* y) {
  PB_GRID_LOOP(i, n) y[i] = store<T>(load(a[i]) + load(b[i]));
}

template <class T>
__global__ void max_pool_forward_kernel(int64_t n, int64_t h, int64_t w, const T* x, T* y) {
  const int64_t ho = h / 2, wo = w / 2;
  PB_GRID_LOOP(o, n) {
    float v[4];
    window(x, h, w, o / (ho * wo), o % (ho * wo) / wo, o % wo, v);
    y[o] = store<T>(v[argmax4(v)]);
  }
}

template <class T>
__global__ void max_pool_backward_kernel(int64_t n, int64_t h, int64_t w, const T* x, const T* dy, T* dx) {
  const int64_t ho = h / 2, wo = w / 2;
  PB_GRID_LOOP(e, n) {
    const int64_t plane = e / (h * w), r = e % (h * w) / w, c = e % w;
    float g = 0.0f;
    if (r < 2 * ho && c < 2 * wo) {
      float v[4];
      window(x, h, w, plane, r / 2, c / 2, v);
      if (argmax4(v) == (r % 2) * 2 + c % 2) g = load(dy[(plane * ho + r / 2) * wo + c / 2]);
    }
    dx[e] = store<T>(g);
  }
}

template <class T>
__global__ void upsample_forward_kernel(int64_t n, int64_t h, int64_t w, const T* x, T* y) {
  const int64_t h2 = 2 * h, w2 = 2 * w;
  PB_GRID_LOOP(o, n) {
    const int64_t plane = o / (h2 * w2), r = o % (h2 * w2) / w2, c = o % w2;
    y[o] = x[(plane * h + r / 2) * w + c / 2];
  }
}

template <class T>
__global__ void upsample_backward_kernel(int64_t n, int64_t h, int64_t w, const T* dy, T* dx) {
  const int64_t w2 = 2 * w;
  PB_GRID_LOOP(e, n) {
    const int64_t plane = e / (h * w), r = e % (h * w) / w, c = e % w;
    const T* at = dy + (plane * 2 * h + 2 * r) * w2 + 2 * c;
    dx[e] = store<T>(load(at[0]) + load(at[1]) + load(at[w2]) + load(at[w2 + 1]));
  }
}

template <class T>
__global__ void add_channel_bias_kernel(int64_t n, int64_t channels, int64_t inner, const T* b, T* y) {
  const int64_t first = blockIdx.x * int64_t(blockDim.x) + threadIdx.x, stride = int64_t(blockDim.x) * gridDim.x;
  if (first >= n) return;
  kernels::ChannelStep at(first, stride, channels, inner);
  for (int64_t i = first; i < n; i += stride, at.next()) y[i] = store<T>(load(y[i]) + load(b[at.channel()]));
}

const bf* B(const Bf16* p) { return reinterpret_cast<const bf*>(p); }
bf* B(Bf16* p) { return reinterpret_cast<bf*>(p); }
const float* B(const float* p) { return p; }
float* B(float* p) { return p; }

template <class T>
void add_on(cudaStream_t stream, int64_t n, const T* a, const T* b, T* y) {
  if (n <= 0) return;
  add_kernel<<<grid(kernels::add(n, sizeof(T))), kThreads, 0, stream>>>(n, B(a), B(b), B(y));
  CUDA_CHECK_LAST();
}
template <class T>
void pool_forward_on(cudaStream_t stream, const Planes& s, const T* x, T* y) {
  const int64_t n = s.n * s.c * (s.h / 2) * (s.w / 2);
  if (n <= 0) return;
  max_pool_forward_kernel<<<grid(kernels::max_pool2x2_forward(n, sizeof(T))), kThreads, 0, stream>>>(n, s.h, s.w, B(x), B(y));
  CUDA_CHECK_LAST();
}
template <class T>
void pool_backward_on(cudaStream_t stream, const Planes& s, const T* x, const T* dy, T* dx) {
  const int64_t n = s.numel();
  if (n <= 0) return;
  max_pool_backward_kernel<<<grid(kernels::max_pool2x2_backward(n, sizeof(T))), kThreads, 0, stream>>>(
      n, s.h, s.w, B(x), B(dy), B(dx));
  CUDA_CHECK_LAST();
}
template <class T>
void upsample_forward_on(cudaStream_t stream, const Planes& s, const T* x, T* y) {
  const int64_t n = 4 * s.numel();
  if (n <= 0) return;
  upsample_forward_kernel<<<grid(kernels::upsample2x_forward(n, sizeof(T))), kThreads, 0, stream>>>(n, s.h, s.w, B(x), B(y));
  CUDA_CHECK_LAST();
}
template <class T>
void upsample_backward_on(cudaStream_t stream, const Planes& s, const T* dy, T* dx) {
  const int64_t n = s.numel();
  if (n <= 0) return;
  upsample_backward_kernel<<<grid(kernels::upsample2x_backward(n, sizeof(T))), kThreads, 0, stream>>>(n, s.h, s.w, B(dy),
                                                                                                      B(dx));
  CUDA_CHECK_LAST();
}

template <class T>
void add_channel_bias_on(cudaStream_t stream, int64_t n, int64_t channels, int64_t inner, const T* b, T* y) {
  const int64_t total = n * channels * inner;
  if (total <= 0) return;
  add_channel_bias_kernel<<<grid(kernels::add_channel_bias(total, channels)), kThreads, 0, stream>>>(total, channels,
                                                                                                     inner, B(b), B(y));
  CUDA_CHECK_LAST();
}

}  // namespace

void launch_add(cudaStream_t st, int64_t n, const float* a, const float* b, float* y) { add_on(st, n, a, b, y); }
void launch_max_pool2x2_forward(cudaStream_t st, const Planes& s, const float* x, float* y) { pool_forward_on(st, s, x, y); }
void launch_max_pool2x2_backward(cudaStream_t st, const Planes& s, const float* x, const float* dy, float* dx) {
  pool_backward_on(st, s, x, dy, dx);
}
void launch_upsample2x_forward(cudaStream_t st, const Planes& s, const float* x, float* y) { upsample_forward_on(st, s, x, y); }
void launch_upsample2x_backward(cudaStream_t st, const Planes& s, const float* dy, float* dx) {
  upsample_backward_on(st, s, dy, dx);
}
void launch_add_channel_bias(cudaStream_t st, int64_t n, int64_t channels, int64_t inner, const float* b, float* y) {
  add_channel_bias_on(st, n, channels, inner, b, y);
}
void launch_add_channel_bias(cudaStream_t st, int64_t n, int64_t channels, int64_t inner, const Bf16* b, Bf16* y) {
  add_channel_bias_on(st, n, channels, inner, b, y);
}
void launch_add(cudaStream_t st, int64_t n, const Bf16* a, const Bf16* b, Bf16* y) { add_on(st, n, a, b, y); }
void launch_max_pool2x2_forward(cudaStream_t st, const Planes& s, const Bf16* x, Bf16* y) { pool_forward_on(st, s, x, y); }
void launch_max_pool2x2_backward(cudaStream_t st, const Planes& s, const Bf16* x, const Bf16* dy, Bf16* dx) {
  pool_backward_on(st, s, x, dy, dx);
}
void launch_upsample2x_forward(cudaStream_t st, const Planes& s, const Bf16* x, Bf16* y) { upsample_forward_on(st, s, x, y); }
void launch_upsample2x_backward(cudaStream_t st, const Planes& s, const Bf16* dy, Bf16* dx) {
  upsample_backward_on(st, s, dy, dx);
}

}  // namespace pb::cu
