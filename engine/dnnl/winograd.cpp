// Winograd F(2x2, 3x3) (Lavin & Gray 2015): per 2x2 output tile, V = B^T d B of its 4x4 input
// patch, U = G g G^T of each filter, M = sum over input channels of U (.) V, then Y = A^T M A.
// The sums over channels are 16 matrix products [K x C] x [C x tiles], one batched oneDNN matmul;
// tiles go in chunks so the transformed tensors stay a few MiB.
#include "engine/dnnl/winograd.h"

#include <algorithm>
#include <array>
#include <map>
#include <utility>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "engine/check.h"
#include "engine/dnnl/omp_threads.h"

namespace pb {

namespace {

using dnnl::memory;
using Dt = memory::data_type;
using Tag = memory::format_tag;

int thread_num() {
#ifdef _OPENMP
  return omp_get_thread_num();
#else
  return 0;
#endif
}

// U = G g G^T of one 3x3 filter g (row-major); the 16 values go to u[xi * stride].
inline void filter_tile(const float* g, float* u, int64_t stride) {
  float t[4][3];
  for (int j = 0; j < 3; ++j) {
    const float g0 = g[j], g1 = g[3 + j], g2 = g[6 + j];
    t[0][j] = g0;
    t[1][j] = 0.5f * (g0 + g1 + g2);
    t[2][j] = 0.5f * (g0 - g1 + g2);
    t[3][j] = g2;
  }
  for (int i = 0; i < 4; ++i) {
    const float a = t[i][0], b = t[i][1], c = t[i][2];
    u[(i * 4 + 0) * stride] = a;
    u[(i * 4 + 1) * stride] = 0.5f * (a + b + c);
    u[(i * 4 + 2) * stride] = 0.5f * (a - b + c);
    u[(i * 4 + 3) * stride] = c;
  }
}

// dg += G^T M G, the 3x3 weight gradient of one filter from the 16 values m[xi * stride].
inline void filter_gradient(const float* m, int64_t stride, float* dg, bool accumulate) {
  float t[3][4];
  for (int j = 0; j < 4; ++j) {
    const float m0 = m[j * stride], m1 = m[(4 + j) * stride], m2 = m[(8 + j) * stride], m3 = m[(12 + j) * stride];
    t[0][j] = m0 + 0.5f * (m1 + m2);
    t[1][j] = 0.5f * (m1 - m2);
    t[2][j] = 0.5f * (m1 + m2) + m3;
  }
  for (int i = 0; i < 3; ++i) {
    const float a = t[i][0], b = t[i][1], c = t[i][2], d = t[i][3];
    const float g[3] = {a + 0.5f * (b + c), 0.5f * (b - c), 0.5f * (b + c) + d};
    for (int j = 0; j < 3; ++j) dg[i * 3 + j] = accumulate ? dg[i * 3 + j] + g[j] : g[j];
  }
}

}  // namespace

struct Winograd2x3::Impl {
  int threads;
  int64_t chunk_bytes;
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
  std::map<std::array<int64_t, 5>, dnnl::matmul> matmuls;
  std::vector<float> u, v, m, strips;
  WorkspaceCount count;  // u, v, m and strips as the device's workspace

  Impl(int t, std::size_t chunk, Device d) : threads(t), chunk_bytes(static_cast<int64_t>(chunk)), count(d) {}
  void counted() { count.set((u.capacity() + v.capacity() + m.capacity() + strips.capacity()) * sizeof(float)); }

  // 16 products [rows x inner] x [inner x cols]; the right factor stored transposed (as
  // [16][cols][inner]) when transposed_b, the result added to dst when sum.
  dnnl::matmul& matmul(int64_t rows, int64_t inner, int64_t cols, bool transposed_b = false, bool sum = false) {
    const std::array<int64_t, 5> key{rows, inner, cols, transposed_b, sum};
    auto it = matmuls.find(key);
    if (it != matmuls.end()) return it->second;
    const memory::desc a({16, rows, inner}, Dt::f32, Tag::abc),
        b({16, inner, cols}, Dt::f32, transposed_b ? Tag::acb : Tag::abc), c({16, rows, cols}, Dt::f32, Tag::abc);
    dnnl::primitive_attr attr;
    if (sum) {
      dnnl::post_ops ops;
      ops.append_sum(1.0f);
      attr.set_post_ops(ops);
    }
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, eng);
    return matmuls.emplace(key, dnnl::matmul(pd)).first->second;
  }

  // y (n x kout x P x Q) = conv3x3(x (n x cin x h x w), filters already in u as [16][kout][cin]),
  // stride 1, padding (ph, pw), plus bias b when given, then max(., 0) when relu.
  void run(int64_t n, int64_t cin, int64_t h, int64_t w, int64_t kout, int64_t ph, int64_t pw, const float* x,
           const float* b, float* y, bool relu = false) {
    const int64_t P = h + 2 * ph - 2, Q = w + 2 * pw - 2;
    const int64_t TH = (P + 1) / 2, TW = (Q + 1) / 2;
    const int64_t per_row = 16 * std::max(cin, kout) * TW * int64_t(sizeof(float));
    const int64_t R = std::clamp<int64_t>(chunk_bytes / per_row, 1, TH);  // tile rows per chunk
    const int64_t Wp = 2 * TW + 2, strip = (2 * R + 2) * Wp;
    v.resize(static_cast<std::size_t>(16 * cin * R * TW));
    m.resize(static_cast<std::size_t>(16 * kout * R * TW));
    strips.resize(static_cast<std::size_t>(strip * threads));  // (2R + 2)(2TW + 2) > 4TW for the output
    counted();
    for (int64_t img = 0; img < n; ++img)
      for (int64_t th0 = 0; th0 < TH; th0 += R) {
        const int64_t rows = std::min(R, TH - th0), nt = rows * TW;
        input_chunk(img, cin, h, w, ph, pw, th0, rows, TW, x, nt);
        {
          const memory::desc a({16, kout, cin}, Dt::f32, Tag::abc), bm({16, cin, nt}, Dt::f32, Tag::abc),
              c({16, kout, nt}, Dt::f32, Tag::abc);
          matmul(kout, cin, nt).execute(strm, {{DNNL_ARG_SRC, memory(a, eng, u.data())},
                                               {DNNL_ARG_WEIGHTS, memory(bm, eng, v.data())},
                                               {DNNL_ARG_DST, memory(c, eng, m.data())}});
          strm.wait();
        }
        output_chunk(img, kout, P, Q, th0, rows, TW, b, y, nt, relu);
      }
  }

  // The 3x3 weight gradient's Winograd form, M[xi][k][c] = sum over tiles of Z[xi][k][t] V[xi][c][t]
  // with Z = A dy A^T of each 2x2 tile of dy (zero past an odd edge) and V the forward's input
  // transform, into u; the caller applies G^T M G.
  void weight_gradient(int64_t n, int64_t cin, int64_t h, int64_t w, int64_t kout, int64_t ph, int64_t pw,
                       const float* x, const float* dy) {
    const int64_t P = h + 2 * ph - 2, Q = w + 2 * pw - 2;
    const int64_t TH = (P + 1) / 2, TW = (Q + 1) / 2;
    const int64_t per_row = 16 * std::max(cin, kout) * TW * int64_t(sizeof(float));
    const int64_t R = std::clamp<int64_t>(chunk_bytes / per_row, 1, TH);
    const int64_t Wp = 2 * TW + 2, strip = (2 * R + 2) * Wp;
    u.resize(static_cast<std::size_t>(16 * kout * cin));
    v.resize(static_cast<std::size_t>(16 * cin * R * TW));
    m.resize(static_cast<std::size_t>(16 * kout * R * TW));
    strips.resize(static_cast<std::size_t>(strip * threads));
    counted();
    bool first = true;
    for (int64_t img = 0; img < n; ++img)
      for (int64_t th0 = 0; th0 < TH; th0 += R) {
        const int64_t rows = std::min(R, TH - th0), nt = rows * TW;
        input_chunk(img, cin, h, w, ph, pw, th0, rows, TW, x, nt);
        gradient_chunk(img, kout, P, Q, th0, rows, TW, dy, nt);
        const memory::desc a({16, kout, nt}, Dt::f32, Tag::abc), bm({16, nt, cin}, Dt::f32, Tag::acb),
            c({16, kout, cin}, Dt::f32, Tag::abc);
        matmul(kout, nt, cin, true, !first)
            .execute(strm, {{DNNL_ARG_SRC, memory(a, eng, m.data())},
                            {DNNL_ARG_WEIGHTS, memory(bm, eng, v.data())},
                            {DNNL_ARG_DST, memory(c, eng, u.data())}});
        strm.wait();
        first = false;
      }
  }

  // Z[xi][k][t] = A dy A^T for the 2x2 tiles of dy in rows [th0, th0 + rows) of image img.
  void gradient_chunk(int64_t img, int64_t kout, int64_t P, int64_t Q, int64_t th0, int64_t rows, int64_t TW,
                      const float* dy, int64_t nt) {
    float* Z = m.data();
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t k = 0; k < kout; ++k) {
      float* s0 = strips.data() + static_cast<std::size_t>(thread_num()) * (strips.size() / threads);
      float* s1 = s0 + 2 * TW;
      const float* dyk = dy + (img * kout + k) * P * Q;
      const int64_t xs = kout * nt;
      for (int64_t tr = 0; tr < rows; ++tr) {
        const int64_t oh = 2 * (th0 + tr);
        std::copy(dyk + oh * Q, dyk + oh * Q + Q, s0);
        std::fill(s0 + Q, s0 + 2 * TW, 0.0f);
        if (oh + 1 < P) {
          std::copy(dyk + (oh + 1) * Q, dyk + (oh + 1) * Q + Q, s1);
          std::fill(s1 + Q, s1 + 2 * TW, 0.0f);
        } else {
          std::fill(s1, s1 + 2 * TW, 0.0f);
        }
        float* out = Z + k * nt + tr * TW;
#pragma omp simd
        for (int64_t tw = 0; tw < TW; ++tw) {
          const float d00 = s0[2 * tw], d01 = s0[2 * tw + 1], d10 = s1[2 * tw], d11 = s1[2 * tw + 1];
          // rows of A d: d0, d0 + d1, d0 - d1, -d1 (per column); then the same along each row.
          const float r[4][2] = {{d00, d01}, {d00 + d10, d01 + d11}, {d00 - d10, d01 - d11}, {-d10, -d11}};
          for (int i = 0; i < 4; ++i) {
            out[(i * 4 + 0) * xs + tw] = r[i][0];
            out[(i * 4 + 1) * xs + tw] = r[i][0] + r[i][1];
            out[(i * 4 + 2) * xs + tw] = r[i][0] - r[i][1];
            out[(i * 4 + 3) * xs + tw] = -r[i][1];
          }
        }
      }
    }
  }

  // V[xi][c][t] for the tiles of rows [th0, th0 + rows) of image img, through a zero-padded
  // copy of the input rows they read (so the tile loop has no bounds checks and vectorises).
  void input_chunk(int64_t img, int64_t cin, int64_t h, int64_t w, int64_t ph, int64_t pw, int64_t th0, int64_t rows,
                   int64_t TW, const float* x, int64_t nt) {
    const int64_t Wp = 2 * TW + 2;
    float* V = v.data();
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t c = 0; c < cin; ++c) {
      float* s = strips.data() + static_cast<std::size_t>(thread_num()) * (strips.size() / threads);
      const float* xc = x + (img * cin + c) * h * w;
      for (int64_t i = 0; i < 2 * rows + 2; ++i) {
        float* sr = s + i * Wp;
        const int64_t ih = 2 * th0 - ph + i;
        if (ih < 0 || ih >= h) {
          std::fill(sr, sr + Wp, 0.0f);
          continue;
        }
        const float* xr = xc + ih * w;
        for (int64_t j = 0; j < Wp; ++j) {
          const int64_t iw = j - pw;
          sr[j] = iw >= 0 && iw < w ? xr[iw] : 0.0f;
        }
      }
      for (int64_t tr = 0; tr < rows; ++tr) {
        const float* r0 = s + 2 * tr * Wp;
        const float* r1 = r0 + Wp;
        const float* r2 = r1 + Wp;
        const float* r3 = r2 + Wp;
        float* out = V + c * nt + tr * TW;
        const int64_t xs = cin * nt;  // stride between the 16 transformed values
#pragma omp simd
        for (int64_t tw = 0; tw < TW; ++tw) {
          float a[4][4];
          for (int j = 0; j < 4; ++j) {
            const float d0 = r0[2 * tw + j], d1 = r1[2 * tw + j], d2 = r2[2 * tw + j], d3 = r3[2 * tw + j];
            a[0][j] = d0 - d2;
            a[1][j] = d1 + d2;
            a[2][j] = d2 - d1;
            a[3][j] = d1 - d3;
          }
          for (int i = 0; i < 4; ++i) {
            out[(i * 4 + 0) * xs + tw] = a[i][0] - a[i][2];
            out[(i * 4 + 1) * xs + tw] = a[i][1] + a[i][2];
            out[(i * 4 + 2) * xs + tw] = a[i][2] - a[i][1];
            out[(i * 4 + 3) * xs + tw] = a[i][1] - a[i][3];
          }
        }
      }
    }
  }

  // Y = A^T M A per tile, plus bias (and ReLU), into the rows of y the chunk covers (P, Q may be odd).
  void output_chunk(int64_t img, int64_t kout, int64_t P, int64_t Q, int64_t th0, int64_t rows, int64_t TW,
                    const float* b, float* y, int64_t nt, bool relu) {
    const float* M = m.data();
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t k = 0; k < kout; ++k) {
      float* s = strips.data() + static_cast<std::size_t>(thread_num()) * (strips.size() / threads);
      float* s0 = s;
      float* s1 = s + 2 * TW;
      const float bias = b ? b[k] : 0.0f;
      float* yk = y + (img * kout + k) * P * Q;
      const int64_t xs = kout * nt;
      for (int64_t tr = 0; tr < rows; ++tr) {
        const float* in = M + k * nt + tr * TW;
#pragma omp simd
        for (int64_t tw = 0; tw < TW; ++tw) {
          float c[2][4];
          for (int j = 0; j < 4; ++j) {
            const float m0 = in[j * xs + tw], m1 = in[(4 + j) * xs + tw], m2 = in[(8 + j) * xs + tw],
                        m3 = in[(12 + j) * xs + tw];
            c[0][j] = m0 + m1 + m2;
            c[1][j] = m1 - m2 - m3;
          }
          s0[2 * tw] = c[0][0] + c[0][1] + c[0][2] + bias;
          s0[2 * tw + 1] = c[0][1] - c[0][2] - c[0][3] + bias;
          s1[2 * tw] = c[1][0] + c[1][1] + c[1][2] + bias;
          s1[2 * tw + 1] = c[1][1] - c[1][2] - c[1][3] + bias;
        }
        if (relu) {
#pragma omp simd
          for (int64_t i = 0; i < 4 * TW; ++i) s[i] = s[i] > 0.0f ? s[i] : 0.0f;  // s1 = s + 2 TW
        }
        const int64_t oh = 2 * (th0 + tr);
        std::copy(s0, s0 + Q, yk + oh * Q);
        if (oh + 1 < P) std::copy(s1, s1 + Q, yk + (oh + 1) * Q);
      }
    }
  }
};

Winograd2x3::Winograd2x3(int threads, std::size_t chunk_bytes, Device device)
    : impl_(std::make_unique<Impl>(std::max(1, threads), chunk_bytes, device)) {}
Winograd2x3::~Winograd2x3() = default;

void Winograd2x3::release_scratch() {
  Impl& I = *impl_;
  for (std::vector<float>* b : {&I.u, &I.v, &I.m, &I.strips}) std::vector<float>().swap(*b);
  I.counted();
}

bool Winograd2x3::applies(const ConvGeom& g) {
  return g.r == 3 && g.s == 3 && g.stride_h == 1 && g.stride_w == 1 && g.pad_h >= 0 && g.pad_h <= 2 &&
         g.pad_w >= 0 && g.pad_w <= 2 && g.p() >= 1 && g.q() >= 1;
}

void Winograd2x3::forward(const ConvGeom& g, const float* x, const float* w, const float* b, float* y, bool relu) {
  PB_CHECK(applies(g), "Winograd F(2x2, 3x3): needs a 3x3 kernel, stride 1, padding 0-2");
  Impl& I = *impl_;
  OmpThreads omp(I.threads);
  I.u.resize(static_cast<std::size_t>(16 * g.k * g.c));
  const int64_t kc = g.k * g.c;
  float* U = I.u.data();
#pragma omp parallel for num_threads(I.threads) schedule(static)
  for (int64_t i = 0; i < kc; ++i) filter_tile(w + i * 9, U + i, kc);
  try {
    I.run(g.n, g.c, g.h, g.w, g.k, g.pad_h, g.pad_w, x, b, y, relu);
  } catch (const dnnl::error& e) {
    throw Error(fmt::format("oneDNN matmul of Winograd forward ({} -> {} channels): {}", g.c, g.k, e.what()));
  }
}

// dx = the full correlation of dy with the filters flipped and their channels swapped: a forward
// convolution of dy (K channels, P x Q) with padding 2 - pad, whose output is H x W again
// (P = H + 2 pad - 2 at stride 1).
void Winograd2x3::backward_data(const ConvGeom& g, const float* dy, const float* w, float* dx) {
  PB_CHECK(applies(g), "Winograd F(2x2, 3x3): needs a 3x3 kernel, stride 1, padding 0-2");
  Impl& I = *impl_;
  OmpThreads omp(I.threads);
  I.u.resize(static_cast<std::size_t>(16 * g.k * g.c));
  const int64_t kc = g.k * g.c;
  float* U = I.u.data();
#pragma omp parallel for num_threads(I.threads) schedule(static)
  for (int64_t i = 0; i < kc; ++i) {  // i = c * K + k: U'[xi][c][k] from w[k][c] flipped
    const int64_t c = i / g.k, k = i % g.k;
    const float* src = w + (k * g.c + c) * 9;
    float flipped[9];
    for (int j = 0; j < 9; ++j) flipped[j] = src[8 - j];
    filter_tile(flipped, U + i, kc);
  }
  try {
    I.run(g.n, g.k, g.p(), g.q(), g.c, 2 - g.pad_h, 2 - g.pad_w, dy, nullptr, dx);
  } catch (const dnnl::error& e) {
    throw Error(fmt::format("oneDNN matmul of Winograd backward data ({} -> {} channels): {}", g.k, g.c, e.what()));
  }
}

void Winograd2x3::backward_weights(const ConvGeom& g, const float* x, const float* dy, float* dw, float* db,
                                   bool accumulate) {
  PB_CHECK(applies(g), "Winograd F(2x2, 3x3): needs a 3x3 kernel, stride 1, padding 0-2");
  Impl& I = *impl_;
  OmpThreads omp(I.threads);
  try {
    I.weight_gradient(g.n, g.c, g.h, g.w, g.k, g.pad_h, g.pad_w, x, dy);
  } catch (const dnnl::error& e) {
    throw Error(fmt::format("oneDNN matmul of Winograd backward weights ({} -> {} channels): {}", g.c, g.k, e.what()));
  }
  const int64_t kc = g.k * g.c, PQ = g.p() * g.q();
  const float* M = I.u.data();
#pragma omp parallel for num_threads(I.threads) schedule(static)
  for (int64_t i = 0; i < kc; ++i) filter_gradient(M + i, kc, dw + i * 9, accumulate);
  if (db) {
#pragma omp parallel for num_threads(I.threads) schedule(static)
    for (int64_t k = 0; k < g.k; ++k) {
      double sum = 0;
      for (int64_t img = 0; img < g.n; ++img) {
        const float* d = dy + (img * g.k + k) * PQ;
        for (int64_t i = 0; i < PQ; ++i) sum += d[i];
      }
      db[k] = static_cast<float>(sum) + (accumulate ? db[k] : 0.0f);
    }
  }
}

}  // namespace pb
