// Launchers for parbench's own CUDA kernels (engine/cuda/cuda_kernels.cu): the element-wise
// ops, the fused MSE loss+gradient and the fused Adam step; the bias gradients' reductions
// (engine/cuda/cuda_channel_sums.cu) and their scratch. Each launches on `stream`, in the grid
// engine/kernel_shapes.h gives, and checks the launch before returning.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include <cuda_runtime.h>

#include "engine/backend.h"
#include "engine/kernel_shapes.h"
#include "engine/tensor.h"

namespace pb::cu {

// Device scratch for the bias-gradient reductions' partial sums, in the workspace pool: grown to
// the largest need (in powers of two), an outgrown buffer kept until release_outgrown(), since
// queued work may still read it.
class PartialsScratch {
 public:
  explicit PartialsScratch(Device dev) : dev_(dev) {}
  void* get(std::size_t bytes);
  void release_outgrown() noexcept { outgrown_.clear(); }

 private:
  Device dev_;
  std::unique_ptr<Buffer> buf_;
  std::vector<std::unique_ptr<Buffer>> outgrown_;
};

// y[0, n) = value (a memset serves 0; this, any other value).
void launch_fill(cudaStream_t stream, int64_t n, float value, float* y);
void launch_relu_forward(cudaStream_t stream, int64_t n, const float* x, float* y);
void launch_relu_backward(cudaStream_t stream, int64_t n, const float* y, const float* dy, float* dx);
// y = max(y + b[c], 0) in place, c = (i / inner) % channels: NCHW (inner P*Q) or NHWC (inner 1).
void launch_bias_relu(cudaStream_t stream, int64_t n, int64_t channels, int64_t inner, const float* b, float* y);

// y[i, o] = b[o] for i < rows, o < cols (the bias a following GEMM adds to).
void launch_broadcast_rows(cudaStream_t stream, int64_t rows, int64_t cols, const float* b, float* y);
// db[o] = sum_i dy[i, o] (+ db[o] when accumulate), summed in double like the CPU backend;
// deterministic (kernel_shapes.h: ChannelSums).
void launch_column_sums(cudaStream_t stream, int64_t rows, int64_t cols, const float* dy, float* db,
                        bool accumulate, PartialsScratch& scratch);

// db[c] (+)= sum over NCHW dy [outer, channels, inner] of channel c, in double (ChannelSums).
void launch_channel_sums(cudaStream_t stream, int64_t outer, int64_t channels, int64_t inner, const float* dy, float* db,
                         bool accumulate, PartialsScratch& scratch);

// Scratch the MSE reduction needs: one double per block plus a completion counter that must
// start at zero (the kernel leaves it at zero again).
constexpr int kMseMaxBlocks = kernels::kMseMaxBlocks;
struct MseScratch {
  double* partials;        // kMseMaxBlocks doubles
  unsigned int* counter;   // one, zero between calls
};
// dy = grad_scale * (y - t); loss_sum[0] = sum (y - t)^2, one kernel: each block reduces its
// share, the last block to finish adds the partial sums in a fixed order (deterministic).
void launch_mse_loss_grad(cudaStream_t stream, int64_t n, const float* y, const float* t,
                          float grad_scale, float* dy, float* loss_sum, MseScratch scratch);

void launch_adam(cudaStream_t stream, int64_t n, float* p, const float* g, float* m, float* v,
                 const AdamStepScalars& s);

// dst[b][c][r] = src[b][r][c] over batches of rows x cols values of value_bytes (2 or 4) each: NCHW
// to NHWC is (N, C, H*W), NHWC to NCHW (N, H*W, C), a filter KCRS to KRSC (K, C, R*S) and back
// (K, R*S, C). src and dst do not overlap (engine/cuda/cuda_transpose.cu).
void launch_transpose(cudaStream_t stream, int64_t batches, int64_t rows, int64_t cols, const void* src, void* dst,
                      int value_bytes);

}  // namespace pb::cu
