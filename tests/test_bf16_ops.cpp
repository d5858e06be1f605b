// bf16 ops (Precision::Bf16) against the double reference, with tolerances derived from how the
// ops round: inputs are bf16 values, sums are fp32 (error at most (K+1) 2^-24 sum|terms| for K
// terms, any order), and forward / backward-data round that once to bf16 (8 significant bits:
// relative error at most 2^-8); weight gradients stay fp32. Plus conversions, the dtype-aware
// Tensor, the precision's name, and the refusal where a CPU has no bf16 kernels.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <tuple>

#include "engine/check.h"
#include "engine/cpu_backend.h"
#include "engine/tensor.h"
#include "reference.h"
#include "tests/gpu_skip.h"
#include "tests/bf16_skip.h"
#include "tests/support.h"
#ifdef PARBENCH_HAVE_DNNL
#include <oneapi/dnnl/dnnl_types.h>

#include "engine/dnnl/dnnl_bf16.h"
#endif

namespace pb {
namespace {

using test::geom_str;
using test::Rand;
using test::random_geom;
using test::swap_inner;

constexpr double kFp32 = 1.0 / (1 << 24);  // fp32's unit roundoff
constexpr double kBf16 = 1.0 / (1 << 8);   // bf16's: 8 significant bits, round to nearest

std::unique_ptr<Backend> bf16_backend() {
  BackendOptions o;
  o.threads = 2;
  o.precision = Precision::Bf16;
  return make_backend(cpu(), o);
}

// Random normal values rounded to bf16, as host floats (exact in double) and as bf16.
struct Vals {
  std::vector<float> f;
  std::vector<Bf16> b;
};
Vals bf16_vals(Rand& r, int64_t n) {
  Vals v{r.vec(n), {}};
  for (float& x : v.f) v.b.push_back(to_bf16(x)), x = from_bf16(v.b.back());
  return v;
}
ref::Vec absd(const std::vector<float>& v) {
  ref::Vec a;
  for (float x : v) a.push_back(std::abs(double(x)));
  return a;
}
std::vector<float> widen(const std::vector<Bf16>& v) {
  std::vector<float> f;
  for (Bf16 b : v) f.push_back(from_bf16(b));
  return f;
}

// How an output reaches bf16: not at all (fp32), rounded once at the end, or (cuDNN) with partial
// sums rounded to bf16 on the way: split reductions and multi-pass kernels round each partial sum,
// and the partial sums' magnitudes add up to at most the terms' magnitude sum mag[i], so the
// rounding error is at most 2^-8 (|want[i]| + mag[i]). cuDNN does not document its bf16 kernels'
// rounding; on an H200 (cuDNN 9.19) its results were up to 2 bf16 ulps from the exact sum, twice
// what one rounding allows.
enum class Rounded { No, Once, Partials };

// Every got[i] within (K+1) 2^-24 mag[i] of want[i], then within the bf16 rounding of that.
void expect_within(const std::vector<float>& got, const ref::Vec& want, const ref::Vec& mag, int64_t k, Rounded rounded,
                   const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double worst = -1;
  std::size_t at = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double acc = double(k + 1) * kFp32 * mag[i];
    const double bound = rounded == Rounded::No     ? acc
                         : rounded == Rounded::Once ? kBf16 * (std::abs(want[i]) + acc) + acc
                                                    : kBf16 * (std::abs(want[i]) + mag[i]) + acc;
    const double excess = std::abs(double(got[i]) - want[i]) - bound;
    if (!(excess <= 0) && (worst < 0 || !(excess <= worst))) worst = std::isnan(excess) ? INFINITY : excess, at = i;
  }
  EXPECT_LT(worst, 0) << what << ": element " << at << " got " << got[at] << ", reference " << want[at]
                      << " (bound exceeded by " << worst << ")";
}

TEST(Bf16Convert, RoundsToNearestEvenLikeTorch) {
  const float ulp1 = 1.0f / 128;  // bf16's spacing in [1, 2)
  EXPECT_EQ(round_bf16(1.0f + ulp1 / 2), 1.0f);                         // tie: to even (1.0)
  EXPECT_EQ(round_bf16(1.0f + 3 * ulp1 / 2), 1.0f + 2 * ulp1);          // tie: to even (up)
  EXPECT_EQ(round_bf16(1.0f + ulp1 / 2 + 1e-6f), 1.0f + ulp1);          // above the tie: up
  EXPECT_EQ(round_bf16(-1.0f - ulp1 / 2 - 1e-6f), -1.0f - ulp1);
  EXPECT_EQ(round_bf16(std::numeric_limits<float>::max()), INFINITY);   // overflows, as torch's cast
  EXPECT_EQ(round_bf16(-INFINITY), -INFINITY);
  EXPECT_TRUE(std::isnan(round_bf16(NAN)));
  EXPECT_EQ(to_bf16(-0.0f).bits, 0x8000);
  EXPECT_EQ(from_bf16(Bf16{0x3f80}), 1.0f);
}

TEST(Bf16Convert, BackendConversionsEqualTheHostOnes) {
  SKIP_WITHOUT_BF16();
  auto be = bf16_backend();
  Rand r;
  std::vector<float> x = r.vec(100000);  // above the threading grain
  x[0] = NAN, x[1] = INFINITY, x[2] = 1.0f + 1.0f / 256;
  std::vector<Bf16> b(x.size());
  be->to_bf16(static_cast<int64_t>(x.size()), x.data(), b.data());
  std::vector<float> back(x.size());
  be->from_bf16(static_cast<int64_t>(b.size()), b.data(), back.data());
  for (std::size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(b[i].bits, to_bf16(x[i]).bits) << "seed " << r.seed << " element " << i;
    if (i > 0) {
      ASSERT_EQ(back[i], round_bf16(x[i])) << "element " << i;
    }
  }
}

TEST(Bf16Tensor, HoldsTwoBytesPerElementAndWidensToHost) {
  Tensor t = Tensor::empty({6}, cpu(), DType::Bf16);
  EXPECT_EQ(t.bytes(), 12u);
  EXPECT_EQ(t.dtype(), DType::Bf16);
  const float vals[6] = {1.0f, -2.5f, 0.0f, 3.0f, 1.0f / 3, 7.0f};
  for (int i = 0; i < 6; ++i) t.data_bf16()[i] = to_bf16(vals[i]);
  const Tensor v = t.view(2, {3});
  EXPECT_EQ(v.dtype(), DType::Bf16);
  EXPECT_EQ(v.data_bf16(), t.data_bf16() + 2);
  EXPECT_EQ(v.to_host(), (std::vector<float>{0.0f, 3.0f, round_bf16(1.0f / 3)}));
  EXPECT_THROW(t.data(), Error);  // a bf16 buffer never passes for a float one
  EXPECT_THROW(Tensor::empty({3}, cpu()).data_bf16(), Error);
  Tensor f = Tensor::empty({6}, cpu());
  EXPECT_THROW(f.copy_from(t), Error);
  Tensor u = Tensor::empty({6}, cpu(), DType::Bf16);
  u.copy_from(t);
  EXPECT_EQ(u.to_host(), t.to_host());
  EXPECT_THROW(t.view(5, {2}), Error);  // bounds in bf16 elements
}

TEST(Bf16Precision, ParsesAndNamesBf16) {
  EXPECT_EQ(parse_precision("bf16"), Precision::Bf16);
  EXPECT_STREQ(precision_name(Precision::Bf16), "bf16");
  EXPECT_STREQ(precision_name(Precision::Tf32), "tf32");
  try {
    parse_precision("fp16");
    FAIL() << "fp16 accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("bf16"), std::string::npos) << e.what();
  }
}

// Host values in a buffer on be's device, and back.
template <class T>
struct DevBuf {
  DevBuf(Backend& b, const std::vector<T>& h)
      : be(b), n(h.size()), buf(std::make_unique<Buffer>(b.device(), n * sizeof(T))) {
    be.copy(be.device(), buf->data(), cpu(), h.data(), n * sizeof(T));
    be.synchronize();  // h may go before a queued copy would run
  }
  T* p() const { return static_cast<T*>(buf->data()); }
  std::vector<T> host() const {
    std::vector<T> h(n);
    be.copy(cpu(), h.data(), be.device(), buf->data(), n * sizeof(T));
    be.synchronize();
    return h;
  }
  Backend& be;
  std::size_t n;
  std::unique_ptr<Buffer> buf;
};
template <class T>
DevBuf<T> dev(Backend& be, const std::vector<T>& h) {
  return DevBuf<T>(be, h);
}

// Conv passes of be against the reference. cudnn: outputs may round partial sums to bf16, and the
// weight gradient is rounded to bf16 before it is widened (as PyTorch's autocast gets it). io: the
// layouts of x/dx and y/dy (Blocked: NHWC, the CUDA backend's --layout nhwc), converted here.
void check_conv_at(Backend& be, bool cudnn, const ConvGeom& g, Rand& r, ConvLayouts io = {}) {
  const Rounded out = cudnn ? Rounded::Partials : Rounded::Once;
  {
    const int64_t xn = g.n * g.c * g.h * g.w, wn = g.k * g.c * g.r * g.s, yn = g.n * g.k * g.p() * g.q();
    const int64_t hw = g.h * g.w, pq = g.p() * g.q();
    const bool x_nhwc = io.x == ActLayout::Blocked, y_nhwc = io.y == ActLayout::Blocked;
    const Vals x = bf16_vals(r, xn), w = bf16_vals(r, wn), b = bf16_vals(r, g.k), dy = bf16_vals(r, yn);
    const auto X16 = dev(be, x_nhwc ? swap_inner(x.b, g.n, g.c, hw) : x.b), W16 = dev(be, w.b), B16 = dev(be, b.b),
               DY16 = dev(be, y_nhwc ? swap_inner(dy.b, g.n, g.k, pq) : dy.b);
    // NaN: every element must be written.
    auto Y = dev(be, std::vector<Bf16>(yn, Bf16{0x7fc0})), DX = dev(be, std::vector<Bf16>(xn, Bf16{0x7fc0}));
    auto DW = dev(be, std::vector<float>(wn, NAN)), DB = dev(be, std::vector<float>(g.k, NAN));
    be.conv2d_forward_bf16_in(g, io, X16.p(), W16.p(), B16.p(), Y.p());
    be.conv2d_backward_data_bf16_in(g, io, DY16.p(), W16.p(), DX.p());
    be.conv2d_backward_weights_bf16_in(g, io, X16.p(), DY16.p(), DW.p(), DB.p(), false);
    const auto y_nchw = [&] { return y_nhwc ? swap_inner(Y.host(), g.n, pq, g.k) : Y.host(); };
    const auto dx_nchw = [&] { return x_nhwc ? swap_inner(DX.host(), g.n, hw, g.c) : DX.host(); };
    const auto X = ref::to_double(x.f), W = ref::to_double(w.f), B = ref::to_double(b.f), DY = ref::to_double(dy.f);
    const auto aX = absd(x.f), aW = absd(w.f), aB = absd(b.f), aDY = absd(dy.f);
    expect_within(widen(y_nchw()), ref::conv2d_forward(g, X, W, B), ref::conv2d_forward(g, aX, aW, aB),
                  g.c * g.r * g.s + 1, out, "forward");
    expect_within(widen(dx_nchw()), ref::conv2d_backward_data(g, DY, W), ref::conv2d_backward_data(g, aDY, aW),
                  g.k * g.r * g.s, out, "backward data");
    if (!cudnn && io.plain()) {  // tp's partial input gradients: fp32 accumulation, no rounding
      auto DX32 = dev(be, std::vector<float>(xn, NAN));
      be.conv2d_backward_data_bf16_f32(g, DY16.p(), W16.p(), DX32.p());
      expect_within(DX32.host(), ref::conv2d_backward_data(g, DY, W), ref::conv2d_backward_data(g, aDY, aW),
                    g.k * g.r * g.s, Rounded::No, "backward data, fp32 output");
      // and forward without bias (a split transposed conv's partial input gradient)
      auto Y32 = dev(be, std::vector<float>(yn, NAN));
      be.conv2d_forward_bf16_f32(g, X16.p(), W16.p(), Y32.p());
      const ref::Vec none(static_cast<std::size_t>(g.k), 0.0);
      expect_within(Y32.host(), ref::conv2d_forward(g, X, W, none), ref::conv2d_forward(g, aX, aW, none), g.c * g.r * g.s,
                    Rounded::No, "forward, fp32 output");
    }
    ref::Vec rdw, rdb, mdw, mdb;
    ref::conv2d_backward_weights(g, X, DY, rdw, rdb);
    ref::conv2d_backward_weights(g, aX, aDY, mdw, mdb);
    const int64_t terms = g.n * g.p() * g.q();
    expect_within(DW.host(), rdw, mdw, terms, cudnn ? Rounded::Partials : Rounded::No, "backward weights");
    expect_within(DB.host(), rdb, mdb, terms, Rounded::No, "bias gradient");
    if (cudnn || !io.plain()) return;  // accumulating adds a rounding per addend: checked on the fp32 path only
    // accumulate adds the same fp32 values (one more fp32 rounding per element: 2K+1 terms)
    be.conv2d_backward_weights_bf16(g, X16.p(), DY16.p(), DW.p(), DB.p(), true);
    for (auto* v : {&rdw, &rdb, &mdw, &mdb})
      for (double& e : *v) e *= 2;
    expect_within(DW.host(), rdw, mdw, 2 * terms, Rounded::No, "accumulated weights");
    expect_within(DB.host(), rdb, mdb, 2 * terms, Rounded::No, "accumulated bias");
  }
}

void check_conv(Backend& be, bool cudnn) {
  Rand r;
  for (int trial = 0; trial < 20; ++trial) {
    const ConvGeom g = random_geom(r);
    SCOPED_TRACE(fmt::format("seed {} trial {}: {}", r.seed, trial, geom_str(g)));
    EXPECT_NO_THROW(check_conv_at(be, cudnn, g, r));
  }
}

// Inputs narrower than their stride (1 wide at stride 2, 2 wide at stride 3), a kernel tap wholly
// in the padding: oneDNN 2.6's AMX weight gradient got these wrong; with one input or output
// channel it offered only its reference kernel or kept AMX (engine/dnnl/dnnl_bf16.cpp).
void check_narrow_conv(Backend& be, bool cudnn) {
  Rand r;
  for (const ConvGeom& g : {ConvGeom{3, 7, 8, 1, 3, 2, 3, 2, 2, 0, 1}, ConvGeom{3, 7, 5, 1, 3, 1, 2, 2, 2, 0, 1},
                            ConvGeom{2, 5, 2, 2, 4, 1, 3, 1, 3, 0, 1}, ConvGeom{2, 5, 1, 6, 4, 3, 1, 3, 1, 1, 0},
                            ConvGeom{3, 6, 1, 2, 1, 3, 5, 2, 2, 1, 2}, ConvGeom{1, 7, 5, 1, 1, 4, 1, 2, 2, 0, 0},
                            ConvGeom{3, 1, 1, 1, 3, 2, 2, 2, 3, 0, 2}, ConvGeom{3, 1, 1, 1, 1, 2, 5, 2, 3, 1, 2}}) {
    SCOPED_TRACE(fmt::format("seed {}: {}", r.seed, geom_str(g)));
    EXPECT_NO_THROW(check_conv_at(be, cudnn, g, r));
  }
}

// The transposed convolution, made of the bf16 convolution passes: its forward rounds the
// convolution's output and then its sum with the bias (two roundings, within Partials' bound); the
// bias gradient is the fp32 channel sums.
void check_conv_transpose(Backend& be, bool cudnn) {
  Rand r;
  for (int trial = 0; trial < 20; ++trial) {
    const ConvGeom g = random_geom(r);
    SCOPED_TRACE(fmt::format("seed {} trial {}: transpose of {}", r.seed, trial, geom_str(g)));
    const int64_t xn = g.n * g.k * g.p() * g.q(), wn = g.k * g.c * g.r * g.s, yn = g.n * g.c * g.h * g.w;
    const Vals x = bf16_vals(r, xn), w = bf16_vals(r, wn), b = bf16_vals(r, g.c), dy = bf16_vals(r, yn);
    const auto X16 = dev(be, x.b), W16 = dev(be, w.b), B16 = dev(be, b.b), DY16 = dev(be, dy.b);
    auto Y = dev(be, std::vector<Bf16>(yn, Bf16{0x7fc0})), DX = dev(be, std::vector<Bf16>(xn, Bf16{0x7fc0}));
    auto DW = dev(be, std::vector<float>(wn, NAN)), DB = dev(be, std::vector<float>(g.c, NAN));
    be.conv_transpose2d_forward_bf16(g, X16.p(), W16.p(), B16.p(), Y.p());
    be.conv_transpose2d_backward_data_bf16(g, DY16.p(), W16.p(), DX.p());
    be.conv_transpose2d_backward_weights_bf16(g, X16.p(), DY16.p(), DW.p(), DB.p(), false);
    const ref::ConvTranspose t = ref::conv_transpose2d(g, ref::to_double(x.f), ref::to_double(w.f), ref::to_double(b.f),
                                                       ref::to_double(dy.f));
    const ref::ConvTranspose m = ref::conv_transpose2d(g, absd(x.f), absd(w.f), absd(b.f), absd(dy.f));
    expect_within(widen(Y.host()), t.y, m.y, g.k * g.r * g.s + 1, Rounded::Partials, "forward");
    expect_within(widen(DX.host()), t.dx, m.dx, g.c * g.r * g.s, cudnn ? Rounded::Partials : Rounded::Once, "backward data");
    expect_within(DW.host(), t.dw, m.dw, g.n * g.h * g.w, cudnn ? Rounded::Partials : Rounded::No, "backward weights");
    expect_within(DB.host(), t.db, m.db, g.n * g.h * g.w, Rounded::No, "bias gradient");
  }
}

void check_linear_at(Backend& be, int64_t n, int64_t in, int64_t out, Rand& r) {
  {
    const Vals x = bf16_vals(r, n * in), w = bf16_vals(r, out * in), b = bf16_vals(r, out), dy = bf16_vals(r, n * out);
    const auto X16 = dev(be, x.b), W16 = dev(be, w.b), B16 = dev(be, b.b), DY16 = dev(be, dy.b);
    auto Y = dev(be, std::vector<Bf16>(n * out, Bf16{0x7fc0})), DX = dev(be, std::vector<Bf16>(n * in, Bf16{0x7fc0}));
    auto DW = dev(be, std::vector<float>(out * in, NAN)), DB = dev(be, std::vector<float>(out, NAN));
    be.linear_forward_bf16(n, in, out, X16.p(), W16.p(), B16.p(), Y.p());
    be.linear_backward_data_bf16(n, in, out, DY16.p(), W16.p(), DX.p());
    be.linear_backward_weights_bf16(n, in, out, X16.p(), DY16.p(), DW.p(), DB.p(), false);
    const auto X = ref::to_double(x.f), W = ref::to_double(w.f), B = ref::to_double(b.f), DY = ref::to_double(dy.f);
    const auto aX = absd(x.f), aW = absd(w.f), aB = absd(b.f), aDY = absd(dy.f);
    expect_within(widen(Y.host()), ref::linear_forward(n, in, out, X, W, B),
                  ref::linear_forward(n, in, out, aX, aW, aB), in + 1, Rounded::Once, "forward");
    expect_within(widen(DX.host()), ref::linear_backward_data(n, in, out, DY, W),
                  ref::linear_backward_data(n, in, out, aDY, aW), out, Rounded::Once, "backward data");
    auto DX32 = dev(be, std::vector<float>(n * in, NAN));
    be.linear_backward_data_bf16_f32(n, in, out, DY16.p(), W16.p(), DX32.p());
    expect_within(DX32.host(), ref::linear_backward_data(n, in, out, DY, W),
                  ref::linear_backward_data(n, in, out, aDY, aW), out, Rounded::No, "backward data, fp32 output");
    ref::Vec rdw, rdb, mdw, mdb;
    ref::linear_backward_weights(n, in, out, X, DY, rdw, rdb);
    ref::linear_backward_weights(n, in, out, aX, aDY, mdw, mdb);
    expect_within(DW.host(), rdw, mdw, n, Rounded::No, "backward weights");
    expect_within(DB.host(), rdb, mdb, n, Rounded::No, "bias gradient");
    be.linear_backward_weights_bf16(n, in, out, X16.p(), DY16.p(), DW.p(), DB.p(), true);
    for (auto* v : {&rdw, &rdb, &mdw, &mdb})
      for (double& e : *v) e *= 2;
    expect_within(DW.host(), rdw, mdw, 2 * n, Rounded::No, "accumulated weights");
    expect_within(DB.host(), rdb, mdb, 2 * n, Rounded::No, "accumulated bias");
  }
}

void check_linear(Backend& be) {
  Rand r;
  for (int trial = 0; trial < 20; ++trial) {
    const int64_t n = r.i(1, 40), in = r.i(1, 70), out = r.i(1, 30);
    SCOPED_TRACE(fmt::format("seed {} trial {}: n {} in {} out {}", r.seed, trial, n, in, out));
    check_linear_at(be, n, in, out, r);
  }
}

TEST(Bf16Ops, ConvMatchesReference) {
  SKIP_WITHOUT_BF16();
  check_conv(*bf16_backend(), false);
}

TEST(Bf16Ops, ConvOfAnInputNarrowerThanItsStrideMatchesReference) {
  SKIP_WITHOUT_BF16();
  check_narrow_conv(*bf16_backend(), false);
}

TEST(Bf16Ops, ConvTransposeMatchesReference) {
  SKIP_WITHOUT_BF16();
  check_conv_transpose(*bf16_backend(), false);
}

TEST(Bf16Ops, LinearMatchesReference) {
  SKIP_WITHOUT_BF16();
  check_linear(*bf16_backend());
}

// A reduced dimension of 63 -- inputs (forward), outputs (backward data), samples (weights) -- with
// 33 or more rows: oneDNN 2.6's AMX matmul got these wrong or died of SIGILL (engine/dnnl/dnnl_bf16.cpp).
TEST(Bf16Ops, LinearOverSixtyThreeMatchesReference) {
  SKIP_WITHOUT_BF16();
  Rand r;
  for (const auto& [n, in, out] : {std::tuple<int64_t, int64_t, int64_t>{37, 63, 9}, {33, 63, 17}, {37, 9, 63}, {63, 9, 37}}) {
    SCOPED_TRACE(fmt::format("seed {}: n {} in {} out {}", r.seed, n, in, out));
    check_linear_at(*bf16_backend(), n, in, out, r);
  }
}

// The residual add, 2x2 max pooling and nearest 2x upsampling in bf16: selection and copies exact,
// the sums (add: two terms, upsampling's backward: four) fp32 rounded once to bf16.
void check_resample(Backend& be, Rand& r) {
  for (int trial = 0; trial < 20; ++trial) {
    const Planes s{r.i(1, 3), r.i(1, 5), r.i(1, 9), r.i(1, 9)};
    SCOPED_TRACE(fmt::format("seed {} trial {}: {}x{}x{}x{}", r.seed, trial, s.n, s.c, s.h, s.w));
    const int64_t n = s.numel(), pooled = s.n * s.c * (s.h / 2) * (s.w / 2);
    Vals x = bf16_vals(r, n);
    if (trial % 2)  // ties in the windows
      for (std::size_t k = 0; k < x.f.size(); ++k) x.f[k] = std::round(x.f[k]), x.b[k] = to_bf16(x.f[k]);
    const Vals a = bf16_vals(r, n), pdy = bf16_vals(r, pooled), udy = bf16_vals(r, 4 * n);
    const auto X = dev(be, x.b), A = dev(be, a.b), PDY = dev(be, pdy.b), UDY = dev(be, udy.b);
    const Bf16 nan{0x7fc0};
    auto SUM = dev(be, std::vector<Bf16>(n, nan)), P = dev(be, std::vector<Bf16>(pooled, nan)),
         PDX = dev(be, std::vector<Bf16>(n, nan)), U = dev(be, std::vector<Bf16>(4 * n, nan)),
         UDX = dev(be, std::vector<Bf16>(n, nan));
    be.add_bf16(n, X.p(), A.p(), SUM.p());
    be.max_pool2x2_forward_bf16(s, X.p(), P.p());
    be.max_pool2x2_backward_bf16(s, X.p(), PDY.p(), PDX.p());
    be.upsample2x_forward_bf16(s, X.p(), U.p());
    be.upsample2x_backward_bf16(s, UDY.p(), UDX.p());
    ref::Vec sum, mag;
    for (int64_t k = 0; k < n; ++k) sum.push_back(double(x.f[k]) + a.f[k]), mag.push_back(std::abs(double(x.f[k])) + std::abs(double(a.f[k])));
    expect_within(widen(SUM.host()), sum, mag, 2, Rounded::Once, "add");
    const ref::Vec X64 = ref::to_double(x.f);
    EXPECT_EQ(ref::to_double(widen(P.host())), ref::max_pool2x2(s, X64));
    EXPECT_EQ(ref::to_double(widen(PDX.host())), ref::max_pool2x2_backward(s, X64, ref::to_double(pdy.f)));
    EXPECT_EQ(ref::to_double(widen(U.host())), ref::upsample2x(s, X64));
    expect_within(widen(UDX.host()), ref::upsample2x_backward(s, ref::to_double(udy.f)),
                  ref::upsample2x_backward(s, absd(udy.f)), 4, Rounded::Once, "upsampling backward");
  }
}
TEST(Bf16Ops, ResampleOpsMatchReference) {
  SKIP_WITHOUT_BF16();
  Rand r;
  check_resample(*bf16_backend(), r);
}

// The CUDA path, where there is a GPU (of compute capability 8.0 or newer).
std::unique_ptr<Backend> gpu_bf16_backend() {
  BackendOptions o;
  o.precision = Precision::Bf16;
  return make_backend(cuda(), o);
}
TEST(Bf16OpsGpu, ConvMatchesReference) {
  PB_REQUIRE_GPU();
  check_conv(*gpu_bf16_backend(), true);
}
// --layout nhwc: the calls with an NHWC side -- NCHW in and NHWC out (a run of them begins), NHWC
// both sides, NHWC in and NCHW out (it ends) -- through both cuDNN APIs.
TEST(Bf16OpsGpu, ConvWithNhwcSidesMatchesReference) {
  PB_REQUIRE_GPU();
  BackendOptions o;
  o.precision = Precision::Bf16;
  o.cuda_nhwc = true;
  const ActLayout P = ActLayout::Plain, B = ActLayout::Blocked;
  for (const char* api : {"graph", "legacy"}) {
    test::ScopedEnv env("PARBENCH_CUDNN_API", api);
    auto be = make_backend(cuda(), o);
    Rand r;
    for (ConvLayouts io : {ConvLayouts{P, B}, ConvLayouts{B, B}, ConvLayouts{B, P}})
      for (int trial = 0; trial < 6; ++trial) {
        // The first trial's activations are wide enough (40 and 48 channels, 63 positions) for the
        // tiled transposes (engine/kernel_shapes.h), the random ones' for the narrow.
        const ConvGeom g = trial == 0 ? ConvGeom{2, 40, 9, 7, 48, 3, 3, 1, 1, 1, 1} : random_geom(r);
        SCOPED_TRACE(fmt::format("seed {} API {} x {} y {} trial {}: {}", r.seed, api, io.x == B ? "NHWC" : "NCHW",
                                 io.y == B ? "NHWC" : "NCHW", trial, geom_str(g)));
        EXPECT_NO_THROW(check_conv_at(*be, true, g, r, io));
      }
  }
}
TEST(Bf16OpsGpu, ConvOfAnInputNarrowerThanItsStrideMatchesReference) {
  PB_REQUIRE_GPU();
  check_narrow_conv(*gpu_bf16_backend(), true);
}
TEST(Bf16OpsGpu, ConvThroughTheLegacyApiMatchesReference) {
  PB_REQUIRE_GPU();
  test::ScopedEnv api("PARBENCH_CUDNN_API", "legacy");
  check_conv(*gpu_bf16_backend(), true);
}
TEST(Bf16OpsGpu, ConvTransposeMatchesReference) {
  PB_REQUIRE_GPU();
  check_conv_transpose(*gpu_bf16_backend(), true);
}
TEST(Bf16OpsGpu, LinearMatchesReference) {
  PB_REQUIRE_GPU();
  check_linear(*gpu_bf16_backend());
}
TEST(Bf16OpsGpu, ResampleOpsMatchReference) {
  PB_REQUIRE_GPU();
  Rand r;
  check_resample(*gpu_bf16_backend(), r);
}

TEST(Bf16Ops, ReluIsExact) {
  SKIP_WITHOUT_BF16();
  auto be = bf16_backend();
  Rand r;
  const Vals x = bf16_vals(r, 70000), dy = bf16_vals(r, 70000);
  std::vector<Bf16> y(x.b.size()), dx(x.b.size());
  be->relu_forward_bf16(static_cast<int64_t>(y.size()), x.b.data(), y.data());
  be->relu_backward_bf16(static_cast<int64_t>(y.size()), y.data(), dy.b.data(), dx.data());
  for (std::size_t i = 0; i < y.size(); ++i) {
    ASSERT_EQ(from_bf16(y[i]), std::max(x.f[i], 0.0f)) << "seed " << r.seed << " element " << i;
    ASSERT_EQ(from_bf16(dx[i]), x.f[i] > 0 ? dy.f[i] : 0.0f) << "element " << i;
  }
  std::vector<Bf16> inplace = x.b;  // in place, as Sequential runs it
  be->relu_forward_bf16(static_cast<int64_t>(inplace.size()), inplace.data(), inplace.data());
  for (std::size_t i = 0; i < y.size(); ++i) ASSERT_EQ(inplace[i].bits, y[i].bits);
}

// The decision alone: native bf16 from AVX512-BF16 up (AMX included); elsewhere a refusal naming the ISA.
TEST(Bf16Refusal, DecisionNamesTheInstructionSet) {
#ifdef PARBENCH_HAVE_DNNL
  EXPECT_EQ(dnnl_bf16_refusal(dnnl_cpu_isa_avx512_core_bf16), "");
  EXPECT_EQ(dnnl_bf16_refusal(dnnl_cpu_isa_avx512_core_amx), "");
  for (unsigned isa : {dnnl_cpu_isa_avx2, dnnl_cpu_isa_avx2_vnni, dnnl_cpu_isa_avx512_core,
                       dnnl_cpu_isa_avx512_core_vnni}) {
    const std::string why = dnnl_bf16_refusal(isa);
    EXPECT_NE(why.find("oneDNN runs " + dnnl_isa_name(isa) + " on this CPU"), std::string::npos) << why;
    EXPECT_NE(why.find("AVX512-BF16"), std::string::npos) << why;
  }
#else
  GTEST_SKIP() << "built without oneDNN";
#endif
}

// The backend either has the kernels or refuses at construction; the ctest variant bf16_refusal
// caps oneDNN at AVX512_CORE_VNNI so the refusal runs on any CPU.
TEST(Bf16Refusal, BackendRefusesAtConstructionNamingTheIsa) {
  const char* cap = std::getenv("ONEDNN_MAX_CPU_ISA");
  const bool capped = cap && std::string(cap) == "AVX512_CORE_VNNI";
  const std::string why = test::bf16_unavailable();
  if (why.empty()) {
    ASSERT_FALSE(capped) << "ONEDNN_MAX_CPU_ISA=AVX512_CORE_VNNI, yet oneDNN offers bf16 kernels";
    EXPECT_EQ(bf16_backend()->precision(), Precision::Bf16);
    BackendOptions fp32;
    EXPECT_EQ(make_backend(cpu(), fp32)->precision(), Precision::Fp32);
    return;
  }
  try {
    bf16_backend();
    FAIL() << "a bf16 backend was made where " << why;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
#ifdef PARBENCH_HAVE_DNNL
    if (capped) {
      EXPECT_NE(std::string(e.what()).find("avx512_core_vnni"), std::string::npos) << e.what();
    }
#endif
  }
  // fp32 on the same CPU is unaffected.
  EXPECT_EQ(make_backend(cpu())->precision(), Precision::Fp32);
}

// A caller without an autocast path (tp across workers, for now) gets an error, not fp32 run as bf16.
TEST(Bf16Refusal, Fp32ConvAndLinearRefuseOnABf16Backend) {
  SKIP_WITHOUT_BF16();
  auto be = bf16_backend();
  ConvGeom g;
  g.n = 1, g.c = g.k = 2, g.h = g.w = 4, g.r = g.s = 3, g.pad_h = g.pad_w = 1;
  std::vector<float> x(32, 1.0f), w(36, 1.0f), b(2, 0.0f), y(32, 0.0f);
  EXPECT_THROW(be->conv2d_forward(g, x.data(), w.data(), b.data(), y.data()), Error);
  EXPECT_THROW(be->conv2d_backward_data(g, y.data(), w.data(), x.data()), Error);
  EXPECT_THROW(be->linear_forward(2, 4, 2, x.data(), w.data(), b.data(), y.data()), Error);
  EXPECT_EQ(y, std::vector<float>(32, 0.0f));  // nothing written
  auto fp32 = make_backend(cpu());
  fp32->conv2d_forward(g, x.data(), w.data(), b.data(), y.data());
  EXPECT_EQ(y[5], 18.0f);  // an interior output: 2 channels x 9 taps of 1 x 1
}

// CUDA: compute capability below 8.0 is refused by name; 8.0 (Ampere) and newer run bf16.
TEST(Bf16Refusal, CudaDecisionNamesTheComputeCapability) {
  const std::string old = cuda_bf16_refusal(7, 5, "Tesla T4");
  EXPECT_NE(old.find("Tesla T4 has 7.5"), std::string::npos) << old;
  EXPECT_NE(old.find("8.0 or newer"), std::string::npos) << old;
  EXPECT_NE(cuda_bf16_refusal(7, 0, "Tesla V100").find("V100 has 7.0"), std::string::npos);
  EXPECT_EQ(cuda_bf16_refusal(8, 0, "A100"), "");
  EXPECT_EQ(cuda_bf16_refusal(9, 0, "H200"), "");
}

}  // namespace
}  // namespace pb
