// The bias gradients: per-channel sums of an [outer, channels, inner] gradient (fp32 Linear in
// double; bf16 convolutions and Linear in fp32), in two passes on the grid kernel_shapes.h gives
// (ChannelSums): blocks reduce coalesced pieces into partial sums, then one block per channel
// adds its partials in a fixed order. No atomics: the same sums every run.
#include <cuda_bf16.h>

#include "engine/check.h"
#include "engine/cuda/block_sum.cuh"
#include "engine/cuda/cuda_bf16.h"
#include "engine/cuda/cuda_kernels.h"
#include "engine/kernel_shapes.h"

namespace pb::cu {

void* PartialsScratch::get(std::size_t bytes) {
  if (!buf_ || buf_->bytes() < bytes) {
    std::size_t size = 4096;
    while (size < bytes) size *= 2;
    if (buf_) outgrown_.push_back(std::move(buf_));
    buf_ = std::make_unique<Buffer>(dev_, size, MemoryPool::Workspace);
  }
  return buf_->data();
}

namespace {

using kernels::kThreads;

__device__ inline float value(float x) { return x; }
__device__ inline float value(__nv_bfloat16 x) { return __bfloat162float(x); }

__device__ inline void store(float* db, int64_t c, float s, bool accumulate) {
  db[c] = accumulate ? __fadd_rn(s, db[c]) : s;
}

// Block (c, j): channel c's elements [j * chunk, (j + 1) * chunk) of its m = outer x inner, in
// order o-major; thread t reads those at t, t + kThreads, ..., following (o, i) without a
// division a step (inner >= kSegmentInner: at most kThreads / kSegmentInner rows a step).
// Registers capped so that a bf16 one keeps 2048 threads an SM (the double one would spill).
template <class T, class Acc>
__global__ void __launch_bounds__(kThreads, sizeof(Acc) == 4 ? 8 : 6)
    segment_sums_kernel(int64_t channels, int64_t inner, int64_t m, int64_t chunks, int64_t chunk, const T* dy,
                        Acc* partials, float* db, bool accumulate) {
  const int64_t c = blockIdx.x / chunks, j = blockIdx.x % chunks;
  const int64_t end = min(m, (j + 1) * chunk);
  int64_t k = j * chunk + threadIdx.x, o = k / inner, i = k % inner;
  Acc acc = 0;
  // kUnroll loads issued before any is added (a thread's loads in flight at once), added in order.
  constexpr int kUnroll = 8;
  for (; k < end; k += kUnroll * kThreads) {
    Acc v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      v[u] = k + u * kThreads < end ? static_cast<Acc>(value(dy[(o * channels + c) * inner + i])) : Acc(0);
      for (i += kThreads; i >= inner; i -= inner) ++o;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) acc += v[u];
  }
  acc = block_sum<kThreads>(acc);
  if (threadIdx.x != 0) return;
  if (partials) partials[c * chunks + j] = acc;
  else store(db, c, static_cast<float>(acc), accumulate);
}

// dy as rows x cols, row-major. Block (r, b): columns [b * width, (b + 1) * width), rows
// [r * chunk, (r + 1) * chunk); thread (lane, col) adds rows lane, lane + lanes, ... of them,
// then the lanes' sums meet in a tree over shared memory.
template <class T, class Acc>
__global__ void column_sums_kernel(int64_t rows, int64_t cols, int width, int64_t col_blocks, int64_t chunk,
                                   const T* dy, Acc* partials, float* db, bool accumulate) {
  __shared__ Acc sums[kThreads];
  const int lanes = kThreads / width, cl = threadIdx.x % width, lane = threadIdx.x / width;
  const int64_t r0 = (blockIdx.x / col_blocks) * chunk, col = (blockIdx.x % col_blocks) * width + cl;
  const int64_t end = min(rows, r0 + chunk);
  Acc acc = 0;
  if (col < cols)
    for (int64_t r = r0 + lane; r < end; r += lanes) acc += static_cast<Acc>(value(dy[r * cols + col]));
  sums[threadIdx.x] = acc;
  __syncthreads();
  for (int half = lanes / 2; half > 0; half /= 2) {
    if (lane < half) sums[threadIdx.x] += sums[threadIdx.x + half * width];
    __syncthreads();
  }
  if (lane != 0 || col >= cols) return;
  if (partials) partials[(blockIdx.x / col_blocks) * cols + col] = sums[cl];
  else store(db, col, static_cast<float>(sums[cl]), accumulate);
}

// Block c adds channel c's partials: the m-th at (m / group) * stride + c * group + m % group.
template <class Acc>
__global__ void finish_kernel(int64_t per_channel, int64_t group, int64_t stride, const Acc* partials, float* db,
                              bool accumulate) {
  const int64_t c = blockIdx.x;
  Acc acc = 0;
  for (int64_t m = threadIdx.x; m < per_channel; m += kThreads)
    acc += partials[(m / group) * stride + c * group + m % group];
  acc = block_sum<kThreads>(acc);
  if (threadIdx.x == 0) store(db, c, static_cast<float>(acc), accumulate);
}

template <class T, class Acc>
void channel_sums(cudaStream_t s, const kernels::ChannelSums& k, int64_t outer, int64_t channels, int64_t inner,
                  const T* dy, float* db, bool accumulate, PartialsScratch& scratch) {
  if (k.partial.blocks == 0) return;
  Acc* partials = k.partials > 0 ? static_cast<Acc*>(scratch.get(static_cast<std::size_t>(k.partials) * sizeof(Acc)))
                                 : nullptr;
  const unsigned blocks = static_cast<unsigned>(k.partial.blocks);
  if (k.segments)
    segment_sums_kernel<T, Acc><<<blocks, kThreads, 0, s>>>(channels, inner, outer * inner, k.chunks, k.chunk, dy,
                                                            partials, db, accumulate);
  else
    column_sums_kernel<T, Acc><<<blocks, kThreads, 0, s>>>(outer, channels * inner, k.width, k.col_blocks, k.chunk, dy,
                                                           partials, db, accumulate);
  CUDA_CHECK_LAST();
  if (k.finish.blocks == 0) return;
  finish_kernel<Acc><<<static_cast<unsigned>(k.finish.blocks), kThreads, 0, s>>>(k.per_channel, k.group, k.stride,
                                                                                  partials, db, accumulate);
  CUDA_CHECK_LAST();
}

}  // namespace

void launch_column_sums(cudaStream_t stream, int64_t rows, int64_t cols, const float* dy, float* db, bool accumulate,
                        PartialsScratch& scratch) {
  channel_sums<float, double>(stream, kernels::column_sums(rows, cols, accumulate), rows, cols, 1, dy, db, accumulate,
                              scratch);
}

void launch_channel_sums(cudaStream_t stream, int64_t outer, int64_t channels, int64_t inner, const float* dy, float* db,
                         bool accumulate, PartialsScratch& scratch) {
  channel_sums<float, double>(stream, kernels::channel_sums_f32(outer, channels, inner, accumulate), outer, channels, inner,
                              dy, db, accumulate, scratch);
}

void launch_channel_sums_bf16(cudaStream_t s, int64_t outer, int64_t channels, int64_t inner, const Bf16* dy,
                              float* db, bool accumulate, PartialsScratch& scratch) {
  channel_sums<__nv_bfloat16, float>(s, kernels::channel_sums_bf16(outer, channels, inner, accumulate), outer,
                                     channels, inner, reinterpret_cast<const __nv_bfloat16*>(dy), db, accumulate, scratch);
}

}  // namespace pb::cu
