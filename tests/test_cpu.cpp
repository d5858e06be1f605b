// CPU backend: the engine's own Winograd F(2x2, 3x3) against the double-precision reference,
// and how its OpenMP threads wait between parallel regions (contention).
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tests/paths.h"
#include "reference.h"
#ifdef PARBENCH_HAVE_DNNL
#include "engine/dnnl/winograd.h"
#endif


namespace pb {
namespace {

using testing::HasSubstr;

// stdout and stderr of a shell command.
std::string output_of(const std::string& cmd) {
  std::unique_ptr<FILE, int (*)(FILE*)> p(popen((cmd + " 2>&1").c_str(), "r"), pclose);
  if (!p) return {};
  std::string out;
  std::array<char, 4096> buf;
  for (std::size_t n; (n = std::fread(buf.data(), 1, buf.size(), p.get())) > 0;) out.append(buf.data(), n);
  return out;
}

#ifdef PARBENCH_HAVE_DNNL

// Winograd F(2x2, 3x3) rounds differently from a direct sum but stays within the bound the
// oneDNN paths are held to (tests/test_dnnl_*.cpp): atol + rtol * max|ref|.
constexpr double kAtol = 1e-5, kRtol = 1e-4;

::testing::AssertionResult close(const std::vector<float>& got, const ref::Vec& want) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "size " << got.size() << " vs " << want.size();
  double max_ref = 0;
  for (double r : want) max_ref = std::max(max_ref, std::abs(r));
  const ref::Mismatch m = ref::worst(got, want, kAtol + kRtol * max_ref, 0.0);
  if (m.excess > 0 || std::isnan(m.excess)) return ::testing::AssertionFailure() << ref::describe(m);
  return ::testing::AssertionSuccess();
}

class CpuWinograd : public ::testing::Test {
 protected:
  void SetUp() override {
    seed_ = std::random_device{}();
    rng_.seed(seed_);
    RecordProperty("seed", std::to_string(seed_));
  }
  int64_t uniform(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng_); }
  std::vector<float> random(int64_t n) {
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    std::vector<float> v(static_cast<std::size_t>(n));
    for (auto& x : v) x = d(rng_);
    return v;
  }
  // Forward with and without bias and backward data of g, against tests/reference.cpp.
  void check(const ConvGeom& g, Winograd2x3& wino) {
    SCOPED_TRACE(fmt::format("seed {}: x {}x{}x{}x{}, {} filters, pad {}x{}", seed_, g.n, g.c, g.h, g.w, g.k,
                             g.pad_h, g.pad_w));
    ASSERT_TRUE(Winograd2x3::applies(g));
    const std::vector<float> x = random(g.n * g.c * g.h * g.w), w = random(g.k * g.c * 9), b = random(g.k),
                             dy = random(g.n * g.k * g.p() * g.q());
    std::vector<float> y(dy.size(), NAN), dx(x.size(), NAN);
    const ref::Vec xd(x.begin(), x.end()), wd(w.begin(), w.end()), bd(b.begin(), b.end()), dyd(dy.begin(), dy.end());
    wino.forward(g, x.data(), w.data(), b.data(), y.data());
    EXPECT_TRUE(close(y, ref::conv2d_forward(g, xd, wd, bd))) << "forward with bias";
    std::fill(y.begin(), y.end(), NAN);
    wino.forward(g, x.data(), w.data(), nullptr, y.data());
    EXPECT_TRUE(close(y, ref::conv2d_forward(g, xd, wd, {}))) << "forward";
    wino.backward_data(g, dy.data(), w.data(), dx.data());
    EXPECT_TRUE(close(dx, ref::conv2d_backward_data(g, dyd, wd))) << "backward data";
    ref::Vec dw_ref, db_ref;
    ref::conv2d_backward_weights(g, xd, dyd, dw_ref, db_ref);
    std::vector<float> dw(w.size(), NAN), db(b.size(), NAN);
    wino.backward_weights(g, x.data(), dy.data(), dw.data(), db.data(), false);
    EXPECT_TRUE(close(dw, dw_ref)) << "backward weights";
    EXPECT_TRUE(close(db, db_ref)) << "backward bias";
    // accumulate: added to what was there
    std::vector<float> dw_acc = random(static_cast<int64_t>(w.size())), db_acc = random(g.k);
    ref::Vec dw_want(dw_acc.begin(), dw_acc.end()), db_want(db_acc.begin(), db_acc.end());
    for (std::size_t i = 0; i < dw_want.size(); ++i) dw_want[i] += dw_ref[i];
    for (std::size_t i = 0; i < db_want.size(); ++i) db_want[i] += db_ref[i];
    wino.backward_weights(g, x.data(), dy.data(), dw_acc.data(), db_acc.data(), true);
    EXPECT_TRUE(close(dw_acc, dw_want)) << "backward weights, accumulated";
    EXPECT_TRUE(close(db_acc, db_want)) << "backward bias, accumulated";
    std::fill(dw.begin(), dw.end(), NAN);
    wino.backward_weights(g, x.data(), dy.data(), dw.data(), nullptr, false);
    EXPECT_TRUE(close(dw, dw_ref)) << "backward weights without bias";
  }
  ConvGeom random_geom() {
    ConvGeom g;
    g.n = uniform(1, 3), g.c = uniform(1, 48), g.k = uniform(1, 48), g.r = g.s = 3;
    g.pad_h = uniform(0, 2), g.pad_w = uniform(0, 2);
    g.h = uniform(std::max<int64_t>(1, 3 - 2 * g.pad_h), 21);
    g.w = uniform(std::max<int64_t>(1, 3 - 2 * g.pad_w), 21);
    return g;
  }
  unsigned seed_ = 0;
  std::mt19937_64 rng_;
};

TEST_F(CpuWinograd, AppliesOnlyTo3x3Stride1) {
  ConvGeom g;
  g.n = 1, g.c = g.k = 8, g.h = g.w = 8, g.r = g.s = 3, g.pad_h = g.pad_w = 1;
  EXPECT_TRUE(Winograd2x3::applies(g));
  ConvGeom s = g;
  s.stride_w = 2;
  EXPECT_FALSE(Winograd2x3::applies(s));
  ConvGeom k = g;
  k.r = 5;
  EXPECT_FALSE(Winograd2x3::applies(k));
  ConvGeom p = g;
  p.pad_h = 3;
  EXPECT_FALSE(Winograd2x3::applies(p));
}

// Odd and even sizes (partial edge tiles), paddings 0-2, 1 and 2 threads, and chunks of one tile
// row as well as whole images.
TEST_F(CpuWinograd, RandomShapesMatchReference) {
  for (const int threads : {1, 2})
    for (const std::size_t chunk : {std::size_t(1), Winograd2x3::kChunkBytes}) {
      SCOPED_TRACE(fmt::format("{} threads, chunk {} bytes", threads, chunk));
      Winograd2x3 wino(threads, chunk);
      for (int i = 0; i < 8; ++i) check(random_geom(), wino);
    }
}

// great_net's shape (pad 1) at widths where the engine uses it; the error bound is relative to
// max|y|, which grows with the channels summed.
TEST_F(CpuWinograd, WideGreatNetLayersMatchReference) {
  Winograd2x3 wino(2);
  for (const auto& ck : {std::array<int64_t, 2>{64, 128}, std::array<int64_t, 2>{256, 96}}) {
    ConvGeom g;
    g.n = 2, g.c = ck[0], g.k = ck[1], g.h = 12, g.w = 10, g.r = g.s = 3, g.pad_h = g.pad_w = 1;
    check(g, wino);
    check(g, wino);  // the cached matmul again, with new data
  }
}

#endif

#if defined(_OPENMP) && defined(__linux__)

// libgomp shows how its threads wait in OMP_DISPLAY_ENV=verbose: GOMP_SPINCOUNT '0' is passive
// waiting, its default (no OMP_WAIT_POLICY) spins 300000 times first.
TEST(CpuOpenMp, ProgramWaitsPassivelyUnlessTheUserChose) {
  const std::string bin = test::parbench_binary();
  const std::string plain = output_of(fmt::format("env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT OMP_DISPLAY_ENV=verbose "
                                                  "{} --help",
                                                  bin));
  if (plain.find("GOMP_SPINCOUNT") == std::string::npos)
    GTEST_SKIP() << "the OpenMP runtime is not libgomp (no GOMP_SPINCOUNT in OMP_DISPLAY_ENV):\n" << plain;
  EXPECT_THAT(plain, HasSubstr("GOMP_SPINCOUNT = '0'"));
  const std::string active = output_of(fmt::format("env -u GOMP_SPINCOUNT OMP_WAIT_POLICY=active "
                                                   "OMP_DISPLAY_ENV=verbose {} --help",
                                                   bin));
  EXPECT_THAT(active, HasSubstr("OMP_WAIT_POLICY = 'ACTIVE'"));
  EXPECT_THAT(active, testing::Not(HasSubstr("GOMP_SPINCOUNT = '0'")));
  const std::string spin = output_of(fmt::format("env -u OMP_WAIT_POLICY GOMP_SPINCOUNT=1234 "
                                                 "OMP_DISPLAY_ENV=verbose {} --help",
                                                 bin));
  EXPECT_THAT(spin, HasSubstr("GOMP_SPINCOUNT = '1234'"));
}

#endif

}  // namespace
}  // namespace pb
