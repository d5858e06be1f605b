// oneDNN convolutions (engine/dnnl) against the CPU backend's im2col path and a double-precision
// loop, on fresh random shapes every run; tolerance atol + rtol * max|ref|, worst mismatch printed:
// Winograd and direct kernels, channel slices under a scratch cap, the fused ReLU, concurrent backends.
#include "tests/test_dnnl_support.h"

namespace pb {
namespace {

#ifdef PARBENCH_HAVE_DNNL

using namespace pb::dnnl_test;

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

#else

TEST(Dnnl, Skipped) { GTEST_SKIP() << "built without oneDNN (PARBENCH_DNNL=OFF or libdnnl-dev missing)"; }

#endif  // PARBENCH_HAVE_DNNL

}  // namespace
}  // namespace pb
