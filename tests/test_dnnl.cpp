// oneDNN convolutions (engine/dnnl) against the CPU backend's im2col path and a double-precision
// loop, on fresh random shapes every run; tolerance atol + rtol * max|ref|, worst mismatch printed.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <memory>
#include <random>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "reference.h"
#include "engine/backend.h"
#include "engine/cpu_backend.h"
#ifdef PARBENCH_HAVE_DNNL
#include "engine/dnnl/dnnl_conv.h"
#include "engine/model.h"
#include "engine/net.h"
#include "strategies/strategy.h"
#include "tests/support.h"
#endif

namespace pb {
namespace {

#ifdef PARBENCH_HAVE_DNNL

constexpr double kAtol = 1e-5, kRtol = 1e-4;

std::string str(const ConvGeom& g) {
  return fmt::format("x {}x{}x{}x{}, w {}x{}x{}x{}, stride {}x{}, pad {}x{} -> {}x{}", g.n, g.c, g.h, g.w, g.k, g.c,
                     g.r, g.s, g.stride_h, g.stride_w, g.pad_h, g.pad_w, g.p(), g.q());
}

// The worst mismatch of a test, relative to its tolerance, printed when the test ends.
struct Worst {
  double of_tolerance = 0;
  std::string what;
};

// Passes when every |got - ref| <= atol + rtol * max|ref|; the message names the worst element.
::testing::AssertionResult close(const std::vector<float>& got, const std::vector<double>& ref,
                                 Worst* worst_seen = nullptr) {
  if (got.size() != ref.size()) return ::testing::AssertionFailure() << "size " << got.size() << " vs " << ref.size();
  double max_ref = 0;
  for (double r : ref) max_ref = std::max(max_ref, std::abs(r));
  const double tol = kAtol + kRtol * max_ref;
  double worst = -1;
  std::size_t at = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(static_cast<double>(got[i]) - ref[i]);
    if (std::isnan(err)) {
      worst = err, at = i;
      break;
    }
    if (err > worst) worst = err, at = i;
  }
  const std::string msg = fmt::format("worst mismatch {:.3g} at [{}]: got {:.9g}, ref {:.9g} (tolerance {:.3g}, "
                                      "max|ref| {:.3g}, {} values)",
                                      worst, at, got.empty() ? 0.f : got[at], ref.empty() ? 0. : ref[at], tol,
                                      max_ref, got.size());
  if (worst_seen && !(worst / tol <= worst_seen->of_tolerance)) {
    worst_seen->of_tolerance = worst / tol;
    worst_seen->what = msg;
  }
  if (!(worst <= tol)) return ::testing::AssertionFailure() << msg;
  return ::testing::AssertionSuccess() << msg;
}

std::vector<double> as_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// The slow, obviously right convolution in double (tests/reference.cpp), called as this file does.
struct Reference {
  const ConvGeom& g;
  std::vector<double> forward(const std::vector<float>& x, const std::vector<float>& w, const float* b) const {
    return ref::conv2d_forward(g, as_double(x), as_double(w), b ? ref::Vec(b, b + g.k) : ref::Vec());
  }
  std::vector<double> backward_data(const std::vector<float>& dy, const std::vector<float>& w) const {
    return ref::conv2d_backward_data(g, as_double(dy), as_double(w));
  }
  std::vector<double> backward_weights(const std::vector<float>& x, const std::vector<float>& dy) const {
    ref::Vec dw, db;
    ref::conv2d_backward_weights(g, as_double(x), as_double(dy), dw, db);
    return dw;
  }
  std::vector<double> backward_bias(const std::vector<float>& dy) const {
    const int64_t PQ = g.p() * g.q();
    std::vector<double> db(static_cast<std::size_t>(g.k));
    for (std::size_t i = 0; i < dy.size(); ++i) db[(i / PQ) % g.k] += dy[i];
    return db;
  }
};

// The three convolution passes of whatever is under test: a Backend, or a DnnlConv directly.
struct Conv {
  virtual ~Conv() = default;
  virtual void forward(const ConvGeom& g, const float* x, const float* w, const float* b, float* y) = 0;
  virtual void backward_data(const ConvGeom& g, const float* dy, const float* w, float* dx) = 0;
  virtual void backward_weights(const ConvGeom& g, const float* x, const float* dy, float* dw, float* db,
                                bool accumulate) = 0;
};
struct BackendConv final : Conv {
  explicit BackendConv(Backend& b) : be(b) {}
  void forward(const ConvGeom& g, const float* x, const float* w, const float* b, float* y) override {
    be.conv2d_forward(g, x, w, b, y);
  }
  void backward_data(const ConvGeom& g, const float* dy, const float* w, float* dx) override {
    be.conv2d_backward_data(g, dy, w, dx);
  }
  void backward_weights(const ConvGeom& g, const float* x, const float* dy, float* dw, float* db,
                        bool accumulate) override {
    be.conv2d_backward_weights(g, x, dy, dw, db, accumulate);
  }
  Backend& be;
};
struct DnnlOnly final : Conv {
  explicit DnnlOnly(DnnlConv& c) : conv(c) {}
  void forward(const ConvGeom& g, const float* x, const float* w, const float* b, float* y) override {
    conv.forward(g, x, w, b, y);
  }
  void backward_data(const ConvGeom& g, const float* dy, const float* w, float* dx) override {
    conv.backward_data(g, dy, w, dx);
  }
  void backward_weights(const ConvGeom& g, const float* x, const float* dy, float* dw, float* db,
                        bool accumulate) override {
    conv.backward_weights(g, x, dy, dw, db, accumulate);
  }
  DnnlConv& conv;
};

class Dnnl : public ::testing::Test {
 protected:
  void SetUp() override {
    seed_ = std::random_device{}();
    rng_.seed(seed_);
    RecordProperty("seed", std::to_string(seed_));
  }
  void TearDown() override {
    if (!worst_.what.empty())
      std::printf("seed %u, %s: %s; %.3g of the tolerance\n", seed_, worst_where_.c_str(), worst_.what.c_str(),
                  worst_.of_tolerance);
  }
  ::testing::AssertionResult near(const std::vector<float>& got, const std::vector<double>& ref,
                                  const std::string& where) {
    const double before = worst_.of_tolerance;
    auto r = close(got, ref, &worst_);
    if (worst_.of_tolerance != before) worst_where_ = where;
    return r;
  }
  int64_t uniform(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng_); }
  std::vector<float> random(int64_t n) {
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    std::vector<float> v(static_cast<std::size_t>(n));
    for (float& x : v) x = d(rng_);
    return v;
  }
  ConvGeom random_geom() { return test::random_geom(rng_, {3, 40, 23}); }
  static std::unique_ptr<CpuBackend> backend(bool reference, int threads, bool winograd = true,
                                             bool fuse_relu = true) {
    BackendOptions o;
    o.threads = threads;
    o.cpu_reference_conv = reference;
    o.cpu_winograd = winograd;
    o.cpu_fuse_relu = fuse_relu;
    return std::make_unique<CpuBackend>(cpu(), o);
  }

  // Forward, backward data, backward weights (overwrite and accumulate, with and without bias)
  // of one shape on `be`, each against the double loop and against the im2col path `ref`.
  void check(const ConvGeom& g, Backend& be, Backend& ref) {
    BackendConv conv(be);
    check(g, conv, ref);
  }
  void check(const ConvGeom& g, Conv& be, Backend& ref) {
    SCOPED_TRACE(fmt::format("seed {}: {}", seed_, str(g)));
    const Reference dbl{g};
    const int64_t xn = g.n * g.c * g.h * g.w, wn = g.k * g.c * g.r * g.s, yn = g.n * g.k * g.p() * g.q();
    const std::vector<float> x = random(xn), w = random(wn), b = random(g.k), dy = random(yn);

    for (const bool bias : {true, false}) {
      SCOPED_TRACE(bias ? "forward with bias" : "forward without bias");
      std::vector<float> y(yn, NAN), y_ref(yn, NAN);
      be.forward(g, x.data(), w.data(), bias ? b.data() : nullptr, y.data());
      ref.conv2d_forward(g, x.data(), w.data(), bias ? b.data() : nullptr, y_ref.data());
      EXPECT_TRUE(near(y, dbl.forward(x, w, bias ? b.data() : nullptr), "forward vs double, " + str(g)));
      EXPECT_TRUE(near(y, as_double(y_ref), "forward vs im2col, " + str(g)));
    }
    {
      SCOPED_TRACE("backward data");
      std::vector<float> dx(xn, NAN), dx_ref(xn, NAN);
      be.backward_data(g, dy.data(), w.data(), dx.data());
      ref.conv2d_backward_data(g, dy.data(), w.data(), dx_ref.data());
      EXPECT_TRUE(near(dx, dbl.backward_data(dy, w), "backward data vs double, " + str(g)));
      EXPECT_TRUE(near(dx, as_double(dx_ref), "backward data vs im2col, " + str(g)));
    }
    const std::vector<double> dw_want = dbl.backward_weights(x, dy), db_want = dbl.backward_bias(dy);
    const std::vector<float> dw_prior = random(wn), db_prior = random(g.k);
    for (const bool accumulate : {false, true})
      for (const bool bias : {true, false}) {
        SCOPED_TRACE(fmt::format("backward weights, accumulate {}, bias {}", accumulate, bias));
        // Without accumulate the prior contents must be overwritten, so start from garbage.
        std::vector<float> dw = dw_prior, db = db_prior, dw_ref = dw_prior, db_ref = db_prior;
        be.backward_weights(g, x.data(), dy.data(), dw.data(), bias ? db.data() : nullptr, accumulate);
        ref.conv2d_backward_weights(g, x.data(), dy.data(), dw_ref.data(), bias ? db_ref.data() : nullptr,
                                    accumulate);
        std::vector<double> dw_exp = dw_want, db_exp = db_want;
        if (accumulate) {
          for (std::size_t i = 0; i < dw_exp.size(); ++i) dw_exp[i] += dw_prior[i];
          for (std::size_t i = 0; i < db_exp.size(); ++i) db_exp[i] += db_prior[i];
        }
        EXPECT_TRUE(near(dw, dw_exp, "backward weights vs double, " + str(g)));
        EXPECT_TRUE(near(dw, as_double(dw_ref), "backward weights vs im2col, " + str(g)));
        if (bias) {
          EXPECT_TRUE(near(db, db_exp, "backward bias vs double, " + str(g)));
          EXPECT_TRUE(near(db, as_double(db_ref), "backward bias vs im2col, " + str(g)));
        } else {
          EXPECT_EQ(db, db_prior) << "db touched without a bias";
        }
      }
  }

  unsigned seed_ = 0;
  std::mt19937_64 rng_;
  Worst worst_;
  std::string worst_where_;
};

TEST_F(Dnnl, BackendUsesOneDnnUnlessReferenceAsked) {
  EXPECT_NE(backend(false, 1)->name().find("oneDNN"), std::string::npos) << backend(false, 1)->name();
  EXPECT_NE(backend(true, 1)->name().find("im2col"), std::string::npos) << backend(true, 1)->name();
}

TEST_F(Dnnl, RandomShapesMatchReferences) {
  auto be = backend(false, 2), ref = backend(true, 2);
  for (int i = 0; i < 24; ++i) check(random_geom(), *be, *ref);
}

// great_net's shape family (3x3, stride 1, pad 1) on both sides of the Winograd threshold (32
// channels in and out), with Winograd allowed (each shape twice, so cached primitives are reused
// with new data) and with direct kernels only.
TEST_F(Dnnl, GreatNetShapesWinogradAndDirect) {
  auto ref = backend(true, 2);
  const int64_t chans[][2] = {{3, 16}, {16, 32}, {32, 64}, {64, 32}, {64, 16}, {16, 3}, {40, 40}, {80, 40}};
  for (const bool winograd : {true, false}) {
    SCOPED_TRACE(winograd ? "Winograd allowed" : "direct only");
    auto be = backend(false, 2, winograd);
    for (int round = 0; round < (winograd ? 2 : 1); ++round)
      for (const auto& ck : chans) {
        ConvGeom g;
        g.n = 2, g.c = ck[0], g.k = ck[1], g.h = 15, g.w = 17, g.r = g.s = 3, g.pad_h = g.pad_w = 1;
        check(g, *be, *ref);
      }
  }
}

// oneDNN has Winograd kernels only with AVX-512; elsewhere (AVX2, or ONEDNN_MAX_CPU_ISA=AVX2) every
// layer runs direct. Asks oneDNN itself: the plan of a shape Winograd takes when it can.
std::string winograd_probe_plan() {
  ConvGeom g;
  g.n = 1, g.c = g.k = 64, g.h = g.w = 16, g.r = g.s = 3, g.pad_h = g.pad_w = 1;
  DnnlConv conv(1, true, SIZE_MAX);
  return conv.plan(g, true);
}
bool cpu_has_winograd() { return winograd_probe_plan().find("wino") != std::string::npos; }

TEST_F(Dnnl, WithoutWinogradKernelsLayersRunDirect) {
  if (cpu_has_winograd()) {
    const char* isa = std::getenv("ONEDNN_MAX_CPU_ISA");
    ASSERT_FALSE(isa && std::string(isa) == "AVX2") << "ONEDNN_MAX_CPU_ISA=AVX2, yet oneDNN has Winograd kernels";
    GTEST_SKIP() << "this CPU has oneDNN Winograd kernels; the ctest variant dnnl_avx2 (ONEDNN_MAX_CPU_ISA=AVX2) "
                    "runs this test without them";
  }
  // Winograd allowed but unavailable: the backend must fall back to direct kernels, not fail.
  auto be = backend(false, 2, true), ref = backend(true, 2);
  ConvGeom g;
  g.n = 2, g.c = 48, g.k = 40, g.h = 9, g.w = 7, g.r = g.s = 3, g.pad_h = g.pad_w = 1;
  check(g, *be, *ref);
}

// Winograd's scratch grows with channels^2; under a cap a layer runs in channel slices (forward:
// output channels, backward data: input channels, backward weights: output channels), and with no
// room at all on direct kernels. Every plan must give the same results.
TEST_F(Dnnl, WinogradChannelSlicesUnderScratchCap) {
  if (!cpu_has_winograd())
    GTEST_SKIP() << "oneDNN has no Winograd kernel on this CPU (it needs AVX-512; oneDNN's plan here: "
                 << winograd_probe_plan() << ")";
  auto ref = backend(true, 2);
  ConvGeom g;
  g.n = 2, g.c = 128, g.k = 96, g.h = 13, g.w = 11, g.r = g.s = 3, g.pad_h = g.pad_w = 1;
  bool sliced = false, direct = false;
  for (const std::size_t mib : {1 << 20, 12, 8, 0}) {
    const std::size_t cap = std::size_t(mib) << 20;
    DnnlConv conv(2, true, cap);
    const std::string plan = conv.plan(g, true);
    SCOPED_TRACE(fmt::format("scratch cap {} bytes: {}", cap, plan));
    std::printf("scratch cap %zu bytes: %s\n", cap, plan.c_str());
    sliced = sliced || (plan.find("wino") != std::string::npos &&
                        (plan.find(" x2") != std::string::npos || plan.find(" x4") != std::string::npos));
    if (cap == 0) {
      direct = plan.find("wino") == std::string::npos;
      EXPECT_TRUE(direct) << plan;
    }
    DnnlOnly c(conv);
    check(g, c, *ref);
  }
  EXPECT_TRUE(sliced) << "no cap made Winograd run in slices";
}

// A conv with its ReLU fused (oneDNN's post-op, or the engine's Winograd output transform) gives
// the forward-then-ReLU values exactly, and the double loop's within tolerance; with fusion off,
// or on the im2col path, the backend declines and leaves y alone.
TEST_F(Dnnl, FusedReluForwardEqualsForwardThenRelu) {
  auto be = backend(false, 2), off = backend(false, 2, true, false), ref = backend(true, 2);
  std::vector<ConvGeom> shapes;
  for (int i = 0; i < 8; ++i) shapes.push_back(random_geom());
  // great_net's family, past the Winograd threshold too (oneDNN's on AVX-512, the engine's own elsewhere).
  for (const int64_t ck : {16, 48, 64}) {
    ConvGeom g;
    g.n = 2, g.c = ck, g.k = ck == 48 ? 40 : ck, g.h = 15, g.w = 17, g.r = g.s = 3, g.pad_h = g.pad_w = 1;
    shapes.push_back(g);
  }
  const auto untouched = [](const std::vector<float>& v) {
    return std::all_of(v.begin(), v.end(), [](float f) { return std::isnan(f); });
  };
  for (const ConvGeom& g : shapes)
    for (const bool bias : {true, false}) {
      SCOPED_TRACE(fmt::format("seed {}: {}, bias {}, plan {}", seed_, str(g), bias,
                               DnnlConv(2, true).plan(g, bias)));
      const int64_t yn = g.n * g.k * g.p() * g.q();
      const std::vector<float> x = random(g.n * g.c * g.h * g.w), w = random(g.k * g.c * g.r * g.s),
                               b = random(g.k);
      const float* bp = bias ? b.data() : nullptr;
      std::vector<float> y(yn, NAN), plain(yn, NAN);
      ASSERT_TRUE(be->conv2d_relu_forward(g, x.data(), w.data(), bp, y.data()));
      be->conv2d_forward(g, x.data(), w.data(), bp, plain.data());
      be->relu_forward(yn, plain.data(), plain.data());
      EXPECT_EQ(y, plain);
      std::vector<double> want = Reference{g}.forward(x, w, bp);
      for (double& v : want) v = std::max(v, 0.0);
      EXPECT_TRUE(near(y, want, "fused ReLU forward vs double, " + str(g)));
      std::vector<float> declined(yn, NAN);
      EXPECT_FALSE(off->conv2d_relu_forward(g, x.data(), w.data(), bp, declined.data()));
      EXPECT_FALSE(ref->conv2d_relu_forward(g, x.data(), w.data(), bp, declined.data()));
      EXPECT_TRUE(untouched(declined));
    }
}

// CPU workers each own a backend with their own thread count and call it concurrently.
// Winograd in channel slices (a scratch cap forces it, as at great_net's 512 and 1024 channels):
// a slice of a blocked tensor is a view into it at whole blocks. Convs A (32 -> 64) and B
// (64 -> 64) chained through a blocked tensor and its gradient give what the NCHW calls give,
// bit for bit, in all three passes.
TEST_F(Dnnl, BlockedChannelSlicesMatchPlain) {
  ConvGeom a;
  a.n = 2, a.c = 32, a.h = a.w = 12, a.k = 64, a.r = a.s = 3, a.pad_h = a.pad_w = 1;
  ConvGeom b = a;
  b.c = 64;
  // Slices per pass and their scratch, from the plan of B: "forward IMPL xN (S B scratch), ...".
  auto passes = [](const std::string& plan) {
    std::vector<std::pair<int64_t, std::size_t>> out;
    const std::regex re(R"( x(\d+) \((\d+) B)");
    for (auto it = std::sregex_iterator(plan.begin(), plan.end(), re); it != std::sregex_iterator(); ++it)
      out.emplace_back(std::stoll((*it)[1]), std::stoull((*it)[2]));
    return out;
  };
  const std::string whole = DnnlConv(2, true).plan(b, true);
  if (whole.find("wino") == std::string::npos) GTEST_SKIP() << "no oneDNN Winograd on this CPU: " << whole;
  const auto x = random(a.n * a.c * a.h * a.w), wa = random(a.k * a.c * 9), ba = random(a.k),
             wb = random(b.k * b.c * 9), bb = random(b.k), dy = random(b.n * b.k * b.h * b.w);
  const std::size_t mid = static_cast<std::size_t>(a.n * a.k * a.h * a.w);
  const ConvLayouts plain, into{ActLayout::Plain, ActLayout::Blocked}, from{ActLayout::Blocked, ActLayout::Plain};
  struct Out {
    std::vector<float> y_a, y_b, dx_b, dx_a, dw_a, db_a, dw_b, db_b;
  };
  // Caps just below each pass's unsliced scratch, so that each pass runs sliced under one of them.
  bool pass_sliced[3] = {false, false, false};
  for (const auto& [whole_parts, whole_bytes] : passes(whole)) {
    if (whole_bytes == 0) continue;
    const std::size_t cap = whole_bytes - 1;
    DnnlConv conv(2, true, cap);
    const std::string sliced = conv.plan(b, true);
    const auto got = passes(sliced);
    for (std::size_t i = 0; i < got.size() && i < 3; ++i) pass_sliced[i] = pass_sliced[i] || got[i].first > 1;
    std::printf("B under a %zu-byte scratch cap: %s\n", cap, sliced.c_str());
    SCOPED_TRACE(fmt::format("seed {}: {}", seed_, sliced));
    ASSERT_TRUE(conv.keeps_blocked(a, b)) << "the tensor between A and B is not kept blocked";
    auto run = [&](ConvLayouts io_a, ConvLayouts io_b, bool accumulate) {
      Out o;
      o.y_a.assign(mid, NAN), o.y_b.assign(dy.size(), NAN), o.dx_b.assign(mid, NAN), o.dx_a.assign(x.size(), NAN);
      o.dw_a.assign(wa.size(), 0.5f), o.db_a.assign(ba.size(), 0.5f), o.dw_b.assign(wb.size(), 0.5f),
          o.db_b.assign(bb.size(), 0.5f);
      conv.forward(a, x.data(), wa.data(), ba.data(), o.y_a.data(), io_a);
      conv.forward(b, o.y_a.data(), wb.data(), bb.data(), o.y_b.data(), io_b);
      conv.backward_weights(b, o.y_a.data(), dy.data(), o.dw_b.data(), o.db_b.data(), accumulate, io_b);
      conv.backward_data(b, dy.data(), wb.data(), o.dx_b.data(), io_b);
      conv.backward_weights(a, x.data(), o.dx_b.data(), o.dw_a.data(), o.db_a.data(), accumulate, io_a);
      conv.backward_data(a, o.dx_b.data(), wa.data(), o.dx_a.data(), io_a);
      return o;
    };
    for (const bool accumulate : {false, true}) {
      SCOPED_TRACE(accumulate ? "weight gradients accumulated" : "weight gradients overwritten");
      const Out p = run(plain, plain, accumulate), q = run(into, from, accumulate);
      // The tensor in between holds the same values in another order.
      EXPECT_NE(q.y_a, p.y_a);
      std::vector<float> sp = p.y_a, sq = q.y_a;
      std::sort(sp.begin(), sp.end()), std::sort(sq.begin(), sq.end());
      EXPECT_EQ(sq, sp);
      EXPECT_EQ(q.y_b, p.y_b);
      EXPECT_EQ(q.dx_a, p.dx_a);
      EXPECT_EQ(q.dw_a, p.dw_a);
      EXPECT_EQ(q.db_a, p.db_a);
      EXPECT_EQ(q.dw_b, p.dw_b);
      EXPECT_EQ(q.db_b, p.db_b);
      // And the plain calls against the double loop.
      EXPECT_TRUE(near(p.y_b, Reference{b}.forward(p.y_a, wb, bb.data()), "sliced forward vs double"));
    }
  }
  // Forward and backward data slice where their scratch is over the cap; backward weights may
  // then run direct (oneDNN's choice), which the loop above covers too.
  EXPECT_TRUE(pass_sliced[0] && pass_sliced[1]) << "forward or backward data never ran sliced";
}

TEST_F(Dnnl, ConcurrentBackendsWithTheirOwnThreadCounts) {
  std::vector<ConvGeom> shapes;
  for (int i = 0; i < 6; ++i) shapes.push_back(random_geom());
  std::vector<std::vector<float>> xs, ws;
  for (const auto& g : shapes) xs.push_back(random(g.n * g.c * g.h * g.w)), ws.push_back(random(g.k * g.c * g.r * g.s));
  std::vector<std::vector<std::vector<float>>> out(3, std::vector<std::vector<float>>(shapes.size()));
  std::vector<std::thread> workers;
  for (int t = 0; t < 3; ++t)
    workers.emplace_back([&, t] {
      auto be = backend(false, t + 1);
      for (int rep = 0; rep < 3; ++rep)
        for (std::size_t i = 0; i < shapes.size(); ++i) {
          const ConvGeom& g = shapes[i];
          out[t][i].assign(static_cast<std::size_t>(g.n * g.k * g.p() * g.q()), NAN);
          be->conv2d_forward(g, xs[i].data(), ws[i].data(), nullptr, out[t][i].data());
        }
    });
  for (auto& w : workers) w.join();
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    SCOPED_TRACE(fmt::format("seed {}: {}", seed_, str(shapes[i])));
    const std::vector<double> want = Reference{shapes[i]}.forward(xs[i], ws[i], nullptr);
    for (int t = 0; t < 3; ++t) EXPECT_TRUE(near(out[t][i], want, fmt::format("worker {}, {}", t, str(shapes[i]))));
  }
}

// Activations kept in oneDNN's blocked layout between chained convolutions. A net whose convs
// chain at whole channel blocks (16: direct kernels; 32 and 64: Winograd where the CPU has it),
// through a ReLU and directly, then Flatten + Linear (which need NCHW).
NetSpec chained_convs_net() {
  auto conv = [](int64_t k) {
    LayerSpec l;
    l.type = LayerType::Conv2d, l.out_channels = k, l.kernel_h = l.kernel_w = 3, l.pad_h = l.pad_w = 1;
    return l;
  };
  LayerSpec relu, flatten, linear;
  relu.type = LayerType::ReLU, flatten.type = LayerType::Flatten;
  linear.type = LayerType::Linear, linear.out_features = 5;
  NetSpec n;
  n.name = "chained_convs";
  n.target = Target::Random;
  n.input = {3, 10, 12};
  n.layers = {conv(16), relu, conv(32), relu, conv(32), conv(64), relu, conv(16), relu, conv(16), flatten, linear};
  return n;
}

// One forward and backward of a Sequential over layers [begin, end) of the net, fed `x` and the
// output gradient `dy` (or an MSE gradient against `t` where dy is empty).
struct Pass {
  std::vector<float> y, dx, grads;
};
Pass run_stage(const NetPlan& plan, int begin, int end, Backend& be, const std::vector<float>& p,
               const std::vector<float>& x, const std::vector<float>& dy, int64_t batch) {
  Sequential m(plan, begin, end, be);
  m.load_params(p);
  const int64_t n = m.out_numel(batch);
  const float* y = m.forward(x.data(), batch);
  Pass out;
  out.y.assign(y, y + n);
  out.dx.assign(static_cast<std::size_t>(m.in_numel(batch)), NAN);
  m.backward(dy.data(), out.dx.data(), false);
  out.grads = m.grads().to_host();
  return out;
}

std::unique_ptr<Backend> blocked_backend(bool blocked, bool fuse_relu) {
  BackendOptions o;
  o.threads = 2;
  o.cpu_blocked = blocked;
  o.cpu_fuse_relu = fuse_relu;
  return make_backend(cpu(), o);
}

// The geometries of the conv pairs of a plan that chain (conv, conv or conv, ReLU, conv).
std::vector<std::pair<ConvGeom, ConvGeom>> chained_pairs(const NetPlan& plan, int64_t batch) {
  auto geom = [&](const LayerPlan& l) {
    ConvGeom g;
    g.n = batch, g.c = l.in[0], g.h = l.in[1], g.w = l.in[2];
    g.k = l.spec.out_channels, g.r = l.spec.kernel_h, g.s = l.spec.kernel_w;
    g.pad_h = l.spec.pad_h, g.pad_w = l.spec.pad_w;
    return g;
  };
  std::vector<std::pair<ConvGeom, ConvGeom>> out;
  const auto& L = plan.layers;
  for (std::size_t i = 0; i < L.size(); ++i) {
    if (L[i].spec.type != LayerType::Conv2d) continue;
    std::size_t next = i + 1;
    if (next < L.size() && L[next].spec.type == LayerType::ReLU) ++next;
    if (next < L.size() && L[next].spec.type == LayerType::Conv2d) out.emplace_back(geom(L[i]), geom(L[next]));
  }
  return out;
}

// The blocked layout changes where values lie, never the arithmetic: the same primitives run, so
// forward output, input gradient and parameter gradients equal the NCHW path's bit for bit, with
// the ReLU fused and not; and the loss matches the double-precision reference (measured within
// 7e-8 relative over 60 seeds; the bound is 1e-5).
TEST(DnnlBlocked, SequentialMatchesPlainBitForBit) {
  test::ScopedEnv env("PARBENCH_CPU_BLOCKED", "");  // the options decide
  test::Rand r;
  SCOPED_TRACE(fmt::format("seed {}", r.seed));
  const NetPlan plan = plan_net(chained_convs_net());
  const int64_t batch = 2;
  const std::vector<float> p = init_params(plan, r.seed);
  const std::vector<float> x = r.vec(batch * numel_of(plan.input)), t = r.vec(batch * numel_of(plan.output));
  const double rloss = ref::net_loss(plan, ref::to_double(p), ref::to_double(x), ref::to_double(t), batch);
  const int L = static_cast<int>(plan.layers.size());
  for (const bool fuse : {true, false}) {
    SCOPED_TRACE(fuse ? "ReLU fused" : "ReLU unfused");
    auto on = blocked_backend(true, fuse), off = blocked_backend(false, fuse);
    // The test means something only where the layout is kept: on this CPU's oneDNN, every pair.
    int kept = 0;
    for (const auto& [a, b] : chained_pairs(plan, batch)) {
      kept += on->conv_keeps_blocked(a, b);
      EXPECT_FALSE(off->conv_keeps_blocked(a, b));
    }
    ASSERT_GT(kept, 0) << "no conv pair kept blocked";
    // dy: the MSE gradient the plain path computes.
    Sequential m(plan, 0, L, *off);
    m.load_params(p);
    const int64_t n = m.out_numel(batch);
    const float* y = m.forward(x.data(), batch);
    std::vector<float> dy(static_cast<std::size_t>(n));
    float loss_sum = 0;
    off->mse_loss_grad(n, y, t.data(), 2.0f / static_cast<float>(n), dy.data(), &loss_sum);
    const Pass a = run_stage(plan, 0, L, *on, p, x, dy, batch), b = run_stage(plan, 0, L, *off, p, x, dy, batch);
    EXPECT_EQ(a.y, b.y);
    EXPECT_EQ(a.dx, b.dx);
    EXPECT_EQ(a.grads, b.grads);
    // Against the double reference: the loss (gradients are compared above with the NCHW path,
    // which tests/test_ops.cpp checks against the reference; a whole deep net's gradients would
    // differ wherever float and double disagree on the sign of a pre-ReLU value near 0).
    double loss = 0;
    for (std::size_t i = 0; i < a.y.size(); ++i) loss += (double(a.y[i]) - t[i]) * (double(a.y[i]) - t[i]);
    loss /= static_cast<double>(a.y.size());
    EXPECT_NEAR(loss, rloss, 1e-5 * rloss);
  }
}

// Stage boundaries stay NCHW: a net cut between a conv and its ReLU, or between a ReLU and the
// next conv, gives what the whole net gives, as model parallelism relies on.
TEST(DnnlBlocked, StagesCutAnywhereComposeToTheWholeNet) {
  test::ScopedEnv env("PARBENCH_CPU_BLOCKED", "");
  test::Rand r;
  SCOPED_TRACE(fmt::format("seed {}", r.seed));
  const NetPlan plan = plan_net(chained_convs_net());
  const int64_t batch = 3;
  const int L = static_cast<int>(plan.layers.size());
  const std::vector<float> p = init_params(plan, r.seed);
  const std::vector<float> x = r.vec(batch * numel_of(plan.input)), dy = r.vec(batch * numel_of(plan.output));
  auto be = blocked_backend(true, true);
  const Pass whole = run_stage(plan, 0, L, *be, p, x, dy, batch);
  for (const int cut : {1, 2, 4, 5, 6}) {
    SCOPED_TRACE(fmt::format("cut before layer {}", cut));
    // The first stage's own output gradient only sizes its backward here; its y is what counts.
    const std::vector<float> first_dy(static_cast<std::size_t>(batch * numel_of(plan.layers[cut - 1].out)), 0.0f);
    const Pass second = run_stage(plan, cut, L, *be, p, run_stage(plan, 0, cut, *be, p, x, first_dy, batch).y, dy, batch);
    // The first stage again, now with the second's input gradient.
    Sequential first(plan, 0, cut, *be);
    first.load_params(p);
    first.forward(x.data(), batch);
    std::vector<float> dx(x.size(), NAN);
    first.backward(second.dx.data(), dx.data(), false);
    EXPECT_EQ(second.y, whole.y);
    EXPECT_EQ(dx, whole.dx);
    std::vector<float> grads = first.grads().to_host();
    grads.insert(grads.end(), second.grads.begin(), second.grads.end());
    EXPECT_EQ(grads, whole.grads);
  }
}

// Training steps of the strategies that cut the net (pipeline: stage boundaries, micro-batches
// accumulating gradients; tp: channel slices between all-gathers) and the single worker: the
// same parameters and losses with the blocked layout on as off, bit for bit.
TEST(DnnlBlocked, StrategiesTrainTheSameSteps) {
  test::Rand r;
  SCOPED_TRACE(fmt::format("seed {}", r.seed));
  NetSpec net = chained_convs_net();
  const NetPlan plan = plan_net(net);
  const int64_t batch = 4;
  const std::vector<float> p0 = init_params(plan, r.seed);
  const std::vector<float> x = r.vec(batch * numel_of(plan.input)), t = r.vec(batch * numel_of(plan.output));
  struct Case {
    std::string name;
    int devices;
    std::vector<int> balance;
  };
  for (const Case& c : {Case{"regular", 1, {}}, Case{"pipeline", 2, {3, 9}}, Case{"pipeline", 2, {6, 6}},
                        Case{"mp", 2, {4, 8}}, Case{"tp", 2, {}}}) {
    SCOPED_TRACE(fmt::format("{} over {} workers, balance {}", c.name, c.devices, fmt::join(c.balance, ",")));
    std::vector<float> params[2];
    std::vector<double> losses[2];
    for (const bool blocked : {true, false}) {
      test::ScopedEnv env("PARBENCH_CPU_BLOCKED", blocked ? "1" : "0");
      StrategyOptions o;
      o.devices = c.devices;
      o.backend.threads = 1;
      o.micro_batches = 2;
      o.balance = c.balance;
      auto s = make_strategy(c.name, o);
      s->setup(plan, p0, net.adam);
      s->load_batch(x, t, batch);
      for (int k = 0; k < 3; ++k) {
        s->step();
        losses[blocked].push_back(s->loss());
      }
      params[blocked] = s->params();
    }
    EXPECT_EQ(losses[true], losses[false]);
    EXPECT_EQ(params[true], params[false]);
    EXPECT_NE(params[true], p0) << "no step changed the parameters";
  }
}

#else

TEST(Dnnl, Skipped) { GTEST_SKIP() << "built without oneDNN (PARBENCH_DNNL=OFF or libdnnl-dev missing)"; }

#endif

}  // namespace
}  // namespace pb
