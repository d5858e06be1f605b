// parbench's own CUDA kernels: element-wise ops, the fused MSE loss+gradient and the fused
// Adam step, on grids from engine/kernel_shapes.h. Float arithmetic uses the explicitly rounded
// intrinsics (__fmul_rn, ...) where the CPU backend's operation order matters, so nvcc cannot
// contract it into FMAs.
#include "engine/cuda/cuda_kernels.h"

#include "engine/check.h"
#include "engine/cuda/block_sum.cuh"

namespace pb::cu {

namespace {

using kernels::kThreads;

__device__ inline int64_t first_index() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ inline int64_t grid_stride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

// In place is fine (x == y, dy == dx): each element is read before it is written, by one thread.
__global__ void relu_forward_kernel(int64_t n, const float* x, float* y) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const float v = x[i];
    y[i] = v > 0.0f ? v : 0.0f;
  }
}

// The sum rounds as cudnnAddTensor's does; the channel steps along the loop (kernels::ChannelStep).
__global__ void bias_relu_kernel(int64_t n, int64_t channels, int64_t inner, const float* b, float* y) {
  const int64_t first = first_index(), stride = grid_stride();
  if (first >= n) return;
  kernels::ChannelStep at(first, stride, channels, inner);
  for (int64_t i = first; i < n; i += stride, at.next()) {
    const float v = __fadd_rn(y[i], b[at.channel()]);
    y[i] = v > 0.0f ? v : 0.0f;
  }
}

__global__ void fill_kernel(int64_t n, float value, float* y) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) y[i] = value;
}

__global__ void relu_backward_kernel(int64_t n, const float* y, const float* dy, float* dx) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

__global__ void broadcast_rows_kernel(int64_t rows, int64_t cols, const float* b, float* y) {
  const int64_t n = rows * cols;
  for (int64_t i = first_index(); i < n; i += grid_stride()) y[i] = b[i % cols];
}

__global__ void mse_loss_grad_kernel(int64_t n, const float* y, const float* t, float grad_scale, float* dy,
                                     float* loss_sum, double* partials, unsigned int* counter) {
  double acc = 0;
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const float d = __fsub_rn(y[i], t[i]);
    acc += static_cast<double>(d) * d;
    dy[i] = __fmul_rn(grad_scale, d);
  }
  const double mine = block_sum<kThreads>(acc);
  __shared__ bool last;
  if (threadIdx.x == 0) {
    partials[blockIdx.x] = mine;
    __threadfence();  // the partial is visible to every block before the counter says so
    last = atomicAdd(counter, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!last) return;
  // The last block adds the partials in a fixed order: the loss does not depend on timing.
  double total = 0;
  for (unsigned j = threadIdx.x; j < gridDim.x; j += blockDim.x) total += __ldcg(partials + j);
  total = block_sum<kThreads>(total);
  if (threadIdx.x == 0) {
    loss_sum[0] = static_cast<float>(total);
    *counter = 0;  // ready for the next call on this stream
  }
}

// torch.optim.Adam's single-tensor step, in the CPU backend's order of float operations.
__global__ void adam_kernel(int64_t n, float* p, const float* g, float* m, float* v, AdamStepScalars s) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const float pi = p[i];
    const float gi = s.weight_decay != 0.0f ? __fadd_rn(g[i], __fmul_rn(s.weight_decay, pi)) : g[i];
    const float mi = __fadd_rn(__fmul_rn(m[i], s.beta1), __fmul_rn(gi, s.one_minus_beta1));
    const float vi = __fadd_rn(__fmul_rn(v[i], s.beta2), __fmul_rn(__fmul_rn(s.one_minus_beta2, gi), gi));
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), s.bc2_sqrt), s.eps);
    m[i] = mi;
    v[i] = vi;
    p[i] = __fadd_rn(pi, __fdiv_rn(__fmul_rn(-s.step_size, mi), denom));
  }
}

// The grid each launch uses is kernel_shapes.h's for that kernel.
unsigned grid(const kernels::Launch& l) { return static_cast<unsigned>(l.blocks); }

}  // namespace

void launch_fill(cudaStream_t stream, int64_t n, float value, float* y) {
  if (n <= 0) return;
  fill_kernel<<<grid(kernels::fill(n)), kThreads, 0, stream>>>(n, value, y);
  CUDA_CHECK_LAST();
}

void launch_relu_forward(cudaStream_t stream, int64_t n, const float* x, float* y) {
  if (n <= 0) return;
  relu_forward_kernel<<<grid(kernels::relu_forward(n)), kThreads, 0, stream>>>(n, x, y);
  CUDA_CHECK_LAST();
}

void launch_bias_relu(cudaStream_t stream, int64_t n, int64_t channels, int64_t inner, const float* b, float* y) {
  if (n <= 0) return;
  bias_relu_kernel<<<grid(kernels::bias_relu(n, channels)), kThreads, 0, stream>>>(n, channels, inner, b, y);
  CUDA_CHECK_LAST();
}

void launch_relu_backward(cudaStream_t stream, int64_t n, const float* y, const float* dy, float* dx) {
  if (n <= 0) return;
  relu_backward_kernel<<<grid(kernels::relu_backward(n)), kThreads, 0, stream>>>(n, y, dy, dx);
  CUDA_CHECK_LAST();
}

void launch_broadcast_rows(cudaStream_t stream, int64_t rows, int64_t cols, const float* b, float* y) {
  if (rows <= 0 || cols <= 0) return;
  broadcast_rows_kernel<<<grid(kernels::broadcast_rows(rows, cols)), kThreads, 0, stream>>>(rows, cols, b, y);
  CUDA_CHECK_LAST();
}

void launch_mse_loss_grad(cudaStream_t stream, int64_t n, const float* y, const float* t, float grad_scale,
                          float* dy, float* loss_sum, MseScratch scratch) {
  // n == 0 still runs one block, so loss_sum becomes 0 as on the CPU.
  mse_loss_grad_kernel<<<grid(kernels::mse_loss_grad(n)), kThreads, 0, stream>>>(n, y, t, grad_scale, dy, loss_sum,
                                                                                 scratch.partials, scratch.counter);
  CUDA_CHECK_LAST();
}

void launch_adam(cudaStream_t stream, int64_t n, float* p, const float* g, float* m, float* v,
                 const AdamStepScalars& s) {
  if (n <= 0) return;
  adam_kernel<<<grid(kernels::adam(n, s.weight_decay != 0.0f)), kThreads, 0, stream>>>(n, p, g, m, v, s);
  CUDA_CHECK_LAST();
}

}  // namespace pb::cu
