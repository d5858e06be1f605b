// The CPU backend's ops of nets with skips and scales: the residual add, 2x2 max pooling and
// nearest 2x upsampling, in fp32 and bf16 (each value computed in fp32, rounded once), and the
// per-channel bias and its gradient a transposed convolution adds to the convolution's passes.
// Every loop runs over the values it writes, so no two threads write one value.
#include <cmath>
#include <type_traits>

#include "engine/cpu_backend.h"
#include "engine/cpu_parallel.h"

namespace pb {

namespace {

inline float load(float v) { return v; }
inline float load(Bf16 v) { return pb::from_bf16(v); }
template <class T>
inline T store(float v) {
  if constexpr (std::is_same_v<T, Bf16>) return pb::to_bf16(v);
  else return v;
}

// Which of a window's four values (0: top left, 1: top right, 2, 3: the row below) is its first
// largest, a NaN winning as in PyTorch's max_pool2d.
inline int argmax4(const float v[4]) {
  int at = 0;
  for (int i = 1; i < 4; ++i)
    if (v[i] > v[at] || std::isnan(v[i])) at = i;
  return at;
}

template <class T>
void add_impl(int threads, int64_t n, const T* a, const T* b, T* y) {
  parallel_for(n, threads, n, [=](int64_t i) { y[i] = store<T>(load(a[i]) + load(b[i])); });
}

template <class T>
void window(const Planes& s, const T* x, int64_t plane, int64_t i, int64_t j, float v[4]) {
  const T* at = x + plane * s.h * s.w + 2 * i * s.w + 2 * j;
  v[0] = load(at[0]), v[1] = load(at[1]), v[2] = load(at[s.w]), v[3] = load(at[s.w + 1]);
}

template <class T>
void max_pool_forward_impl(int threads, const Planes& s, const T* x, T* y) {
  const int64_t ho = s.h / 2, wo = s.w / 2, n = s.n * s.c * ho * wo;
  parallel_for(4 * n, threads, n, [=](int64_t o) {
    float v[4];
    window(s, x, o / (ho * wo), o % (ho * wo) / wo, o % wo, v);
    y[o] = store<T>(v[argmax4(v)]);
  });
}

template <class T>
void max_pool_backward_impl(int threads, const Planes& s, const T* x, const T* dy, T* dx) {
  const int64_t ho = s.h / 2, wo = s.w / 2, n = s.numel();
  parallel_for(n, threads, n, [=](int64_t e) {
    const int64_t plane = e / (s.h * s.w), r = e % (s.h * s.w) / s.w, c = e % s.w;
    float g = 0;
    if (r < 2 * ho && c < 2 * wo) {
      float v[4];
      window(s, x, plane, r / 2, c / 2, v);
      if (argmax4(v) == (r % 2) * 2 + c % 2) g = load(dy[(plane * ho + r / 2) * wo + c / 2]);
    }
    dx[e] = store<T>(g);
  });
}

template <class T>
void upsample_forward_impl(int threads, const Planes& s, const T* x, T* y) {
  const int64_t h2 = 2 * s.h, w2 = 2 * s.w, n = s.numel() * 4;
  parallel_for(n, threads, n, [=](int64_t o) {
    const int64_t plane = o / (h2 * w2), r = o % (h2 * w2) / w2, c = o % w2;
    y[o] = x[(plane * s.h + r / 2) * s.w + c / 2];
  });
}

template <class T>
void upsample_backward_impl(int threads, const Planes& s, const T* dy, T* dx) {
  const int64_t w2 = 2 * s.w, n = s.numel();
  parallel_for(4 * n, threads, n, [=](int64_t e) {
    const int64_t plane = e / (s.h * s.w), r = e % (s.h * s.w) / s.w, c = e % s.w;
    const T* at = dy + (plane * 2 * s.h + 2 * r) * w2 + 2 * c;
    dx[e] = store<T>(load(at[0]) + load(at[1]) + load(at[w2]) + load(at[w2 + 1]));
  });
}

template <class T>
void add_channel_bias_impl(int threads, int64_t n, int64_t channels, int64_t inner, const T* b, T* y) {
  parallel_for(n * channels * inner, threads, n * channels, [=](int64_t plane) {
    const float v = load(b[plane % channels]);
    for (int64_t j = 0; j < inner; ++j) y[plane * inner + j] = store<T>(load(y[plane * inner + j]) + v);
  });
}

template <class T>
void channel_sums_impl(int threads, int64_t n, int64_t channels, int64_t inner, const T* dy, float* db, bool accumulate) {
  parallel_for(n * channels * inner, threads, channels, [=](int64_t c) {
    double s = 0;  // in double, as the convolutions' bias gradients
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < inner; ++j) s += load(dy[(i * channels + c) * inner + j]);
    db[c] = accumulate ? db[c] + static_cast<float>(s) : static_cast<float>(s);
  });
}

}  // namespace

void CpuBackend::add(int64_t n, const float* a, const float* b, float* y) { add_impl(threads_, n, a, b, y); }
void CpuBackend::max_pool2x2_forward(const Planes& s, const float* x, float* y) { max_pool_forward_impl(threads_, s, x, y); }
void CpuBackend::max_pool2x2_backward(const Planes& s, const float* x, const float* dy, float* dx) {
  max_pool_backward_impl(threads_, s, x, dy, dx);
}
void CpuBackend::upsample2x_forward(const Planes& s, const float* x, float* y) { upsample_forward_impl(threads_, s, x, y); }
void CpuBackend::upsample2x_backward(const Planes& s, const float* dy, float* dx) {
  upsample_backward_impl(threads_, s, dy, dx);
}

void CpuBackend::add_channel_bias(int64_t n, int64_t channels, int64_t inner, const float* b, float* y) {
  add_channel_bias_impl(threads_, n, channels, inner, b, y);
}
void CpuBackend::channel_sums(int64_t n, int64_t channels, int64_t inner, const float* dy, float* db, bool accumulate) {
  channel_sums_impl(threads_, n, channels, inner, dy, db, accumulate);
}
void CpuBackend::add_channel_bias_bf16(int64_t n, int64_t channels, int64_t inner, const Bf16* b, Bf16* y) {
  add_channel_bias_impl(threads_, n, channels, inner, b, y);
}
void CpuBackend::channel_sums_bf16(int64_t n, int64_t channels, int64_t inner, const Bf16* dy, float* db, bool accumulate) {
  channel_sums_impl(threads_, n, channels, inner, dy, db, accumulate);
}

void CpuBackend::add_bf16(int64_t n, const Bf16* a, const Bf16* b, Bf16* y) { add_impl(threads_, n, a, b, y); }
void CpuBackend::max_pool2x2_forward_bf16(const Planes& s, const Bf16* x, Bf16* y) {
  max_pool_forward_impl(threads_, s, x, y);
}
void CpuBackend::max_pool2x2_backward_bf16(const Planes& s, const Bf16* x, const Bf16* dy, Bf16* dx) {
  max_pool_backward_impl(threads_, s, x, dy, dx);
}
void CpuBackend::upsample2x_forward_bf16(const Planes& s, const Bf16* x, Bf16* y) {
  upsample_forward_impl(threads_, s, x, y);
}
void CpuBackend::upsample2x_backward_bf16(const Planes& s, const Bf16* dy, Bf16* dx) {
  upsample_backward_impl(threads_, s, dy, dx);
}

}  // namespace pb
