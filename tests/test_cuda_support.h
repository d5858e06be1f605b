// What the CUDA backend tests share (tests/test_cuda_*.cpp): the tolerance per precision, the
// relative norm error check, NaN-poisoned host and GPU buffers, a GPU backend, and one random
// convolution checked GPU against CPU.
#pragma once

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

namespace pb::cuda_test {

// Relative norm error ||got - want|| / ||want||. fp32 ops accumulate the same products in a
// different order than the CPU: a few float roundings, far below 1e-5. TF32 keeps 10 mantissa
// bits (unit roundoff 2^-11 ~ 4.9e-4) on both inputs of every product, rounded or truncated
// depending on the kernel: ~1e-3 relative in the worst case, so 3e-3 leaves margin while
// still catching a wrong index or a missing term (errors of order 1).
constexpr double kFp32Tol = 1e-5;
constexpr double kTf32Tol = 3e-3;
inline double tol_for(Precision p) { return p == Precision::Fp32 ? kFp32Tol : kTf32Tol; }

const Precision kPrecisions[] = {Precision::Fp32, Precision::Tf32};

using test::geom_str;
using test::Rand;

struct Diff {
  double rel = 0;  // ||got - want|| / ||want||; infinite when got has a NaN or the sizes differ
  std::size_t worst = 0;
  float got = 0, want = 0;
};

inline Diff compare(const std::vector<float>& got, const std::vector<float>& want) {
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
inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

inline ConvGeom gpu_geom(Rand& r) { return test::random_geom(r, {4, 64, 23}); }

// Host <-> GPU helpers; to_host() after queued GPU work is itself part of what is tested (the
// copy must wait for the backend's stream).
inline Tensor gpu(const std::vector<float>& v) { return Tensor::from_host({static_cast<int64_t>(v.size())}, v, cuda()); }
inline Tensor gpu_poisoned(int64_t n) {
  return gpu(std::vector<float>(static_cast<std::size_t>(n), std::numeric_limits<float>::quiet_NaN()));
}
inline std::vector<float> poisoned(int64_t n) {
  return std::vector<float>(static_cast<std::size_t>(n), std::numeric_limits<float>::quiet_NaN());
}

inline std::unique_ptr<Backend> gpu_backend(Precision p, bool exhaustive = false,
                                            std::optional<std::size_t> cap = std::nullopt) {
  BackendOptions o;
  o.precision = p;
  o.exhaustive_conv_search = exhaustive;
  o.conv_workspace_cap_bytes = cap;
  return make_backend(cuda(), o);
}

// One random convolution through all three directions, with and without bias, overwriting
// and accumulating, GPU against CPU.
inline void check_conv(Rand& r, Backend& g_be, Backend& c_be, double tol) {
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

}  // namespace pb::cuda_test
