// The CPU backend's bf16 ops: convolutions and linear layers through oneDNN's bf16 kernels
// (fp32 accumulation), element-wise ReLU and conversions here, threaded like the fp32 ops.
#include <algorithm>

#include "engine/check.h"
#include "engine/cpu_backend.h"
#include "engine/cpu_parallel.h"
#include "engine/dnnl/dnnl_bf16.h"

namespace pb {

std::unique_ptr<DnnlBf16> make_cpu_bf16([[maybe_unused]] int threads, [[maybe_unused]] Device d) {
#ifdef PARBENCH_HAVE_DNNL
  return std::make_unique<DnnlBf16>(threads, d);
#else
  throw Error("precision bf16 on CPU needs oneDNN's bf16 kernels, and this build has no oneDNN");
#endif
}

void CpuBackend::fp32_only(const char* op) const {
  if (precision_ == Precision::Bf16)
    throw Error(fmt::format("{}: an fp32 {} on a backend made for bf16 (this caller has no autocast path yet)",
                            name(), op));
}

#ifndef PARBENCH_HAVE_DNNL
// Without oneDNN the member stays empty; only its destructor is needed.
struct DnnlBf16::Impl {};
DnnlBf16::~DnnlBf16() = default;
#endif

#ifdef PARBENCH_HAVE_DNNL
#define PB_BF16(call)                                                                   \
  do {                                                                                  \
    PB_CHECK(bf16_ != nullptr, "{}: a bf16 op on a backend made for {}", name(), precision_name(precision_)); \
    bf16_->call;                                                                        \
  } while (0)
#else
// The discarded call names the arguments (no unused-parameter warnings) and needs no definition.
#define PB_BF16(call)                                                        \
  do {                                                                       \
    if constexpr (false) bf16_->call;                                        \
    throw Error(fmt::format("{}: no bf16 kernels in this build", name()));   \
  } while (0)
#endif

void CpuBackend::conv2d_forward_bf16(const ConvGeom& g, const Bf16* x, const Bf16* w, const Bf16* b, Bf16* y) {
  PB_BF16(conv_forward(g, x, w, b, y));
}
void CpuBackend::conv2d_backward_data_bf16(const ConvGeom& g, const Bf16* dy, const Bf16* w, Bf16* dx) {
  PB_BF16(conv_backward_data(g, dy, w, dx));
}
void CpuBackend::conv2d_backward_data_bf16_f32(const ConvGeom& g, const Bf16* dy, const Bf16* w, float* dx) {
  PB_BF16(conv_backward_data_f32(g, dy, w, dx));
}
void CpuBackend::conv2d_forward_bf16_f32(const ConvGeom& g, const Bf16* x, const Bf16* w, float* y) {
  PB_BF16(conv_forward_f32(g, x, w, y));
}
void CpuBackend::linear_backward_data_bf16_f32(int64_t n, int64_t in, int64_t out, const Bf16* dy, const Bf16* w,
                                               float* dx) {
  PB_BF16(linear_backward_data_f32(n, in, out, dy, w, dx));
}
void CpuBackend::conv2d_backward_weights_bf16(const ConvGeom& g, const Bf16* x, const Bf16* dy, float* dw, float* db,
                                              bool accumulate) {
  PB_BF16(conv_backward_weights(g, x, dy, dw, db, accumulate));
}
void CpuBackend::linear_forward_bf16(int64_t n, int64_t in, int64_t out, const Bf16* x, const Bf16* w, const Bf16* b,
                                     Bf16* y) {
  PB_BF16(linear_forward(n, in, out, x, w, b, y));
}
void CpuBackend::linear_backward_data_bf16(int64_t n, int64_t in, int64_t out, const Bf16* dy, const Bf16* w,
                                           Bf16* dx) {
  PB_BF16(linear_backward_data(n, in, out, dy, w, dx));
}
void CpuBackend::linear_backward_weights_bf16(int64_t n, int64_t in, int64_t out, const Bf16* x, const Bf16* dy,
                                              float* dw, float* db, bool accumulate) {
  PB_BF16(linear_backward_weights(n, in, out, x, dy, dw, accumulate));
  // db[o] = sum over the batch of dy[., o], in fp32 (as oneDNN's convolution bias gradient).
  for (int64_t o = 0; o < out; ++o) {
    float s = 0.0f;
    for (int64_t i = 0; i < n; ++i) s += pb::from_bf16(dy[i * out + o]);
    db[o] = accumulate ? db[o] + s : s;
  }
}

void CpuBackend::relu_forward_bf16(int64_t n, const Bf16* x, Bf16* y) {
  // As the fp32 ReLU.
  parallel_for(n, threads_, n, [=](int64_t i) { y[i] = pb::from_bf16(x[i]) > 0.0f ? x[i] : Bf16{0}; });
}

void CpuBackend::relu_backward_bf16(int64_t n, const Bf16* y, const Bf16* dy, Bf16* dx) {
  parallel_for(n, threads_, n, [=](int64_t i) { dx[i] = pb::from_bf16(y[i]) > 0.0f ? dy[i] : Bf16{0}; });
}

void CpuBackend::to_bf16(int64_t n, const float* src, Bf16* dst) {
  parallel_for(n, threads_, n, [=](int64_t i) { dst[i] = pb::to_bf16(src[i]); });
}

void CpuBackend::from_bf16(int64_t n, const Bf16* src, float* dst) {
  parallel_for(n, threads_, n, [=](int64_t i) { dst[i] = pb::from_bf16(src[i]); });
}

}  // namespace pb
