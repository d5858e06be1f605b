// The CPU backend's Linear layers: the blocked GEMM (cpu_gemm_nn, cpu_backend.cpp) on transposed operands.
#include "engine/cpu_backend.h"

namespace pb {

void CpuBackend::linear_forward(int64_t n, int64_t in, int64_t out, const float* x, const float* w,
                                const float* b, float* y) {
  fp32_only("linear layer");
  float* wt = scratch(1, static_cast<std::size_t>(in * out));
  cpu_transpose(out, in, w, wt, threads_);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t o = 0; o < out; ++o) y[i * out + o] = b ? b[o] : 0.0f;
  cpu_gemm_nn(n, out, in, x, wt, y, true, threads_);
}

void CpuBackend::linear_backward_data(int64_t n, int64_t in, int64_t out, const float* dy,
                                      const float* w, float* dx) {
  fp32_only("linear layer");
  cpu_gemm_nn(n, in, out, dy, w, dx, false, threads_);
}

void CpuBackend::linear_backward_weights(int64_t n, int64_t in, int64_t out, const float* x,
                                         const float* dy, float* dw, float* db, bool accumulate) {
  fp32_only("linear layer");
  float* dyt = scratch(1, static_cast<std::size_t>(n * out));
  cpu_transpose(n, out, dy, dyt, threads_);
  cpu_gemm_nn(out, in, n, dyt, x, dw, accumulate, threads_);
  if (db) {
    for (int64_t o = 0; o < out; ++o) {
      double s = 0;
      for (int64_t i = 0; i < n; ++i) s += dy[i * out + o];
      db[o] = static_cast<float>(s) + (accumulate ? db[o] : 0.0f);
    }
  }
}

}  // namespace pb
