// cuDNN convolutions against the CPU backend on fresh random shapes and values each run (the seed
// is printed with any failure), outputs poisoned with NaN first, tolerance per precision: every
// algorithm search, no workspace, a tensor over cuDNN's limit, the search's environment variable.
#include <algorithm>

#include "engine/kernel_shapes.h"
#include "tests/test_cuda_support.h"

namespace pb {
namespace {

using namespace pb::cuda_test;

// --- need a GPU ------------------------------------------------------------------------

TEST(CudaGpu, ConvMatchesCpu) {
  PB_REQUIRE_GPU();
  Rand r;
  auto c_be = make_backend(cpu());
  for (Precision p : kPrecisions) {
    auto g_be = gpu_backend(p);
    for (int trial = 0; trial < 20; ++trial) {
      SCOPED_TRACE(fmt::format("seed {} {} trial {}", r.seed, precision_name(p), trial));
      check_conv(r, *g_be, *c_be, tol_for(p));
    }
  }
}

TEST(CudaGpu, ConvExhaustiveSearchMatchesCpu) {
  PB_REQUIRE_GPU();
  Rand r;
  auto c_be = make_backend(cpu());
  for (Precision p : kPrecisions) {
    auto g_be = gpu_backend(p, /*exhaustive=*/true);
    for (int trial = 0; trial < 6; ++trial) {
      SCOPED_TRACE(fmt::format("seed {} {} trial {}", r.seed, precision_name(p), trial));
      check_conv(r, *g_be, *c_be, tol_for(p));
    }
  }
}

TEST(CudaGpu, ConvWithoutWorkspaceMatchesCpu) {
  PB_REQUIRE_GPU();
  Rand r;
  auto c_be = make_backend(cpu());
  for (bool exhaustive : {false, true}) {
    auto g_be = gpu_backend(Precision::Fp32, exhaustive, /*cap=*/0);  // only zero-workspace algorithms
    for (int trial = 0; trial < 4; ++trial) {
      SCOPED_TRACE(fmt::format("seed {} exhaustive {} trial {}", r.seed, exhaustive, trial));
      check_conv(r, *g_be, *c_be, kFp32Tol);
    }
  }
}

// One float read back from the GPU.
float at(const Tensor& t, int64_t i) {
  float v = 0;
  copy_bytes(cpu(), &v, t.device(), t.data() + i, sizeof(float));
  return v;
}

// n copies of v into device memory at p, staged through a host chunk (the backend has no fill op).
void fill_device(const Tensor& t, float* p, int64_t n, float v) {
  const int64_t chunk = std::min<int64_t>(n, int64_t(1) << 26);
  const std::vector<float> host(static_cast<std::size_t>(chunk), v);
  for (int64_t done = 0; done < n; done += chunk) {
    const int64_t m = std::min(chunk, n - done);
    copy_bytes(t.device(), p + done, cpu(), host.data(), static_cast<std::size_t>(m) * sizeof(float));
  }
}

// v * (-1)^(h + w) into an image of rows x cols (cols even) at p, staged a block of rows at a time.
void fill_checkerboard(const Tensor& t, float* p, int64_t rows, int64_t cols, float v) {
  const int64_t block = std::max<int64_t>(2, std::min<int64_t>(rows, (int64_t(1) << 26) / cols) / 2 * 2);
  std::vector<float> host(static_cast<std::size_t>(block * cols));
  for (int64_t h = 0; h < block; ++h)
    for (int64_t w = 0; w < cols; ++w) host[static_cast<std::size_t>(h * cols + w)] = (h + w) % 2 ? -v : v;
  for (int64_t done = 0; done < rows; done += block) {
    const int64_t m = std::min(block, rows - done);
    copy_bytes(t.device(), p + done * cols, cpu(), host.data(), static_cast<std::size_t>(m * cols) * sizeof(float));
  }
}

// A convolution whose tensors hold 2^31 elements (8 images of 1x16384x16384), which one cuDNN
// call refuses: the backend splits the batch. Image i holds the constant i + 1 in x and
// (i + 1) * (-1)^(h + w) in dy, so every output is known in closed form (taps that fall on the
// padding contribute nothing) and a part computed at the wrong offset, skipped or not
// accumulated shows up. dy alternates in sign so that the weight and bias gradients, sums of
// 2^31 products, stay small: a sum of like-signed terms that large stops growing in fp32 once
// it passes 2^24 times the partial sums added to it (one H200 run gave 4.4e9 for 5.5e10).
TEST(CudaGpu, ConvOverTheTensorLimitSplitsTheBatch) {
  PB_REQUIRE_GPU();
  ConvGeom g;
  g.n = 8, g.c = 1, g.k = 1, g.h = 16384, g.w = 16384, g.r = 3, g.s = 3, g.pad_h = 1, g.pad_w = 1;
  const int64_t img = g.h * g.w, total = g.n * img;
  ASSERT_GT(total, kMaxTensorElements);
  const std::size_t need = 4 * static_cast<std::size_t>(total) * sizeof(float) + (std::size_t(4) << 30);
  if (system_info().gpus.at(0).total_bytes < need) GTEST_SKIP() << "needs " << (need >> 30) << " GiB of GPU memory";
  ASSERT_EQ(conv_batch_parts(g).size(), 2u);

  Rand r;
  SCOPED_TRACE(fmt::format("seed {}", r.seed));
  const std::vector<float> w = r.vec(9), b = r.vec(1);
  auto be = gpu_backend(Precision::Fp32);
  Tensor x = Tensor::empty({total}, cuda()), dy = Tensor::empty({total}, cuda());
  Tensor y = Tensor::empty({total}, cuda()), dx = Tensor::empty({total}, cuda());
  Tensor gw = gpu(w), gb = gpu(b), dw = gpu(std::vector<float>(9, 1.0f)), db = gpu({1.0f});
  for (int64_t i = 0; i < g.n; ++i) {
    fill_device(x, x.data() + i * img, img, static_cast<float>(i + 1));
    fill_checkerboard(dy, dy.data() + i * img, g.h, g.w, static_cast<float>(i + 1));
  }
  fill_device(y, y.data(), total, std::numeric_limits<float>::quiet_NaN());
  fill_device(dx, dx.data(), total, std::numeric_limits<float>::quiet_NaN());
  be->conv2d_forward(g, x.data(), gw.data(), gb.data(), y.data());
  be->conv2d_backward_data(g, dy.data(), gw.data(), dx.data());
  be->conv2d_backward_weights(g, x.data(), dy.data(), dw.data(), db.data(), /*accumulate=*/true);
  be->synchronize();
  SCOPED_TRACE(be->conv_algorithms(g));

  // Sum of the taps (r, s) whose input (ph + r - 1, qw + s - 1) lies inside the image; for the
  // transposed convolution (sign -1) of the checkerboard dy, each tap weighted by the sign of
  // the dy element it reads relative to (ph, qw): (-1)^(r + s).
  auto taps = [&](int64_t ph, int64_t qw, int sign) {
    double sum = 0;
    for (int64_t rr = 0; rr < 3; ++rr)
      for (int64_t ss = 0; ss < 3; ++ss) {
        const int64_t ih = ph + sign * (rr - 1), iw = qw + sign * (ss - 1);
        const double checker = sign < 0 && (rr + ss) % 2 ? -1.0 : 1.0;
        if (ih >= 0 && ih < g.h && iw >= 0 && iw < g.w) sum += checker * w[rr * 3 + ss];
      }
    return sum;
  };
  const int64_t H = g.h, W = g.w;
  const std::pair<int64_t, int64_t> spots[] = {{0, 0}, {0, W - 1}, {H - 1, 0}, {H - 1, W - 1},
                                               {0, 77}, {H / 2, 0}, {H / 2, W / 2}, {H - 1, 12345}};
  for (int64_t i = 0; i < g.n; ++i)
    for (const auto& [ph, qw] : spots) {
      const int64_t e = i * img + ph * W + qw;
      const double want_y = (i + 1) * taps(ph, qw, 1) + b[0];
      const double want_dx = (i + 1) * ((ph + qw) % 2 ? -1 : 1) * taps(ph, qw, -1);  // transposed conv of dy
      EXPECT_NEAR(at(y, e), want_y, 1e-5 * (1 + std::fabs(want_y))) << "y image " << i << " at " << ph << "," << qw;
      EXPECT_NEAR(at(dx, e), want_dx, 1e-5 * (1 + std::fabs(want_dx))) << "dx image " << i << " at " << ph << "," << qw;
    }
  // dw[r][s] = 1 (accumulated into) + sum_i (i+1)^2 * A(r) * A(s), A the sum of (-1)^p over the
  // output rows p where tap r is inside: A(0) = -1 (p = 1..H-1), A(1) = 0, A(2) = 1 (p = 0..H-2),
  // H and W even. db = 1 + sum of dy = 1. A part skipped, or one that overwrote instead of adding,
  // leaves 0 at the centre tap and in db, or drops 30 or 174 of the corners' +-204. Every partial
  // sum is an integer far below 2^24, so the result is exact.
  ASSERT_TRUE(H % 2 == 0 && W % 2 == 0);
  double sq = 0;
  for (int64_t i = 0; i < g.n; ++i) sq += double(i + 1) * (i + 1);
  const double A[3] = {-1, 0, 1};
  const auto got_dw = dw.to_host();
  for (int64_t rr = 0; rr < 3; ++rr)
    for (int64_t ss = 0; ss < 3; ++ss)
      EXPECT_EQ(got_dw[rr * 3 + ss], 1 + sq * A[rr] * A[ss]) << "dw[" << rr << "][" << ss << "]";
  EXPECT_EQ(db.to_host()[0], 1.0f);
  const std::string algos = be->conv_algorithms(g);
  EXPECT_NE(algos.find("batch 0..3"), std::string::npos) << algos;
  EXPECT_NE(algos.find("batch 4..7"), std::string::npos) << algos;
}

TEST(CudaGpu, ConvSearchEnvironmentVariableIsValidated) {
  PB_REQUIRE_GPU();
  ::setenv("PARBENCH_CONV_SEARCH", "fastest", 1);
  EXPECT_THROW(make_backend(cuda()), UsageError);
  ::setenv("PARBENCH_CONV_SEARCH", "exhaustive", 1);
  EXPECT_NE(make_backend(cuda())->name().find("exhaustive"), std::string::npos);
  ::unsetenv("PARBENCH_CONV_SEARCH");
  EXPECT_NE(make_backend(cuda())->name().find("heuristics"), std::string::npos);
}


// --layout nhwc (BackendOptions::cuda_nhwc): the calls with a Blocked (NHWC) side -- NCHW in,
// NHWC out (a run's first convolution), NHWC both sides, NHWC in, NCHW out (its last) -- against
// the CPU's plain calls, through both cuDNN APIs, with and without bias, overwriting and accumulating.
TEST(CudaGpu, ConvWithNhwcSidesMatchesCpu) {
  PB_REQUIRE_GPU();
  Rand r;
  auto c_be = make_backend(cpu());
  for (const char* api : {"graph", "legacy"})
    for (Precision p : kPrecisions) {
      test::ScopedEnv env("PARBENCH_CUDNN_API", api);
      BackendOptions o;
      o.precision = p;
      o.cuda_nhwc = true;
      auto g_be = make_backend(cuda(), o);
      const ConvGeom a = gpu_geom(r);
      EXPECT_TRUE(g_be->conv_keeps_blocked(a, a));
      EXPECT_NE(g_be->name().find("NHWC"), std::string::npos) << g_be->name();
      const ActLayout P = ActLayout::Plain, B = ActLayout::Blocked;
      for (ConvLayouts io : {ConvLayouts{P, B}, ConvLayouts{B, B}, ConvLayouts{B, P}})
        for (int trial = 0; trial < 3; ++trial) {
          const ConvGeom g = gpu_geom(r);
          SCOPED_TRACE(fmt::format("seed {} {} API {} x {} y {} trial {}: {}", r.seed, precision_name(p), api,
                                   io.x == B ? "NHWC" : "NCHW", io.y == B ? "NHWC" : "NCHW", trial, geom_str(g)));
          const int64_t xn = g.n * g.c * g.h * g.w, wn = g.k * g.c * g.r * g.s, yn = g.n * g.k * g.p() * g.q();
          const auto x = r.vec(xn), w = r.vec(wn), b = r.vec(g.k), dy = r.vec(yn);
          const bool bias = r.coin(), accumulate = r.coin();
          const auto dw0 = accumulate ? r.vec(wn) : poisoned(wn), db0 = accumulate ? r.vec(g.k) : poisoned(g.k);
          std::vector<float> y = poisoned(yn), dx = poisoned(xn), dw = dw0, db = db0;
          c_be->conv2d_forward(g, x.data(), w.data(), bias ? b.data() : nullptr, y.data());
          c_be->conv2d_backward_data(g, dy.data(), w.data(), dx.data());
          c_be->conv2d_backward_weights(g, x.data(), dy.data(), dw.data(), bias ? db.data() : nullptr, accumulate);

          const auto side_x = [&](const std::vector<float>& v) { return io.x == B ? test::swap_inner(v, g.n, g.c, g.h * g.w) : v; };
          const auto side_y = [&](const std::vector<float>& v) { return io.y == B ? test::swap_inner(v, g.n, g.k, g.p() * g.q()) : v; };
          Tensor gx = gpu(side_x(x)), gw = gpu(w), gb = gpu(b), gdy = gpu(side_y(dy));
          Tensor gy = gpu_poisoned(yn), gdx = gpu_poisoned(xn), gdw = gpu(dw0), gdb = gpu(db0);
          g_be->conv2d_forward_in(g, io, gx.data(), gw.data(), bias ? gb.data() : nullptr, gy.data());
          g_be->conv2d_backward_data_in(g, io, gdy.data(), gw.data(), gdx.data());
          g_be->conv2d_backward_weights_in(g, io, gx.data(), gdy.data(), gdw.data(), bias ? gdb.data() : nullptr,
                                           accumulate);
          SCOPED_TRACE(g_be->conv_algorithms(g));
          const std::vector<float> got_y = gy.to_host(), got_dx = gdx.to_host();
          EXPECT_REL_CLOSE(io.y == B ? test::swap_inner(got_y, g.n, g.p() * g.q(), g.k) : got_y, y, tol_for(p));
          EXPECT_REL_CLOSE(io.x == B ? test::swap_inner(got_dx, g.n, g.h * g.w, g.c) : got_dx, dx, tol_for(p));
          EXPECT_REL_CLOSE(gdw.to_host(), dw, tol_for(p));
          if (bias) EXPECT_REL_CLOSE(gdb.to_host(), db, tol_for(p));
          else EXPECT_TRUE(same_bits(gdb.to_host(), db0)) << "db written without a bias";
        }
    }
}

// A convolution with the ReLU after it (one bias_relu pass) gives exactly what the convolution and
// then relu_forward give, in every layout pair and both APIs, with and without bias; one shape has
// more outputs than the kernel's grid has threads, so threads step their channel along the grid.
TEST(CudaGpu, ConvWithReluIsTheConvThenReluBitForBit) {
  PB_REQUIRE_GPU();
  Rand r;
  ConvGeom big;
  big.n = 2, big.c = 3, big.k = 7, big.h = 397, big.w = 397, big.r = 3, big.s = 3, big.pad_h = 1, big.pad_w = 1;
  ASSERT_GT(big.n * big.k * big.p() * big.q(), kernels::kMaxBlocks * kernels::kThreads);
  const ActLayout P = ActLayout::Plain, B = ActLayout::Blocked;
  for (const char* api : {"graph", "legacy"})
    for (Precision p : kPrecisions)
      for (bool nhwc : {false, true}) {
        test::ScopedEnv env("PARBENCH_CUDNN_API", api);
        BackendOptions o;
        o.precision = p;
        o.cuda_nhwc = nhwc;
        auto be = make_backend(cuda(), o);
        const std::vector<ConvLayouts> ios =
            nhwc ? std::vector<ConvLayouts>{{P, B}, {B, B}, {B, P}} : std::vector<ConvLayouts>{{P, P}};
        for (ConvLayouts io : ios)
          for (int trial = 0; trial < 3; ++trial) {
            const ConvGeom g = trial == 0 ? big : gpu_geom(r);
            const bool bias = trial != 2;
            SCOPED_TRACE(fmt::format("seed {} {} API {} x {} y {} bias {}: {}", r.seed, precision_name(p), api,
                                     io.x == B ? "NHWC" : "NCHW", io.y == B ? "NHWC" : "NCHW", bias, geom_str(g)));
            const int64_t yn = g.n * g.k * g.p() * g.q();
            Tensor x = gpu(r.vec(g.n * g.c * g.h * g.w)), w = gpu(r.vec(g.k * g.c * g.r * g.s)), b = gpu(r.vec(g.k));
            Tensor fused = gpu_poisoned(yn), apart = gpu_poisoned(yn);
            ASSERT_TRUE(be->conv2d_relu_forward_in(g, io, x.data(), w.data(), bias ? b.data() : nullptr, fused.data()));
            be->conv2d_forward_in(g, io, x.data(), w.data(), bias ? b.data() : nullptr, apart.data());
            const std::vector<float> conv = apart.to_host();
            be->relu_forward(yn, apart.data(), apart.data());
            const std::vector<float> want = apart.to_host(), got = fused.to_host();
            EXPECT_TRUE(std::any_of(conv.begin(), conv.end(), [](float v) { return v < 0; })) << "no value for ReLU to clip";
            EXPECT_TRUE(same_bits(got, want)) << "the fused pass differs from the convolution then ReLU";
          }
      }
}

// The tests above run through the default, cuDNN's graph API; this one through the legacy API,
// which a shape the graph API has no engine for falls back to.
TEST(CudaGpu, ConvThroughTheLegacyApiMatchesCpu) {
  PB_REQUIRE_GPU();
  test::ScopedEnv api("PARBENCH_CUDNN_API", "legacy");
  Rand r;
  auto c_be = make_backend(cpu());
  for (Precision p : kPrecisions)
    for (bool exhaustive : {false, true}) {
      auto g_be = gpu_backend(p, exhaustive);
      EXPECT_NE(g_be->name().find("legacy API"), std::string::npos) << g_be->name();
      for (int trial = 0; trial < 4; ++trial) {
        SCOPED_TRACE(fmt::format("seed {} {} exhaustive {} trial {}", r.seed, precision_name(p), exhaustive, trial));
        check_conv(r, *g_be, *c_be, tol_for(p));
      }
    }
}

// By default every direction of an ordinary 3x3 convolution runs on a graph-API engine, and the
// choice is named; PARBENCH_CUDNN_API takes graph or legacy and nothing else.
TEST(CudaGpu, GraphApiIsTheDefaultAndItsVariableIsValidated) {
  PB_REQUIRE_GPU();
  {
    test::ScopedEnv api("PARBENCH_CUDNN_API", "fastest");
    try {
      make_backend(cuda());
      ADD_FAILURE() << "PARBENCH_CUDNN_API=fastest accepted";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("PARBENCH_CUDNN_API"), std::string::npos) << e.what();
    }
  }
  ::unsetenv("PARBENCH_CUDNN_API");
  for (bool exhaustive : {false, true}) {
    auto be = gpu_backend(Precision::Tf32, exhaustive);
    EXPECT_NE(be->name().find("graph API"), std::string::npos) << be->name();
    ConvGeom g;
    g.n = 2, g.c = 32, g.k = 64, g.h = 24, g.w = 24, g.r = 3, g.s = 3, g.pad_h = 1, g.pad_w = 1;
    Tensor x = gpu(std::vector<float>(static_cast<std::size_t>(g.n * g.c * g.h * g.w), 1.0f));
    Tensor w = gpu(std::vector<float>(static_cast<std::size_t>(g.k * g.c * 9), 0.5f));
    Tensor y = gpu_poisoned(g.n * g.k * g.h * g.w), dx = gpu_poisoned(g.n * g.c * g.h * g.w);
    Tensor dw = gpu_poisoned(g.k * g.c * 9);
    be->conv2d_forward(g, x.data(), w.data(), nullptr, y.data());
    be->conv2d_backward_data(g, y.data(), w.data(), dx.data());
    be->conv2d_backward_weights(g, x.data(), y.data(), dw.data(), nullptr, false);
    be->synchronize();
    const std::string algos = be->conv_algorithms(g);
    for (const char* dir : {"forward graph engine", "backward-data graph engine", "backward-filter graph engine"})
      EXPECT_NE(algos.find(dir), std::string::npos) << dir << " in: " << algos;
    // The centre output sees all 9 taps of 32 channels of ones, weighted 0.5: 144.
    EXPECT_FLOAT_EQ(at(y, g.h / 2 * g.w + g.w / 2), 144.0f);
  }
}

}  // namespace
}  // namespace pb
