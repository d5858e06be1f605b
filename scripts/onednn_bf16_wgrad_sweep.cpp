// oneDNN's bf16 convolution weight gradient (the layouts it prefers, as
// engine/dnnl/dnnl_bf16.cpp asks for them) against an exact sum, over small
// geometries; prints each wrong one and the count. Rechecks the workaround
// docs/bf16.md ("oneDNN") describes when oneDNN changes:
//   g++ -O1 -std=c++17 scripts/onednn_bf16_wgrad_sweep.cpp -ldnnl -o /tmp/sweep
//   && /tmp/sweep [plain]
// `plain`: where stride > H or > W, as parbench runs them: NCHW layouts and at
// least two input and output channels (the added ones zero).
#include <cmath>
#include <cstdio>
#include <algorithm>
#include <cstring>
#include <oneapi/dnnl/dnnl.hpp>
#include <random>
#include <string>
#include <utility>
#include <vector>
using namespace dnnl;
using tag = memory::format_tag;
using dt = memory::data_type;
static uint16_t bf(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u >> 16;
}
static float fb(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
int main(int argc, char **argv) {
  const bool plain = argc > 1 && std::string(argv[1]) == "plain";
  engine eng(engine::kind::cpu, 0);
  stream s(eng);
  std::mt19937 g(1);
  std::normal_distribution<float> nd;
  int bad = 0, total = 0, refs = 0;
  for (const auto [C, K] : {std::pair{7, 3}, {1, 3}, {7, 1}, {1, 1}})
  for (int H = 1; H <= 4; H++)
    for (int W = 1; W <= 12; W++)
      for (int R = 1; R <= 3; R++)
        for (int S = 1; S <= 5; S++)
          for (int sh = 1; sh <= 3; sh++)
            for (int sw = 1; sw <= 3; sw++)
              for (int ph = 0; ph <= 1; ph++)
                for (int pw = 0; pw <= 2; pw++) {
                  const int N = 3;
                  int P = (H + 2 * ph - R) / sh + 1,
                      Q = (W + 2 * pw - S) / sw + 1;
                  if (P < 1 || Q < 1)
                    continue;
                  const bool narrow = plain && (sw > W || sh > H);
                  // The primitive's channels: padded where narrow.
                  const int Cp = narrow ? std::max(C, 2) : C,
                            Kp = narrow ? std::max(K, 2) : K;
                  memory::dims src{N, Cp, H, W}, wei{Kp, Cp, R, S},
                      dst{N, Kp, P, Q}, bias{Kp}, st{sh, sw}, pd{ph, pw};
                  auto any = [&](memory::dims d, dt t) {
                    return memory::desc(d, t, tag::any);
                  };
                  convolution_forward::primitive_desc fpd(
                      convolution_forward::desc(
                          prop_kind::forward_training,
                          algorithm::convolution_direct, any(src, dt::bf16),
                          any(wei, dt::bf16),
                          memory::desc(bias, dt::bf16, tag::x),
                          any(dst, dt::bf16), st, pd, pd),
                      eng);
                  auto fmt = [&](memory::dims d, dt t) {
                    return narrow ? memory::desc(d, t, tag::nchw)
                                  : memory::desc(d, t, tag::any);
                  };
                  convolution_backward_weights::primitive_desc wpd(
                      convolution_backward_weights::desc(
                          algorithm::convolution_direct, fmt(src, dt::bf16),
                          fmt(wei, dt::f32),
                          memory::desc(bias, dt::f32, tag::x),
                          fmt(dst, dt::bf16), st, pd, pd),
                      eng, fpd);
                  // Padded channels (c >= C, k >= K) hold zeros.
                  std::vector<uint16_t> x(N * Cp * H * W, 0), dy(N * Kp * P * Q, 0);
                  for (int i = 0; i < N * Cp * H * W; i++)
                    if (i / (H * W) % Cp < C)
                      x[i] = bf(nd(g));
                  for (int i = 0; i < N * Kp * P * Q; i++)
                    if (i / (P * Q) % Kp < K)
                      dy[i] = bf(nd(g));
                  std::vector<float> dw(Kp * Cp * R * S, NAN), db(Kp);
                  memory ux({src, dt::bf16, tag::nchw}, eng, x.data()),
                      udy({dst, dt::bf16, tag::nchw}, eng, dy.data()),
                      udw({wei, dt::f32, tag::oihw}, eng, dw.data()),
                      udb({bias, dt::f32, tag::x}, eng, db.data());
                  memory mx(wpd.src_desc(), eng), mdy(wpd.diff_dst_desc(), eng),
                      mdw(wpd.diff_weights_desc(), eng);
                  reorder(ux, mx).execute(s, ux, mx);
                  reorder(udy, mdy).execute(s, udy, mdy);
                  convolution_backward_weights(wpd).execute(
                      s, {{DNNL_ARG_SRC, mx},
                          {DNNL_ARG_DIFF_DST, mdy},
                          {DNNL_ARG_DIFF_WEIGHTS, mdw},
                          {DNNL_ARG_DIFF_BIAS, udb}});
                  reorder(mdw, udw).execute(s, mdw, udw);
                  s.wait();
                  double worst = 0;
                  for (int k = 0; k < K; k++)
                    for (int c = 0; c < C; c++)
                      for (int r = 0; r < R; r++)
                        for (int q = 0; q < S; q++) {
                          double a = 0;
                          for (int n = 0; n < N; n++)
                            for (int p = 0; p < P; p++)
                              for (int o = 0; o < Q; o++) {
                                int h = p * sh + r - ph, w = o * sw + q - pw;
                                if (h < 0 || h >= H || w < 0 || w >= W)
                                  continue;
                                a += double(
                                         fb(x[((n * Cp + c) * H + h) * W + w])) *
                                     fb(dy[((n * Kp + k) * P + p) * Q + o]);
                              }
                          double e =
                              std::fabs(a - dw[((k * Cp + c) * R + r) * S + q]);
                          if (!(e < 1e-2))
                            worst = 1e9;
                        }
                  total++;
                  if (worst > 0) {
                    bad++;
                    printf(
                        "BAD %s C%d K%d H%d W%d R%d S%d sh%d sw%d ph%d pw%d P%d Q%d\n",
                        wpd.impl_info_str(), C, K, H, W, R, S, sh, sw, ph, pw, P, Q);
                  } else if (std::string(wpd.impl_info_str()).rfind("ref", 0) == 0) {
                    refs++;  // parbench refuses these (emulated bf16)
                    printf("REF C%d K%d H%d W%d R%d S%d sh%d sw%d ph%d pw%d\n", C, K, H, W, R, S, sh, sw, ph, pw);
                  }
                }
  printf("%d bad and %d reference kernels of %d\n", bad, refs, total);
}
