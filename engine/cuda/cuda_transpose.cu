// The batched transpose behind the NHWC (channels_last) layout of the bf16 convolutions: NCHW <->
// NHWC activations, KCRS <-> KRSC filters. 32 x 32 tiles through shared memory, so that both the
// reads and the writes of a warp touch adjacent values, in a grid-stride loop over the tiles; a
// side narrower than a tile, one value a thread. Grids from engine/kernel_shapes.h.
#include <cstdint>

#include "engine/check.h"
#include "engine/cuda/cuda_kernels.h"
#include "engine/cuda/cuda_util.h"
#include "engine/kernel_shapes.h"

namespace pb::cu {

namespace {

constexpr int kTile = kernels::kTransposeTile;           // 32
constexpr int kRowsAPass = kernels::kThreads / kTile;     // 8: a block is 32 x 8 threads

// dst[b][c][r] = src[b][r][c] for r < rows, c < cols; T is the value's bits (a copy, exact).
template <typename T>
__global__ void transpose_kernel(int64_t batches, int64_t rows, int64_t cols, int64_t tiles_r, int64_t tiles_c,
                                 const T* __restrict__ src, T* __restrict__ dst) {
  __shared__ T tile[kTile][kTile + 1];  // +1: a column of the tile spreads over the banks
  const int tx = threadIdx.x % kTile, ty = threadIdx.x / kTile;
  const int64_t per_batch = tiles_r * tiles_c, tiles = batches * per_batch;
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t b = t / per_batch, rem = t % per_batch;
    const int64_t r0 = rem / tiles_c * kTile, c0 = rem % tiles_c * kTile;
    const T* s = src + b * rows * cols;
    T* d = dst + b * rows * cols;
    for (int k = ty; k < kTile; k += kRowsAPass) {
      const int64_t r = r0 + k, c = c0 + tx;
      if (r < rows && c < cols) tile[k][tx] = s[r * cols + c];
    }
    __syncthreads();
    for (int k = ty; k < kTile; k += kRowsAPass) {
      const int64_t c = c0 + k, r = r0 + tx;
      if (c < cols && r < rows) d[c * rows + r] = tile[tx][k];
    }
    __syncthreads();  // the tile is refilled by the next iteration
  }
}

// The same for rows or columns narrower than a tile: one dst value an iteration.
template <typename T>
__global__ void transpose_narrow_kernel(int64_t n, int64_t rows, int64_t cols, const T* __restrict__ src,
                                        T* __restrict__ dst) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(blockDim.x) * gridDim.x) {
    const int64_t per_batch = rows * cols, b = i / per_batch, rem = i % per_batch;
    const int64_t c = rem / rows, r = rem % rows;
    dst[i] = src[b * per_batch + r * cols + c];
  }
}

}  // namespace

void launch_transpose(cudaStream_t stream, int64_t batches, int64_t rows, int64_t cols, const void* src, void* dst,
                      int value_bytes) {
  const kernels::Launch l = kernels::transpose(batches, rows, cols, value_bytes);
  if (l.blocks == 0) return;
  const int64_t tiles_r = (rows + kTile - 1) / kTile, tiles_c = (cols + kTile - 1) / kTile;
  const auto grid = static_cast<unsigned>(l.blocks);
  PB_CHECK(value_bytes == 2 || value_bytes == 4, "transpose of {}-byte values", value_bytes);
  const int64_t n = batches * rows * cols;
  if (!kernels::transpose_tiled(rows, cols) && value_bytes == 2)
    transpose_narrow_kernel<<<grid, kernels::kThreads, 0, stream>>>(n, rows, cols, static_cast<const uint16_t*>(src),
                                                                    static_cast<uint16_t*>(dst));
  else if (!kernels::transpose_tiled(rows, cols))
    transpose_narrow_kernel<<<grid, kernels::kThreads, 0, stream>>>(n, rows, cols, static_cast<const uint32_t*>(src),
                                                                    static_cast<uint32_t*>(dst));
  else if (value_bytes == 2)
    transpose_kernel<<<grid, kernels::kThreads, 0, stream>>>(batches, rows, cols, tiles_r, tiles_c,
                                                             static_cast<const uint16_t*>(src), static_cast<uint16_t*>(dst));
  else
    transpose_kernel<<<grid, kernels::kThreads, 0, stream>>>(batches, rows, cols, tiles_r, tiles_c,
                                                             static_cast<const uint32_t*>(src), static_cast<uint32_t*>(dst));
  CUDA_CHECK_LAST();
}

}  // namespace pb::cu
