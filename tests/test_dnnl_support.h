// What the oneDNN tests share (tests/test_dnnl_*.cpp): the tolerance check that names the worst
// element, the double-precision reference, the three passes of a Backend or a DnnlConv, and the
// fixture with its random shapes.
#pragma once

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

#ifdef PARBENCH_HAVE_DNNL

namespace pb::dnnl_test {

constexpr double kAtol = 1e-5, kRtol = 1e-4;

inline std::string str(const ConvGeom& g) {
  return fmt::format("x {}x{}x{}x{}, w {}x{}x{}x{}, stride {}x{}, pad {}x{} -> {}x{}", g.n, g.c, g.h, g.w, g.k, g.c,
                     g.r, g.s, g.stride_h, g.stride_w, g.pad_h, g.pad_w, g.p(), g.q());
}

// The worst mismatch of a test, relative to its tolerance, printed when the test ends.
struct Worst {
  double of_tolerance = 0;
  std::string what;
};

// Passes when every |got - ref| <= atol + rtol * max|ref|; the message names the worst element.
inline ::testing::AssertionResult close(const std::vector<float>& got, const std::vector<double>& ref,
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

inline std::vector<double> as_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

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

}  // namespace pb::dnnl_test

#endif  // PARBENCH_HAVE_DNNL
