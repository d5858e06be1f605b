// CPU backend ops. Threads: each op uses this worker's thread count, so N CPU workers share
// the cores instead of each spawning a full team.
#include "engine/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include "engine/check.h"
#include "engine/cpu_parallel.h"
#include "engine/dnnl/dnnl_bf16.h"
#include "engine/dnnl/dnnl_conv.h"
#include "engine/dnnl/winograd.h"
#ifdef _OPENMP
#include <omp.h>
#endif

namespace pb {

namespace {

// BackendOptions::cpu_winograd, unless PARBENCH_CPU_WINOGRAD says otherwise.
[[maybe_unused]] bool use_winograd(const BackendOptions& opts) {
  const char* env = std::getenv("PARBENCH_CPU_WINOGRAD");
  return env && *env ? std::string(env) != "0" : opts.cpu_winograd;
}

// BackendOptions::cpu_fuse_relu, unless PARBENCH_CPU_FUSE_RELU says otherwise.
bool use_fused_relu(const BackendOptions& opts) {
  const char* env = std::getenv("PARBENCH_CPU_FUSE_RELU");
  return env && *env ? std::string(env) != "0" : opts.cpu_fuse_relu;
}

// BackendOptions::cpu_blocked, unless PARBENCH_CPU_BLOCKED says otherwise.
bool use_blocked(const BackendOptions& opts) {
  const char* env = std::getenv("PARBENCH_CPU_BLOCKED");
  return env && *env ? std::string(env) != "0" : opts.cpu_blocked;
}

// Blocked activations exist on the oneDNN paths only (CpuBackend::conv_keeps_blocked).
void check_plain(ConvLayouts io) {
  PB_CHECK(io.plain(), "a blocked activation for a convolution the engine's own Winograd or im2col runs");
}

int default_threads() {
#ifdef _OPENMP
  return omp_get_num_procs();
#else
  return 1;
#endif
}

// The engine's own Winograd F(2x2, 3x3) only from this many channels in and out: below, its
// transforms cost more than the multiplies it saves.
constexpr int64_t kOwnWinogradMinChannels = 32;

void im2col(const ConvGeom& g, const float* x, float* col, int threads) {
  const int64_t P = g.p(), Q = g.q();
  const int64_t rows = g.c * g.r * g.s;
  parallel_for(rows * P * Q, threads, rows, [&](int64_t row) {
    const int64_t c = row / (g.r * g.s), r = (row / g.s) % g.r, s = row % g.s;
    float* out = col + row * P * Q;
    const float* xc = x + c * g.h * g.w;
    for (int64_t p = 0; p < P; ++p) {
      const int64_t ih = p * g.stride_h + r - g.pad_h;
      float* o = out + p * Q;
      if (ih < 0 || ih >= g.h) {
        std::fill(o, o + Q, 0.0f);
        continue;
      }
      for (int64_t q = 0; q < Q; ++q) {
        const int64_t iw = q * g.stride_w + s - g.pad_w;
        o[q] = (iw >= 0 && iw < g.w) ? xc[ih * g.w + iw] : 0.0f;
      }
    }
  });
}

// dx (one image, zeroed by the caller) += col2im(col); parallel over channels, which never
// write to the same dx element.
void col2im(const ConvGeom& g, const float* col, float* dx, int threads) {
  const int64_t P = g.p(), Q = g.q();
  parallel_for(g.c * g.r * g.s * P * Q, threads, g.c, [&](int64_t c) {
    float* dxc = dx + c * g.h * g.w;
    for (int64_t r = 0; r < g.r; ++r)
      for (int64_t s = 0; s < g.s; ++s) {
        const float* in = col + ((c * g.r + r) * g.s + s) * P * Q;
        for (int64_t p = 0; p < P; ++p) {
          const int64_t ih = p * g.stride_h + r - g.pad_h;
          if (ih < 0 || ih >= g.h) continue;
          for (int64_t q = 0; q < Q; ++q) {
            const int64_t iw = q * g.stride_w + s - g.pad_w;
            if (iw >= 0 && iw < g.w) dxc[ih * g.w + iw] += in[p * Q + q];
          }
        }
      }
  });
}

}  // namespace

void cpu_transpose(int64_t rows, int64_t cols, const float* src, float* dst, int threads) {
  constexpr int64_t B = 32;
  parallel_for(rows * cols, threads, (rows + B - 1) / B, [&](int64_t ib) {
    const int64_t i0 = ib * B;
    for (int64_t j0 = 0; j0 < cols; j0 += B)
      for (int64_t i = i0; i < std::min(rows, i0 + B); ++i)
        for (int64_t j = j0; j < std::min(cols, j0 + B); ++j) dst[j * rows + i] = src[i * cols + j];
  });
}

void cpu_gemm_nn(int64_t m, int64_t n, int64_t k, const float* a, const float* b, float* c,
                 bool accumulate, int threads) {
  // Blocks of 4 rows of C share each streamed row of B; the j loop vectorises.
  constexpr int64_t KB = 256, NB = 1024;
  const int64_t row_blocks = (m + 3) / 4;
  parallel_for(m * n * k / 64, threads, row_blocks, [&](int64_t rb) {
    const int64_t i0 = rb * 4, rows = std::min<int64_t>(4, m - i0);
    if (!accumulate)
      for (int64_t i = 0; i < rows; ++i) std::fill(c + (i0 + i) * n, c + (i0 + i + 1) * n, 0.0f);
    for (int64_t j0 = 0; j0 < n; j0 += NB) {
      const int64_t nj = std::min(NB, n - j0);
      for (int64_t k0 = 0; k0 < k; k0 += KB) {
        const int64_t nk = std::min(KB, k - k0);
        if (rows == 4) {
          float* c0 = c + i0 * n + j0;
          float* c1 = c0 + n;
          float* c2 = c1 + n;
          float* c3 = c2 + n;
          for (int64_t kk = k0; kk < k0 + nk; ++kk) {
            const float a0 = a[i0 * k + kk], a1 = a[(i0 + 1) * k + kk], a2 = a[(i0 + 2) * k + kk],
                        a3 = a[(i0 + 3) * k + kk];
            const float* br = b + kk * n + j0;
#pragma omp simd
            for (int64_t j = 0; j < nj; ++j) {
              const float bv = br[j];
              c0[j] += a0 * bv;
              c1[j] += a1 * bv;
              c2[j] += a2 * bv;
              c3[j] += a3 * bv;
            }
          }
        } else {
          for (int64_t i = i0; i < i0 + rows; ++i) {
            float* cr = c + i * n + j0;
            for (int64_t kk = k0; kk < k0 + nk; ++kk) {
              const float av = a[i * k + kk];
              const float* br = b + kk * n + j0;
#pragma omp simd
              for (int64_t j = 0; j < nj; ++j) cr[j] += av * br[j];
            }
          }
        }
      }
    }
  });
}

CpuBackend::CpuBackend(Device d, const BackendOptions& opts)
    : device_(d),
      threads_(opts.threads > 0 ? opts.threads : default_threads()),
      fuse_relu_(use_fused_relu(opts)),
      blocked_(use_blocked(opts)),
      scratch_(3),
      scratch_count_(d),
      precision_(opts.precision) {
  if (precision_ == Precision::Bf16) bf16_ = make_cpu_bf16(threads_, d);
#ifdef PARBENCH_HAVE_DNNL
  if (!opts.cpu_reference_conv) {
    dnnl_ = std::make_unique<DnnlConv>(threads_, use_winograd(opts), DnnlConv::kWinogradScratchCap, d);
    if (use_winograd(opts)) winograd_ = std::make_unique<Winograd2x3>(threads_, Winograd2x3::kChunkBytes, d);
  }
#endif
}

#ifndef PARBENCH_HAVE_DNNL
// Without oneDNN the members stay empty; only their destructors are needed.
struct DnnlConv::Impl {};
DnnlConv::~DnnlConv() = default;
struct Winograd2x3::Impl {};
Winograd2x3::~Winograd2x3() = default;
#endif

bool CpuBackend::own_winograd_forward([[maybe_unused]] const ConvGeom& g, [[maybe_unused]] bool bias) {
#ifdef PARBENCH_HAVE_DNNL
  return winograd_ && Winograd2x3::applies(g) && std::min(g.c, g.k) >= kOwnWinogradMinChannels &&
         !dnnl_->forward_is_winograd(g, bias);
#else
  return false;
#endif
}

bool CpuBackend::own_winograd_backward_weights([[maybe_unused]] const ConvGeom& g, [[maybe_unused]] bool bias) {
#ifdef PARBENCH_HAVE_DNNL
  return winograd_ && Winograd2x3::applies(g) && std::min(g.c, g.k) >= kOwnWinogradMinChannels &&
         !dnnl_->backward_weights_is_winograd(g, bias);
#else
  return false;
#endif
}

bool CpuBackend::own_winograd_backward_data([[maybe_unused]] const ConvGeom& g) {
#ifdef PARBENCH_HAVE_DNNL
  return winograd_ && Winograd2x3::applies(g) && std::min(g.c, g.k) >= kOwnWinogradMinChannels &&
         !dnnl_->backward_data_is_winograd(g);
#else
  return false;
#endif
}

CpuBackend::~CpuBackend() = default;

std::string CpuBackend::name() const {
  const char* conv = "im2col+gemm";
#ifdef PARBENCH_HAVE_DNNL
  if (dnnl_) conv = dnnl_->winograd() ? "Winograd (oneDNN's or own F(2x2,3x3)) + oneDNN direct" : "oneDNN direct";
#endif
  return fmt::format("cpu ({} threads, conv: {})", threads_, conv);
}

std::array<std::string, 3> CpuBackend::conv_pass_algorithms([[maybe_unused]] const ConvGeom& g,
                                                             [[maybe_unused]] bool bias) {
  std::array<std::string, 3> out{"im2col+gemm", "im2col+gemm", "im2col+gemm"};
#ifdef PARBENCH_HAVE_DNNL
  if (!dnnl_) return out;
  out = dnnl_->pass_plans(g, bias);
  const char* own = "own Winograd F(2x2,3x3)";
  if (own_winograd_forward(g, bias)) out[0] = own;
  if (own_winograd_backward_data(g)) out[1] = own;
  if (own_winograd_backward_weights(g, bias)) out[2] = own;
#endif
  return out;
}

void CpuBackend::release_workspace() {
  for (auto& v : scratch_) std::vector<float>().swap(v);
  scratch_count_.set(0);
#ifdef PARBENCH_HAVE_DNNL
  if (dnnl_) dnnl_->release_scratch();
  if (winograd_) winograd_->release_scratch();
#endif
}

float* CpuBackend::scratch(std::size_t slot, std::size_t floats) {
  auto& s = scratch_[slot];
  if (s.size() < floats) {
    s.resize(floats);
    std::size_t held = 0;
    for (const auto& v : scratch_) held += v.capacity() * sizeof(float);
    scratch_count_.set(held);
  }
  return s.data();
}

bool CpuBackend::conv_keeps_blocked([[maybe_unused]] const ConvGeom& a, [[maybe_unused]] const ConvGeom& b) {
#ifdef PARBENCH_HAVE_DNNL
  if (!blocked_ || !dnnl_ || precision_ == Precision::Bf16) return false;  // oneDNN's blocked: fp32 calls only
  for (const ConvGeom* g : {&a, &b})
    if (own_winograd_forward(*g, true) || own_winograd_backward_data(*g) || own_winograd_backward_weights(*g, true))
      return false;
  return dnnl_->keeps_blocked(a, b);
#else
  return false;
#endif
}

void CpuBackend::conv2d_forward(const ConvGeom& g, const float* x, const float* w, const float* b,
                                float* y) {
  conv2d_forward_in(g, {}, x, w, b, y);
}

void CpuBackend::conv2d_forward_in(const ConvGeom& g, ConvLayouts io, const float* x, const float* w,
                                   const float* b, float* y) {
  fp32_only("convolution");
#ifdef PARBENCH_HAVE_DNNL
  if (own_winograd_forward(g, b != nullptr)) {
    check_plain(io);
    return winograd_->forward(g, x, w, b, y);
  }
  if (dnnl_) return dnnl_->forward(g, x, w, b, y, io);
#endif
  check_plain(io);
  const int64_t PQ = g.p() * g.q(), CRS = g.c * g.r * g.s;
  float* col = scratch(0, static_cast<std::size_t>(CRS * PQ));
  for (int64_t n = 0; n < g.n; ++n) {
    im2col(g, x + n * g.c * g.h * g.w, col, threads_);
    float* yn = y + n * g.k * PQ;
    for (int64_t k = 0; k < g.k; ++k) std::fill(yn + k * PQ, yn + (k + 1) * PQ, b ? b[k] : 0.0f);
    cpu_gemm_nn(g.k, PQ, CRS, w, col, yn, true, threads_);
  }
}

bool CpuBackend::conv2d_relu_forward(const ConvGeom& g, const float* x, const float* w, const float* b, float* y) {
  return conv2d_relu_forward_in(g, {}, x, w, b, y);
}

bool CpuBackend::conv2d_relu_forward_in([[maybe_unused]] const ConvGeom& g, [[maybe_unused]] ConvLayouts io,
                                        [[maybe_unused]] const float* x, [[maybe_unused]] const float* w,
                                        [[maybe_unused]] const float* b, [[maybe_unused]] float* y) {
  fp32_only("convolution");
#ifdef PARBENCH_HAVE_DNNL
  if (!fuse_relu_ || !dnnl_) return false;
  if (own_winograd_forward(g, b != nullptr)) {
    check_plain(io);
    winograd_->forward(g, x, w, b, y, /*relu=*/true);
    return true;
  }
  return dnnl_->forward_relu(g, x, w, b, y, io);
#else
  return false;
#endif
}

void CpuBackend::conv2d_backward_data(const ConvGeom& g, const float* dy, const float* w,
                                      float* dx) {
  conv2d_backward_data_in(g, {}, dy, w, dx);
}

void CpuBackend::conv2d_backward_data_in(const ConvGeom& g, ConvLayouts io, const float* dy, const float* w,
                                         float* dx) {
  fp32_only("convolution");
#ifdef PARBENCH_HAVE_DNNL
  if (own_winograd_backward_data(g)) {
    check_plain(io);
    return winograd_->backward_data(g, dy, w, dx);
  }
  if (dnnl_) return dnnl_->backward_data(g, dy, w, dx, io);
#endif
  check_plain(io);
  const int64_t PQ = g.p() * g.q(), CRS = g.c * g.r * g.s;
  float* wt = scratch(1, static_cast<std::size_t>(CRS * g.k));
  cpu_transpose(g.k, CRS, w, wt, threads_);
  float* col = scratch(0, static_cast<std::size_t>(CRS * PQ));
  std::fill(dx, dx + g.n * g.c * g.h * g.w, 0.0f);
  for (int64_t n = 0; n < g.n; ++n) {
    cpu_gemm_nn(CRS, PQ, g.k, wt, dy + n * g.k * PQ, col, false, threads_);
    col2im(g, col, dx + n * g.c * g.h * g.w, threads_);
  }
}

void CpuBackend::conv2d_backward_weights(const ConvGeom& g, const float* x, const float* dy,
                                         float* dw, float* db, bool accumulate) {
  conv2d_backward_weights_in(g, {}, x, dy, dw, db, accumulate);
}

void CpuBackend::conv2d_backward_weights_in(const ConvGeom& g, ConvLayouts io, const float* x, const float* dy,
                                            float* dw, float* db, bool accumulate) {
  fp32_only("convolution");
#ifdef PARBENCH_HAVE_DNNL
  if (own_winograd_backward_weights(g, db != nullptr)) {
    check_plain(io);
    return winograd_->backward_weights(g, x, dy, dw, db, accumulate);
  }
  if (dnnl_) return dnnl_->backward_weights(g, x, dy, dw, db, accumulate, io);
#endif
  check_plain(io);
  const int64_t PQ = g.p() * g.q(), CRS = g.c * g.r * g.s;
  float* col = scratch(0, static_cast<std::size_t>(CRS * PQ));
  float* colt = scratch(1, static_cast<std::size_t>(CRS * PQ));
  if (!accumulate) {
    std::fill(dw, dw + g.k * CRS, 0.0f);
    if (db) std::fill(db, db + g.k, 0.0f);
  }
  for (int64_t n = 0; n < g.n; ++n) {
    im2col(g, x + n * g.c * g.h * g.w, col, threads_);
    cpu_transpose(CRS, PQ, col, colt, threads_);
    const float* dyn = dy + n * g.k * PQ;
    cpu_gemm_nn(g.k, CRS, PQ, dyn, colt, dw, true, threads_);
    if (db)
      for (int64_t k = 0; k < g.k; ++k) {
        double s = 0;
        for (int64_t i = 0; i < PQ; ++i) s += dyn[k * PQ + i];
        db[k] += static_cast<float>(s);
      }
  }
}

void CpuBackend::relu_forward(int64_t n, const float* x, float* y) {
  parallel_for_simd(n, threads_, [=](int64_t i) { y[i] = x[i] > 0.0f ? x[i] : 0.0f; });
}

void CpuBackend::relu_backward(int64_t n, const float* y, const float* dy, float* dx) {
  parallel_for_simd(n, threads_, [=](int64_t i) { dx[i] = y[i] > 0.0f ? dy[i] : 0.0f; });
}

void CpuBackend::mse_loss_grad(int64_t n, const float* y, const float* t, float grad_scale,
                               float* dy, float* loss_sum) {
  double sum = 0;
  auto at = [=](int64_t i) {
    const float d = y[i] - t[i];
    dy[i] = grad_scale * d;
    return static_cast<double>(d) * d;
  };
  if (team(n, threads_) <= 1) {  // no parallel region: see cpu_parallel.h
#pragma omp simd reduction(+ : sum)
    for (int64_t i = 0; i < n; ++i) sum += at(i);
  } else {
#pragma omp parallel for simd num_threads(threads_) schedule(static) reduction(+ : sum)
    for (int64_t i = 0; i < n; ++i) sum += at(i);
  }
  *loss_sum = static_cast<float>(sum);
}

void CpuBackend::adam_step(int64_t n, float* p, const float* g, float* m, float* v,
                           const AdamParams& a, int64_t step) {
  // Same order of float operations as torch.optim.Adam's single-tensor path.
  const AdamStepScalars s = adam_step_scalars(a, step);
  const float step_size = s.step_size, bc2_sqrt = s.bc2_sqrt, b1 = s.beta1, b2 = s.beta2;
  const float one_b1 = s.one_minus_beta1, one_b2 = s.one_minus_beta2, eps = s.eps, wd = s.weight_decay;
  parallel_ranges(n, threads_, [=](int64_t lo, int64_t hi) {
#pragma omp simd
    for (int64_t i = lo; i < hi; ++i) {
      const float gi = wd != 0.0f ? g[i] + wd * p[i] : g[i];
      m[i] = m[i] * b1 + gi * one_b1;
      v[i] = v[i] * b2 + one_b2 * gi * gi;
      const float denom = std::sqrt(v[i]) / bc2_sqrt + eps;
      p[i] = p[i] + -step_size * m[i] / denom;  // addcdiv: value * t1 / t2
    }
  });
}

}  // namespace pb
