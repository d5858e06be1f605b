// cuDNN convolutions against the CPU backend on fresh random shapes and values each run (the seed
// is printed with any failure), outputs poisoned with NaN first, tolerance per precision: every
// algorithm search, no workspace, a tensor over cuDNN's limit, the search's environment variable.
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

// A convolution whose tensors hold 2^31 elements (8 images of 1x16384x16384), which one cuDNN
// call refuses: the backend splits the batch. Image i holds the constant i + 1 in x and dy, so
// every output is known in closed form (taps that fall on the padding contribute nothing) and
// a part computed at the wrong offset, skipped or not accumulated shows up.
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
    fill_device(dy, dy.data() + i * img, img, static_cast<float>(i + 1));
  }
  fill_device(y, y.data(), total, std::numeric_limits<float>::quiet_NaN());
  fill_device(dx, dx.data(), total, std::numeric_limits<float>::quiet_NaN());
  be->conv2d_forward(g, x.data(), gw.data(), gb.data(), y.data());
  be->conv2d_backward_data(g, dy.data(), gw.data(), dx.data());
  be->conv2d_backward_weights(g, x.data(), dy.data(), dw.data(), db.data(), /*accumulate=*/true);
  be->synchronize();
  SCOPED_TRACE(be->conv_algorithms(g));

  // Sum of the taps (r, s) whose input (ph + r - 1, qw + s - 1) lies inside the image.
  auto taps = [&](int64_t ph, int64_t qw, int sign) {
    double sum = 0;
    for (int64_t rr = 0; rr < 3; ++rr)
      for (int64_t ss = 0; ss < 3; ++ss) {
        const int64_t ih = ph + sign * (rr - 1), iw = qw + sign * (ss - 1);
        if (ih >= 0 && ih < g.h && iw >= 0 && iw < g.w) sum += w[rr * 3 + ss];
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
      const double want_dx = (i + 1) * taps(ph, qw, -1);  // the transposed convolution of dy
      EXPECT_NEAR(at(y, e), want_y, 1e-5 * (1 + std::fabs(want_y))) << "y image " << i << " at " << ph << "," << qw;
      EXPECT_NEAR(at(dx, e), want_dx, 1e-5 * (1 + std::fabs(want_dx))) << "dx image " << i << " at " << ph << "," << qw;
    }
  // dw[r][s] = 1 (accumulated into) + sum_i (i+1)^2 * (positions where tap (r,s) is inside);
  // db = 1 + sum_i (i+1) * H * W.
  double sq = 0, lin = 0;
  for (int64_t i = 0; i < g.n; ++i) sq += double(i + 1) * (i + 1), lin += double(i + 1);
  const auto got_dw = dw.to_host();
  for (int64_t rr = 0; rr < 3; ++rr)
    for (int64_t ss = 0; ss < 3; ++ss) {
      const double want = 1 + sq * double(H - std::abs(rr - 1)) * double(W - std::abs(ss - 1));
      EXPECT_NEAR(got_dw[rr * 3 + ss], want, 1e-4 * want) << "dw[" << rr << "][" << ss << "]";
    }
  const double want_db = 1 + lin * double(H) * double(W);
  EXPECT_NEAR(db.to_host()[0], want_db, 1e-4 * want_db);
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

}  // namespace
}  // namespace pb
