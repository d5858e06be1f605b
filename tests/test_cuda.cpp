// The CUDA backend against the CPU backend: every op on fresh random shapes and values each run
// (the seed is printed with any failure), outputs poisoned with NaN first, tolerance per
// precision; a short GPU training run against the CPU engine; allocator accounting and
// out-of-memory reporting. GPU tests skip where there is no GPU or no CUDA build.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>

#include "engine/backend.h"
#include "engine/batch_split.h"
#include "engine/check.h"
#include "engine/device.h"
#include "engine/net.h"
#include "engine/tensor.h"
#include "strategies/strategy.h"
#include "tests/gpu_skip.h"
#include "workloads/workload.h"
#include "tests/support.h"


namespace pb {
namespace {

// Relative norm error ||got - want|| / ||want||. fp32 ops accumulate the same products in a
// different order than the CPU: a few float roundings, far below 1e-5. TF32 keeps 10 mantissa
// bits (unit roundoff 2^-11 ~ 4.9e-4) on both inputs of every product, rounded or truncated
// depending on the kernel: ~1e-3 relative in the worst case, so 3e-3 leaves margin while
// still catching a wrong index or a missing term (errors of order 1).
constexpr double kFp32Tol = 1e-5;
constexpr double kTf32Tol = 3e-3;
double tol_for(Precision p) { return p == Precision::Fp32 ? kFp32Tol : kTf32Tol; }

const Precision kPrecisions[] = {Precision::Fp32, Precision::Tf32};

using test::geom_str;
using test::Rand;

struct Diff {
  double rel = 0;  // ||got - want|| / ||want||; infinite when got has a NaN or the sizes differ
  std::size_t worst = 0;
  float got = 0, want = 0;
};

Diff compare(const std::vector<float>& got, const std::vector<float>& want) {
  Diff d;
  if (got.size() != want.size()) {
    d.rel = std::numeric_limits<double>::infinity();
    return d;
  }
  double err = 0, norm = 0, worst = -1;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double e = std::fabs(static_cast<double>(got[i]) - want[i]);
    const double ei = std::isnan(e) ? std::numeric_limits<double>::infinity() : e;
    err += ei * ei;
    norm += static_cast<double>(want[i]) * want[i];
    if (ei > worst) worst = ei, d.worst = i, d.got = got[i], d.want = want[i];
  }
  d.rel = err == 0 ? 0 : std::sqrt(err) / std::max(std::sqrt(norm), 1e-30);
  return d;
}

#define EXPECT_REL_CLOSE(actual, expected, tol)                                                        \
  do {                                                                                                 \
    const Diff d_ = compare((actual), (expected));                                                     \
    EXPECT_LE(d_.rel, (tol)) << #actual << " vs " << #expected << ": relative norm error " << d_.rel \
                             << ", worst element [" << d_.worst << "] " << d_.got << " vs " << d_.want; \
  } while (0)

// Bit-for-bit equal (NaN poison included): an output that must not have been touched.
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

ConvGeom gpu_geom(Rand& r) { return test::random_geom(r, {4, 64, 23}); }

// Host <-> GPU helpers; to_host() after queued GPU work is itself part of what is tested (the
// copy must wait for the backend's stream).
Tensor gpu(const std::vector<float>& v) { return Tensor::from_host({static_cast<int64_t>(v.size())}, v, cuda()); }
Tensor gpu_poisoned(int64_t n) {
  return gpu(std::vector<float>(static_cast<std::size_t>(n), std::numeric_limits<float>::quiet_NaN()));
}
std::vector<float> poisoned(int64_t n) {
  return std::vector<float>(static_cast<std::size_t>(n), std::numeric_limits<float>::quiet_NaN());
}

std::unique_ptr<Backend> gpu_backend(Precision p, bool exhaustive = false,
                                     std::size_t cap = std::size_t(1) << 30) {
  BackendOptions o;
  o.precision = p;
  o.exhaustive_conv_search = exhaustive;
  o.workspace_cap_bytes = cap;
  return make_backend(cuda(), o);
}

// One random convolution through all three directions, with and without bias, overwriting
// and accumulating, GPU against CPU.
void check_conv(Rand& r, Backend& g_be, Backend& c_be, double tol) {
  const ConvGeom g = gpu_geom(r);
  SCOPED_TRACE(geom_str(g));
  const int64_t xn = g.n * g.c * g.h * g.w, wn = g.k * g.c * g.r * g.s, yn = g.n * g.k * g.p() * g.q();
  const auto x = r.vec(xn), w = r.vec(wn), b = r.vec(g.k), dy = r.vec(yn);
  const bool bias = r.coin(), accumulate = r.coin();
  const auto dw0 = accumulate ? r.vec(wn) : poisoned(wn), db0 = accumulate ? r.vec(g.k) : poisoned(g.k);

  std::vector<float> y = poisoned(yn), dx = poisoned(xn), dw = dw0, db = db0;
  c_be.conv2d_forward(g, x.data(), w.data(), bias ? b.data() : nullptr, y.data());
  c_be.conv2d_backward_data(g, dy.data(), w.data(), dx.data());
  c_be.conv2d_backward_weights(g, x.data(), dy.data(), dw.data(), bias ? db.data() : nullptr, accumulate);

  Tensor gx = gpu(x), gw = gpu(w), gb = gpu(b), gdy = gpu(dy);
  Tensor gy = gpu_poisoned(yn), gdx = gpu_poisoned(xn), gdw = gpu(dw0), gdb = gpu(db0);
  g_be.conv2d_forward(g, gx.data(), gw.data(), bias ? gb.data() : nullptr, gy.data());
  g_be.conv2d_backward_data(g, gdy.data(), gw.data(), gdx.data());
  g_be.conv2d_backward_weights(g, gx.data(), gdy.data(), gdw.data(), bias ? gdb.data() : nullptr, accumulate);

  SCOPED_TRACE(fmt::format("bias {}, accumulate {}", bias, accumulate));
  SCOPED_TRACE(g_be.conv_algorithms(g));  // which cuDNN algorithms produced a wrong result
  EXPECT_REL_CLOSE(gy.to_host(), y, tol);
  EXPECT_REL_CLOSE(gdx.to_host(), dx, tol);
  EXPECT_REL_CLOSE(gdw.to_host(), dw, tol);
  if (bias) EXPECT_REL_CLOSE(gdb.to_host(), db, tol);
  else EXPECT_TRUE(same_bits(gdb.to_host(), db0)) << "db written without a bias";
}

// --- runs everywhere ---------------------------------------------------------------------

TEST(Cuda, GpuCountNeverCrashes) {
  const int n = cuda_device_count();
  EXPECT_GE(n, 0);
#ifndef PARBENCH_HAVE_CUDA
  EXPECT_EQ(n, 0);
#endif
  EXPECT_EQ(cuda_device_count(), n) << "the count is stable";
}

TEST(Cuda, SystemInfoListsTheBuildAndEveryGpu) {
  const SystemInfo info = system_info(CudaInfo::Always);
  EXPECT_EQ(static_cast<int>(info.gpus.size()), cuda_device_count());
#ifdef PARBENCH_HAVE_CUDA
  EXPECT_TRUE(info.cuda_built);
  EXPECT_FALSE(info.cuda_module.empty()) << info.cuda_note;
  EXPECT_GT(info.cuda_runtime_version, 0);
  EXPECT_GE(info.cudnn_version, 90000) << "cuDNN 9 or later";
  if (info.gpus.empty()) {
    EXPECT_FALSE(info.cuda_note.empty()) << "says why there is no GPU";
  }
#else
  EXPECT_FALSE(info.cuda_built);
#endif
#ifdef PARBENCH_HAVE_NCCL
  EXPECT_TRUE(info.nccl_built);
  EXPECT_GT(info.nccl_version, 0);
#endif
  for (const GpuInfo& g : info.gpus) {
    EXPECT_FALSE(g.name.empty());
    EXPECT_GT(g.total_bytes, 0u);
    EXPECT_GE(g.cc_major, 1);
  }
  const std::string text = info.str();
  EXPECT_NE(text.find("cuda"), std::string::npos) << text;
}

TEST(Cuda, MissingGpuIsAnErrorNotACrash) {
  const Device missing = cuda(cuda_device_count());
  EXPECT_THROW(make_backend(missing), Error);
  EXPECT_THROW(allocator_for(missing), Error);
  EXPECT_THROW(Tensor::empty({4}, missing), Error);
}

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

TEST(CudaGpu, LinearMatchesCpu) {
  PB_REQUIRE_GPU();
  Rand r;
  auto c_be = make_backend(cpu());
  for (Precision p : kPrecisions) {
    auto g_be = gpu_backend(p);
    for (int trial = 0; trial < 12; ++trial) {
      const int64_t n = r.i(1, 9), in = r.i(1, 300), out = r.i(1, 129);
      const bool bias = r.coin(), accumulate = r.coin();
      SCOPED_TRACE(fmt::format("seed {} {} trial {}: n {} in {} out {} bias {} accumulate {}", r.seed,
                               precision_name(p), trial, n, in, out, bias, accumulate));
      const auto x = r.vec(n * in), w = r.vec(out * in), b = r.vec(out), dy = r.vec(n * out);
      const auto dw0 = accumulate ? r.vec(out * in) : poisoned(out * in);
      const auto db0 = accumulate ? r.vec(out) : poisoned(out);
      std::vector<float> y = poisoned(n * out), dx = poisoned(n * in), dw = dw0, db = db0;
      c_be->linear_forward(n, in, out, x.data(), w.data(), bias ? b.data() : nullptr, y.data());
      c_be->linear_backward_data(n, in, out, dy.data(), w.data(), dx.data());
      c_be->linear_backward_weights(n, in, out, x.data(), dy.data(), dw.data(), bias ? db.data() : nullptr,
                                    accumulate);
      Tensor gx = gpu(x), gw = gpu(w), gb = gpu(b), gdy = gpu(dy);
      Tensor gy = gpu_poisoned(n * out), gdx = gpu_poisoned(n * in), gdw = gpu(dw0), gdb = gpu(db0);
      g_be->linear_forward(n, in, out, gx.data(), gw.data(), bias ? gb.data() : nullptr, gy.data());
      g_be->linear_backward_data(n, in, out, gdy.data(), gw.data(), gdx.data());
      g_be->linear_backward_weights(n, in, out, gx.data(), gdy.data(), gdw.data(), bias ? gdb.data() : nullptr,
                                    accumulate);
      EXPECT_REL_CLOSE(gy.to_host(), y, tol_for(p));
      EXPECT_REL_CLOSE(gdx.to_host(), dx, tol_for(p));
      EXPECT_REL_CLOSE(gdw.to_host(), dw, tol_for(p));
      if (bias) EXPECT_REL_CLOSE(gdb.to_host(), db, kFp32Tol);  // a plain sum, no TF32
    }
  }
}

TEST(CudaGpu, ReluMatchesCpuAlsoInPlace) {
  PB_REQUIRE_GPU();
  Rand r;
  auto c_be = make_backend(cpu());
  auto g_be = gpu_backend(Precision::Fp32);
  for (int64_t n : {int64_t(1), r.i(2, 1000), r.i(100000, 3000000)}) {
    SCOPED_TRACE(fmt::format("seed {} n {}", r.seed, n));
    auto x = r.vec(n);
    x[0] = 0.0f;  // relu(0) = 0 and its gradient is 0, as in PyTorch
    const auto dy = r.vec(n);
    std::vector<float> y = poisoned(n), dx = poisoned(n);
    c_be->relu_forward(n, x.data(), y.data());
    c_be->relu_backward(n, y.data(), dy.data(), dx.data());

    Tensor gx = gpu(x), gy = gpu_poisoned(n), gdy = gpu(dy), gdx = gpu_poisoned(n);
    g_be->relu_forward(n, gx.data(), gy.data());
    g_be->relu_backward(n, gy.data(), gdy.data(), gdx.data());
    EXPECT_EQ(gy.to_host(), y);
    EXPECT_EQ(gdx.to_host(), dx);

    // In place: y over x, dx over dy (what Sequential does).
    g_be->relu_forward(n, gx.data(), gx.data());
    g_be->relu_backward(n, gx.data(), gdy.data(), gdy.data());
    EXPECT_EQ(gx.to_host(), y);
    EXPECT_EQ(gdy.to_host(), dx);
  }
}

TEST(CudaGpu, MseLossGradMatchesCpu) {
  PB_REQUIRE_GPU();
  Rand r;
  auto c_be = make_backend(cpu());
  auto g_be = gpu_backend(Precision::Fp32);
  // 1, small, and more elements than 1024 blocks of 256 threads cover (grid-stride + last block).
  for (int64_t n : {int64_t(1), r.i(2, 5000), r.i(300000, 2000000)}) {
    SCOPED_TRACE(fmt::format("seed {} n {}", r.seed, n));
    const auto y = r.vec(n), t = r.vec(n);
    const float scale = 2.0f / static_cast<float>(n * r.i(1, 3));  // global batch may be larger
    std::vector<float> dy = poisoned(n);
    float loss = NAN;
    c_be->mse_loss_grad(n, y.data(), t.data(), scale, dy.data(), &loss);
    Tensor gy = gpu(y), gt = gpu(t), gdy = gpu_poisoned(n), gloss = gpu_poisoned(1);
    for (int rep = 0; rep < 2; ++rep) {  // the second call checks the reduction reset itself
      g_be->mse_loss_grad(n, gy.data(), gt.data(), scale, gdy.data(), gloss.data());
      EXPECT_REL_CLOSE(gloss.to_host(), std::vector<float>{loss}, 1e-6);
      EXPECT_REL_CLOSE(gdy.to_host(), dy, 1e-7);
    }
  }
}

TEST(CudaGpu, AdamMatchesCpu) {
  PB_REQUIRE_GPU();
  Rand r;
  auto c_be = make_backend(cpu());
  auto g_be = gpu_backend(Precision::Fp32);
  for (double wd : {0.0, 0.01}) {
    const int64_t n = r.i(1, 200000);
    SCOPED_TRACE(fmt::format("seed {} n {} weight_decay {}", r.seed, n, wd));
    AdamParams a;
    a.lr = 1e-3, a.weight_decay = wd;
    auto p = r.vec(n), m = std::vector<float>(n, 0.0f), v = std::vector<float>(n, 0.0f);
    Tensor gp = gpu(p), gm = gpu(m), gv = gpu(v);
    for (int64_t step = 1; step <= 3; ++step) {
      const auto g = r.vec(n);
      Tensor gg = gpu(g);
      c_be->adam_step(n, p.data(), g.data(), m.data(), v.data(), a, step);
      g_be->adam_step(n, gp.data(), gg.data(), gm.data(), gv.data(), a, step);
    }
    EXPECT_REL_CLOSE(gp.to_host(), p, kFp32Tol);
    EXPECT_REL_CLOSE(gm.to_host(), m, kFp32Tol);
    EXPECT_REL_CLOSE(gv.to_host(), v, kFp32Tol);
  }
}

TEST(CudaGpu, CopiesInEveryDirection) {
  PB_REQUIRE_GPU();
  Rand r;
  const auto v = r.vec(r.i(1, 100000));
  const int64_t n = static_cast<int64_t>(v.size());
  Tensor a = gpu(v), b = Tensor::empty({n}, cuda());
  b.copy_from(a);  // GPU to GPU, same device
  EXPECT_EQ(b.to_host(), v);
  Tensor h = Tensor::empty({n}, cpu());
  h.copy_from(b);  // GPU to host through Tensor
  EXPECT_EQ(h.to_host(), v);
  for (int d = 1; d < cuda_device_count(); ++d) {  // peer copies, where there are peers
    Tensor c = Tensor::empty({n}, cuda(d));
    c.copy_from(a);
    Tensor back = Tensor::empty({n}, cuda());
    back.copy_from(c);
    EXPECT_EQ(back.to_host(), v) << "via cuda:" << d;
  }
}

TEST(CudaGpu, OutOfMemoryNamesTheDevice) {
  PB_REQUIRE_GPU();
  const std::size_t before = allocator_for(cuda()).current_bytes();
  const int64_t absurd = int64_t(1) << 38;  // floats: 1 TiB, several times any GPU's memory
  try {
    Tensor t = Tensor::empty({absurd}, cuda());
    FAIL() << "a 1 TiB allocation succeeded";
  } catch (const OutOfMemory& e) {
    EXPECT_EQ(e.device, "cuda:0");
    EXPECT_EQ(e.requested, static_cast<std::size_t>(absurd) * sizeof(float));
    EXPECT_GT(e.free_bytes, 0u);
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
  }
  EXPECT_EQ(allocator_for(cuda()).current_bytes(), before) << "a failed allocation is not counted";
  // The failure left no error behind: allocation, a kernel and its launch check still work.
  auto be = gpu_backend(Precision::Fp32);
  Tensor t = gpu(std::vector<float>(1000, -3.0f));
  be->relu_forward(1000, t.data(), t.data());
  be->synchronize();
  EXPECT_EQ(t.to_host(), std::vector<float>(1000, 0.0f));
}

TEST(CudaGpu, AllocatorCountsCurrentAndPeak) {
  PB_REQUIRE_GPU();
  Allocator& a = allocator_for(cuda());
  const std::size_t before = a.current_bytes();
  a.reset_peak();
  EXPECT_EQ(a.peak_bytes(), before);
  const std::size_t big = std::size_t(64) << 20;
  {
    Tensor t = Tensor::empty({static_cast<int64_t>(big / sizeof(float))}, cuda());
    Tensor u = Tensor::empty({1024}, cuda());
    EXPECT_EQ(a.current_bytes(), before + big + 4096);
    EXPECT_EQ(a.peak_bytes(), before + big + 4096);
  }
  EXPECT_EQ(a.current_bytes(), before);
  EXPECT_EQ(a.peak_bytes(), before + big + 4096) << "peak survives the release";
  a.reset_peak();
  EXPECT_EQ(a.peak_bytes(), before);
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

// Five Adam steps of a small GreatNetwork through the regular strategy: same losses and
// parameters on the GPU as on the CPU engine.
TEST(CudaGpu, TrainingMatchesCpuEngine) {
  PB_REQUIRE_GPU();
  const NetSpec net = great_net(16, 0.125);
  const NetPlan plan = plan_net(net);
  const int64_t batch = 2;
  const auto params = init_params(plan, 7);
  const auto x = synthetic_values(batch * numel_of(plan.input), 8);
  std::vector<std::vector<double>> losses(2);
  std::vector<std::vector<float>> final_params(2);
  for (int k = 0; k < 2; ++k) {
    StrategyOptions so;
    so.kind = k == 0 ? DeviceKind::Cpu : DeviceKind::Cuda;
    so.backend.precision = Precision::Fp32;
    auto s = make_strategy("regular", so);
    s->setup(plan, params, net.adam);
    s->load_batch(x, x, batch);
    for (int step = 0; step < 5; ++step) {
      s->step();
      losses[k].push_back(s->loss());
    }
    final_params[k] = s->params();
  }
  for (int step = 0; step < 5; ++step)
    EXPECT_NEAR(losses[1][step], losses[0][step], 1e-4 * std::fabs(losses[0][step])) << "step " << step + 1;
  EXPECT_REL_CLOSE(final_params[1], final_params[0], 1e-4);
}

}  // namespace
}  // namespace pb
