// The CUDA bias gradients (engine/cuda/cuda_channel_sums.cu) against a double-precision sum, at
// shapes that reach every part of their geometry: one chunk a channel and many, chunks ending
// mid-row, channels and columns not a multiple of a block, one row and a million, direct and
// two-pass, overwriting and accumulating; and the same bits on every run. Skip without a GPU.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "engine/backend.h"
#include "engine/bf16.h"
#include "engine/kernel_shapes.h"
#include "engine/tensor.h"
#include "tests/gpu_skip.h"
#include "tests/support.h"

namespace pb {
namespace {

using test::Rand;

constexpr double kFp32 = 1.0 / (1 << 24);           // fp32's unit roundoff
constexpr double kDouble = 1.0 / (1ull << 53);      // double's

// dy[o, c, i] summed over o and i, in double, and the sum of magnitudes (the error bound's scale).
struct Ref {
  std::vector<double> sum, mag;
};
Ref reference(const std::vector<float>& dy, int64_t outer, int64_t channels, int64_t inner) {
  Ref r{std::vector<double>(channels, 0.0), std::vector<double>(channels, 0.0)};
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t c = 0; c < channels; ++c)
      for (int64_t i = 0; i < inner; ++i) {
        const double v = dy[static_cast<std::size_t>((o * channels + c) * inner + i)];
        r.sum[c] += v, r.mag[c] += std::abs(v);
      }
  return r;
}

// got[c] against db0[c] (accumulating) + sum[c]: `acc_unit` is the accumulator's unit roundoff
// (fp32 sums of k terms err by at most (k + 1) u sum|terms|, in any order), then one fp32
// rounding of the result and, accumulating, one of the addition.
void expect_sums(const std::vector<float>& got, const Ref& want, const std::vector<float>* db0, int64_t terms,
                 double acc_unit, const std::string& what) {
  ASSERT_EQ(got.size(), want.sum.size()) << what;
  for (std::size_t c = 0; c < got.size(); ++c) {
    const double base = db0 ? (*db0)[c] : 0.0, target = base + want.sum[c];
    const double bound = double(terms + 1) * acc_unit * want.mag[c] + 2 * kFp32 * (std::abs(target) + std::abs(base));
    ASSERT_LE(std::abs(got[c] - target), bound)
        << what << ": channel " << c << " got " << got[c] << ", reference " << target << " (bound " << bound << ")";
  }
}

// Random values, rounded to bf16 when `bf16` (so the bf16 tensor holds them exactly).
std::vector<float> values(Rand& r, int64_t n, bool bf16) {
  std::vector<float> v = r.vec(n);
  if (bf16)
    for (float& x : v) x = round_bf16(x);
  return v;
}

Tensor to_bf16_on(Backend& be, const std::vector<float>& v) {
  const Tensor f = Tensor::from_host({static_cast<int64_t>(v.size())}, v, be.device());
  Tensor b = Tensor::empty({static_cast<int64_t>(v.size())}, be.device(), DType::Bf16);
  be.to_bf16(static_cast<int64_t>(v.size()), f.data(), b.data_bf16());
  be.synchronize();
  return b;
}

std::unique_ptr<Backend> gpu(Precision p) {
  BackendOptions o;
  o.precision = p;
  return make_backend(cuda(), o);
}

// Linear shapes (rows = batch, cols = out features): one row (the first pass writes db), rows
// in several chunks, columns not a multiple of 32 or 256, more than one row a thread.
const std::vector<std::pair<int64_t, int64_t>> kLinear = {
    {1, 1}, {1, 300}, {7, 300}, {1000, 37}, {5000, 3}, {4099, 33}, {(1 << 20) + 7, 3}, {3, 70001}};

TEST(BiasGradGpu, Fp32LinearMatchesADoubleSum) {
  PB_REQUIRE_GPU();
  Rand r;
  auto be = gpu(Precision::Fp32);
  for (const auto& [rows, cols] : kLinear) {
    const kernels::ChannelSums s = kernels::column_sums(rows, cols, false);
    SCOPED_TRACE(fmt::format("seed {} rows {} cols {}: {} chunks of {} rows, {} partials", r.seed, rows, cols,
                             s.chunks, s.chunk, s.partials));
    const std::vector<float> dy = values(r, rows * cols, false), x = values(r, rows, false);
    const Ref want = reference(dy, rows, cols, 1);
    const Tensor gx = Tensor::from_host({rows}, x, cuda()), gdy = Tensor::from_host({rows * cols}, dy, cuda());
    Tensor dw = Tensor::empty({cols}, cuda()), db = Tensor::from_host({cols}, std::vector<float>(cols, NAN), cuda());
    be->linear_backward_weights(rows, 1, cols, gx.data(), gdy.data(), dw.data(), db.data(), false);
    const std::vector<float> first = db.to_host();
    expect_sums(first, want, nullptr, rows, kDouble, "fp32 column sums");
    be->linear_backward_weights(rows, 1, cols, gx.data(), gdy.data(), dw.data(), db.data(), true);
    expect_sums(db.to_host(), want, &first, rows, kDouble, "fp32 column sums, accumulated");
  }
}

TEST(BiasGradGpu, Bf16LinearMatchesADoubleSum) {
  PB_REQUIRE_GPU();
  Rand r;
  auto be = gpu(Precision::Bf16);
  for (const auto& [rows, cols] : kLinear) {
    SCOPED_TRACE(fmt::format("seed {} rows {} cols {}", r.seed, rows, cols));
    const std::vector<float> dy = values(r, rows * cols, true), x = values(r, rows, true);
    const Ref want = reference(dy, rows, cols, 1);
    const Tensor gx = to_bf16_on(*be, x), gdy = to_bf16_on(*be, dy);
    Tensor dw = Tensor::empty({cols}, cuda()), db = Tensor::from_host({cols}, std::vector<float>(cols, NAN), cuda());
    be->linear_backward_weights_bf16(rows, 1, cols, gx.data_bf16(), gdy.data_bf16(), dw.data(), db.data(), false);
    const std::vector<float> first = db.to_host();
    expect_sums(first, want, nullptr, rows, kFp32, "bf16 linear bias gradient");
    be->linear_backward_weights_bf16(rows, 1, cols, gx.data_bf16(), gdy.data_bf16(), dw.data(), db.data(), true);
    expect_sums(db.to_host(), want, &first, rows, kFp32, "bf16 linear bias gradient, accumulated");
  }
}

// 1x1 convolutions (inner = h x w): segments with one chunk a channel, many, chunks ending
// mid-row over several samples, 1.5M elements (several a thread); columns for 1x7, 31x1, 4x4.
struct ConvCase {
  int64_t n, k, h, w;
};
const std::vector<ConvCase> kConv = {{3, 5, 17, 300}, {2, 3, 512, 512}, {1, 1, 600, 1000}, {2, 37, 7, 7},
                                     {3, 1000, 8, 4}, {300, 5, 1, 7},   {40, 3, 31, 1},     {1, 1024, 4, 4}};

TEST(BiasGradGpu, Bf16ConvMatchesADoubleSum) {
  PB_REQUIRE_GPU();
  Rand r;
  auto be = gpu(Precision::Bf16);
  for (const ConvCase& cc : kConv) {
    ConvGeom g;
    g.n = cc.n, g.c = 3, g.h = cc.h, g.w = cc.w, g.k = cc.k, g.r = g.s = 1;
    const int64_t inner = g.p() * g.q();
    const kernels::ChannelSums s = kernels::channel_sums_bf16(g.n, g.k, inner, false);
    SCOPED_TRACE(fmt::format("seed {} n {} k {} {}x{}: {}, {} chunks of {}, {} partials", r.seed, cc.n, cc.k, cc.h, cc.w,
                             s.segments ? "segments" : "columns", s.chunks, s.chunk, s.partials));
    const std::vector<float> dy = values(r, g.n * g.k * inner, true), x = values(r, g.n * g.c * g.h * g.w, true);
    const Ref want = reference(dy, g.n, g.k, inner);
    const Tensor gx = to_bf16_on(*be, x), gdy = to_bf16_on(*be, dy);
    Tensor dw = Tensor::empty({g.k * g.c}, cuda()), db = Tensor::from_host({g.k}, std::vector<float>(g.k, NAN), cuda());
    be->conv2d_backward_weights_bf16(g, gx.data_bf16(), gdy.data_bf16(), dw.data(), db.data(), false);
    const std::vector<float> first = db.to_host();
    expect_sums(first, want, nullptr, g.n * inner, kFp32, "bf16 conv bias gradient");
    be->conv2d_backward_weights_bf16(g, gx.data_bf16(), gdy.data_bf16(), dw.data(), db.data(), true);
    expect_sums(db.to_host(), want, &first, g.n * inner, kFp32, "bf16 conv bias gradient, accumulated");
  }
}

// No atomics: the partial sums meet in a fixed order, so a rerun gives the same bits.
TEST(BiasGradGpu, SameBitsEveryRun) {
  PB_REQUIRE_GPU();
  Rand r;
  auto be = gpu(Precision::Bf16);
  ConvGeom g;
  g.n = 2, g.c = 3, g.h = g.w = 512, g.k = 3, g.r = g.s = 1;
  const int64_t yn = g.n * g.k * g.h * g.w;
  const Tensor gx = to_bf16_on(*be, values(r, g.n * g.c * g.h * g.w, true)), gdy = to_bf16_on(*be, values(r, yn, true));
  Tensor dw = Tensor::empty({g.k * g.c}, cuda()), db = Tensor::empty({g.k}, cuda());
  std::vector<float> first;
  for (int run = 0; run < 5; ++run) {
    be->conv2d_backward_weights_bf16(g, gx.data_bf16(), gdy.data_bf16(), dw.data(), db.data(), false);
    const std::vector<float> got = db.to_host();
    if (run == 0) first = got;
    EXPECT_EQ(std::memcmp(got.data(), first.data(), got.size() * sizeof(float)), 0) << "run " << run;
  }
}

}  // namespace
}  // namespace pb
