// Every op of every backend present against the double-precision reference, on fresh random shapes and values each
// run (the seed is printed with any failure), plus finite-difference gradient checks.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>
#include <random>

#include "engine/model.h"
#include "engine/tensor.h"
#include "reference.h"
#include "tests/support.h"

namespace pb {
namespace {

using test::geom_str;
using test::Rand;
using test::random_geom;

#define EXPECT_CLOSE(got, want, atol, rtol)                                  \
  do {                                                                       \
    const ref::Mismatch m_ = ref::worst((got), (want), (atol), (rtol));      \
    EXPECT_LE(m_.excess, 0.0) << ref::describe(m_);                          \
  } while (0)

// The op tests below run on every backend present (CPU; CUDA when there is a GPU), each op on
// device copies of host values, read back and compared with the reference.
std::vector<Device> backends_present() {
  std::vector<Device> d = {cpu()};
  if (cuda_device_count() > 0) d.push_back(cuda());
  return d;
}

class OnEveryBackend : public ::testing::TestWithParam<Device> {
 protected:
  void SetUp() override { be = make_backend(GetParam()); }
  Tensor dev(const std::vector<float>& v) const {
    return Tensor::from_host({static_cast<int64_t>(v.size())}, v, GetParam());
  }
  Tensor poisoned(int64_t n) const { return dev(std::vector<float>(static_cast<std::size_t>(n), NAN)); }
  std::unique_ptr<Backend> be;
};

TEST_P(OnEveryBackend, ConvForwardBackwardMatchReference) {
  Rand r;
  for (int trial = 0; trial < 25; ++trial) {
    const ConvGeom g = random_geom(r);
    SCOPED_TRACE(fmt::format("seed {} trial {}: {}", r.seed, trial, geom_str(g)));
    const int64_t xn = g.n * g.c * g.h * g.w, wn = g.k * g.c * g.r * g.s, yn = g.n * g.k * g.p() * g.q();
    const auto x = r.vec(xn), w = r.vec(wn), b = r.vec(g.k), dy = r.vec(yn);
    const Tensor X = dev(x), W = dev(w), B = dev(b), DY = dev(dy);
    Tensor Y = poisoned(yn), DX = poisoned(xn), DW = poisoned(wn), DB = poisoned(g.k);
    be->conv2d_forward(g, X.data(), W.data(), B.data(), Y.data());
    be->conv2d_backward_data(g, DY.data(), W.data(), DX.data());
    be->conv2d_backward_weights(g, X.data(), DY.data(), DW.data(), DB.data(), false);
    const ref::Vec ry = ref::conv2d_forward(g, ref::to_double(x), ref::to_double(w), ref::to_double(b));
    const ref::Vec rdx = ref::conv2d_backward_data(g, ref::to_double(dy), ref::to_double(w));
    ref::Vec rdw, rdb;
    ref::conv2d_backward_weights(g, ref::to_double(x), ref::to_double(dy), rdw, rdb);
    EXPECT_CLOSE(Y.to_host(), ry, 1e-5, 1e-4);
    EXPECT_CLOSE(DX.to_host(), rdx, 1e-5, 1e-4);
    EXPECT_CLOSE(DW.to_host(), rdw, 1e-4, 1e-4);
    EXPECT_CLOSE(DB.to_host(), rdb, 1e-4, 1e-4);
    // accumulate adds to what is there
    be->conv2d_backward_weights(g, X.data(), DY.data(), DW.data(), DB.data(), true);
    for (double& v : rdw) v *= 2;
    for (double& v : rdb) v *= 2;
    EXPECT_CLOSE(DW.to_host(), rdw, 2e-4, 1e-4);
    EXPECT_CLOSE(DB.to_host(), rdb, 2e-4, 1e-4);
  }
}

TEST_P(OnEveryBackend, LinearMatchesReference) {
  Rand r;
  for (int trial = 0; trial < 20; ++trial) {
    const int64_t n = r.i(1, 40), in = r.i(1, 70), out = r.i(1, 30);
    SCOPED_TRACE(fmt::format("seed {} trial {}: n {} in {} out {}", r.seed, trial, n, in, out));
    const auto x = r.vec(n * in), w = r.vec(out * in), b = r.vec(out), dy = r.vec(n * out);
    const Tensor X = dev(x), W = dev(w), B = dev(b), DY = dev(dy);
    Tensor Y = poisoned(n * out), DX = poisoned(n * in), DW = poisoned(out * in), DB = poisoned(out);
    be->linear_forward(n, in, out, X.data(), W.data(), B.data(), Y.data());
    be->linear_backward_data(n, in, out, DY.data(), W.data(), DX.data());
    be->linear_backward_weights(n, in, out, X.data(), DY.data(), DW.data(), DB.data(), false);
    ref::Vec rdw, rdb;
    ref::linear_backward_weights(n, in, out, ref::to_double(x), ref::to_double(dy), rdw, rdb);
    EXPECT_CLOSE(Y.to_host(), ref::linear_forward(n, in, out, ref::to_double(x), ref::to_double(w), ref::to_double(b)),
                 1e-5, 1e-4);
    EXPECT_CLOSE(DX.to_host(), ref::linear_backward_data(n, in, out, ref::to_double(dy), ref::to_double(w)), 1e-5, 1e-4);
    EXPECT_CLOSE(DW.to_host(), rdw, 1e-4, 1e-4);
    EXPECT_CLOSE(DB.to_host(), rdb, 1e-4, 1e-4);
  }
}

TEST_P(OnEveryBackend, ReluAndMseMatchReference) {
  Rand r;
  const int64_t n = r.i(1, 200000);  // large enough to go multi-threaded sometimes
  SCOPED_TRACE(fmt::format("seed {} n {}", r.seed, n));
  const auto x = r.vec(n), t = r.vec(n), dy = r.vec(n);
  const Tensor X = dev(x), T = dev(t), DY = dev(dy);
  Tensor Y = poisoned(n), DX = poisoned(n), G = poisoned(n), L = poisoned(1);
  be->relu_forward(n, X.data(), Y.data());
  EXPECT_CLOSE(Y.to_host(), ref::relu(ref::to_double(x)), 0, 0);
  be->relu_backward(n, Y.data(), DY.data(), DX.data());
  ref::Vec rdx(n);
  for (int64_t i = 0; i < n; ++i) rdx[i] = x[i] > 0 ? dy[i] : 0.0;
  EXPECT_CLOSE(DX.to_host(), rdx, 0, 0);
  be->mse_loss_grad(n, X.data(), T.data(), 2.0f / static_cast<float>(n), G.data(), L.data());
  ref::Vec rg;
  const double rloss = ref::mse(ref::to_double(x), ref::to_double(t), &rg);
  EXPECT_NEAR(L.to_host()[0] / n, rloss, 1e-6 * rloss);
  EXPECT_CLOSE(G.to_host(), rg, 1e-9, 1e-5);
}

// Planes of 1-3 samples, 1-5 channels, 1-9 x 1-9 (odd sizes: pooling leaves a row or column out).
Planes random_planes(Rand& r) { return {r.i(1, 3), r.i(1, 5), r.i(1, 9), r.i(1, 9)}; }

TEST_P(OnEveryBackend, ResidualAddMatchesReference) {
  Rand r;
  const int64_t n = r.i(1, 200000);
  SCOPED_TRACE(fmt::format("seed {} n {}", r.seed, n));
  const auto a = r.vec(n), b = r.vec(n);
  Tensor A = dev(a);
  const Tensor B = dev(b);
  Tensor Y = poisoned(n);
  be->add(n, A.data(), B.data(), Y.data());
  ref::Vec want(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) want[i] = static_cast<double>(a[i]) + b[i];
  EXPECT_CLOSE(Y.to_host(), want, 0, 1.0 / (1 << 24));  // one fp32 rounding
  be->add(n, A.data(), B.data(), A.data());  // in place
  EXPECT_EQ(A.to_host(), Y.to_host());
}

TEST_P(OnEveryBackend, MaxPoolMatchesReferenceIncludingTies) {
  Rand r;
  for (int trial = 0; trial < 30; ++trial) {
    const Planes s = random_planes(r);
    SCOPED_TRACE(fmt::format("seed {} trial {}: {}x{}x{}x{}", r.seed, trial, s.n, s.c, s.h, s.w));
    std::vector<float> x = r.vec(s.numel());
    if (trial % 2)  // few distinct values: windows with ties, the first largest taking the gradient
      for (float& v : x) v = std::round(v);
    const int64_t yn = s.n * s.c * (s.h / 2) * (s.w / 2);
    const auto dy = r.vec(yn);
    const Tensor X = dev(x), DY = dev(dy);
    Tensor Y = poisoned(yn), DX = poisoned(s.numel());
    be->max_pool2x2_forward(s, X.data(), Y.data());
    be->max_pool2x2_backward(s, X.data(), DY.data(), DX.data());
    EXPECT_CLOSE(Y.to_host(), ref::max_pool2x2(s, ref::to_double(x)), 0, 0);
    EXPECT_CLOSE(DX.to_host(), ref::max_pool2x2_backward(s, ref::to_double(x), ref::to_double(dy)), 0, 0);
  }
}

TEST_P(OnEveryBackend, UpsampleMatchesReference) {
  Rand r;
  for (int trial = 0; trial < 30; ++trial) {
    const Planes s = random_planes(r);
    SCOPED_TRACE(fmt::format("seed {} trial {}: {}x{}x{}x{}", r.seed, trial, s.n, s.c, s.h, s.w));
    const auto x = r.vec(s.numel()), dy = r.vec(4 * s.numel());
    const Tensor X = dev(x), DY = dev(dy);
    Tensor Y = poisoned(4 * s.numel()), DX = poisoned(s.numel());
    be->upsample2x_forward(s, X.data(), Y.data());
    be->upsample2x_backward(s, DY.data(), DX.data());
    EXPECT_CLOSE(Y.to_host(), ref::upsample2x(s, ref::to_double(x)), 0, 0);
    EXPECT_CLOSE(DX.to_host(), ref::upsample2x_backward(s, ref::to_double(dy)), 1e-6, 1e-6);  // four fp32 adds
  }
}

// The transposed convolution (made of the convolution's passes) against a direct scatter, at
// random geometries: strides 1-2, padding, non-square kernels, odd sizes.
TEST_P(OnEveryBackend, ConvTransposeMatchesReference) {
  Rand r;
  for (int trial = 0; trial < 20; ++trial) {
    const ConvGeom g = random_geom(r);
    SCOPED_TRACE(fmt::format("seed {} trial {}: transpose of {}", r.seed, trial, geom_str(g)));
    const int64_t xn = g.n * g.k * g.p() * g.q(), wn = g.k * g.c * g.r * g.s, yn = g.n * g.c * g.h * g.w;
    const auto x = r.vec(xn), w = r.vec(wn), b = r.vec(g.c), dy = r.vec(yn);
    const Tensor X = dev(x), W = dev(w), B = dev(b), DY = dev(dy);
    Tensor Y = poisoned(yn), DX = poisoned(xn), DW = poisoned(wn), DB = poisoned(g.c);
    be->conv_transpose2d_forward(g, X.data(), W.data(), B.data(), Y.data());
    be->conv_transpose2d_backward_data(g, DY.data(), W.data(), DX.data());
    be->conv_transpose2d_backward_weights(g, X.data(), DY.data(), DW.data(), DB.data(), false);
    const ref::ConvTranspose t = ref::conv_transpose2d(g, ref::to_double(x), ref::to_double(w), ref::to_double(b), ref::to_double(dy));
    EXPECT_CLOSE(Y.to_host(), t.y, 1e-5, 1e-4);
    EXPECT_CLOSE(DX.to_host(), t.dx, 1e-5, 1e-4);
    EXPECT_CLOSE(DW.to_host(), t.dw, 1e-4, 1e-4);
    EXPECT_CLOSE(DB.to_host(), t.db, 1e-4, 1e-4);
    be->conv_transpose2d_backward_weights(g, X.data(), DY.data(), DW.data(), DB.data(), true);  // adds
    ref::Vec dw2 = t.dw, db2 = t.db;
    for (double& v : dw2) v *= 2;
    for (double& v : db2) v *= 2;
    EXPECT_CLOSE(DW.to_host(), dw2, 2e-4, 1e-4);
    EXPECT_CLOSE(DB.to_host(), db2, 2e-4, 1e-4);
  }
}

TEST_P(OnEveryBackend, AdamMatchesReferenceOverSteps) {
  Rand r;
  const int64_t n = r.i(1, 5000);
  SCOPED_TRACE(fmt::format("seed {} n {}", r.seed, n));
  AdamParams a;
  a.lr = 1e-3, a.weight_decay = 0.01;
  const std::vector<float> p0 = r.vec(n);
  Tensor P = dev(p0), M = dev(std::vector<float>(n, 0.0f)), V = dev(std::vector<float>(n, 0.0f));
  ref::Vec rp = ref::to_double(p0), rm(n, 0.0), rv(n, 0.0);
  for (int64_t step = 1; step <= 5; ++step) {
    const auto g = r.vec(n);
    const Tensor G = dev(g);
    be->adam_step(n, P.data(), G.data(), M.data(), V.data(), a, step);
    be->synchronize();  // G goes out of scope
    ref::adam(rp, ref::to_double(g), rm, rv, a, step);
  }
  EXPECT_CLOSE(P.to_host(), rp, 1e-6, 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Ops, OnEveryBackend, ::testing::ValuesIn(backends_present()),
                         [](const ::testing::TestParamInfo<Device>& i) {
                           return i.param.kind == DeviceKind::Cpu ? std::string("cpu") : std::string("cuda");
                         });

// A small net with every layer type, its gradients checked two ways: the double reference
// against central finite differences of itself, and the engine against the reference.
NetSpec small_net(Rand& r) {
  NetSpec net;
  net.name = "small";
  net.input = {r.i(1, 3), r.i(4, 7), r.i(4, 7)};
  LayerSpec c1{LayerType::Conv2d};
  c1.out_channels = r.i(1, 4), c1.kernel_h = r.i(1, 3), c1.kernel_w = r.i(1, 3);
  c1.stride_h = r.i(1, 2), c1.stride_w = r.i(1, 2), c1.pad_h = r.i(0, 1), c1.pad_w = r.i(0, 1);
  LayerSpec c2{LayerType::Conv2d};
  c2.out_channels = r.i(1, 4), c2.kernel_h = 3, c2.kernel_w = 2, c2.pad_h = 1, c2.pad_w = 1;
  LayerSpec fc{LayerType::Linear};
  fc.out_features = r.i(1, 5);
  net.layers = {c1, {LayerType::ReLU}, c2, {LayerType::ReLU}, {LayerType::Flatten}, fc};
  net.target = Target::Random;
  return net;
}

TEST(Ops, ReferenceGradientMatchesFiniteDifferences) {
  Rand r;
  for (int trial = 0; trial < 3; ++trial) {
    const NetSpec net = small_net(r);
    const NetPlan plan = plan_net(net);
    const int64_t batch = r.i(1, 3);
    SCOPED_TRACE(fmt::format("seed {} trial {}", r.seed, trial));
    const ref::Vec p = ref::to_double(init_params(plan, r.seed + trial));
    const ref::Vec x = ref::to_double(r.vec(batch * numel_of(plan.input)));
    const ref::Vec t = ref::to_double(r.vec(batch * numel_of(plan.output)));
    ref::Vec grad;
    const double l0 = ref::net_loss(plan, p, x, t, batch, &grad);
    const double h = 1e-6;
    std::size_t kinked = 0;
    for (std::size_t i = 0; i < p.size(); ++i) {
      ref::Vec pp = p, pm = p;
      pp[i] += h, pm[i] -= h;
      const double lp = ref::net_loss(plan, pp, x, t, batch), lm = ref::net_loss(plan, pm, x, t, batch);
      const double fd = (lp - lm) / (2 * h), tol = 1e-6 + 1e-4 * std::abs(fd);
      // A ReLU input within h of 0 puts a kink inside the difference: the two one-sided slopes
      // part by the gradient's jump there (smooth, only by h x the curvature). No derivative to
      // check at such a parameter (a seed once put one in a unit that nine parameters feed).
      if (std::abs((lp - l0) / h - (l0 - lm) / h) > tol) {
        ++kinked;
        continue;
      }
      EXPECT_NEAR(fd, grad[i], tol) << "parameter " << i;
    }
    EXPECT_LE(kinked, p.size() / 4) << "too few parameters away from a ReLU kink to check";
  }
}

TEST(Ops, EngineGradientMatchesReference) {
  Rand r;
  for (int trial = 0; trial < 5; ++trial) {
    const NetSpec net = small_net(r);
    const NetPlan plan = plan_net(net);
    const int64_t batch = r.i(1, 4);
    SCOPED_TRACE(fmt::format("seed {} trial {}", r.seed, trial));
    const std::vector<float> p = init_params(plan, r.seed + trial);
    const auto x = r.vec(batch * numel_of(plan.input)), t = r.vec(batch * numel_of(plan.output));
    ref::Vec grad;
    const double rloss = ref::net_loss(plan, ref::to_double(p), ref::to_double(x), ref::to_double(t), batch, &grad);
    // With each conv's ReLU fused into it and without: both match the reference, and each other exactly.
    std::vector<float> grads[2], dxs[2];
    for (const bool fuse : {true, false}) {
      SCOPED_TRACE(fuse ? "ReLU fused" : "ReLU unfused");
      BackendOptions o;
      o.cpu_fuse_relu = fuse;
      auto be = make_backend(cpu(), o);
      Sequential model(plan, 0, static_cast<int>(plan.layers.size()), *be);
      model.load_params(p);
      const int64_t n = model.out_numel(batch);
      const float* y = model.forward(x.data(), batch);
      std::vector<float> dy(n), dx(x.size(), NAN);
      float loss_sum = 0;
      be->mse_loss_grad(n, y, t.data(), 2.0f / static_cast<float>(n), dy.data(), &loss_sum);
      model.backward(dy.data(), dx.data(), false);
      EXPECT_NEAR(loss_sum / n, rloss, 1e-5 * rloss);
      EXPECT_CLOSE(model.grads().to_host(), grad, 1e-5, 1e-4);
      grads[fuse] = model.grads().to_host();
      dxs[fuse] = dx;
    }
    EXPECT_EQ(grads[true], grads[false]);
    EXPECT_EQ(dxs[true], dxs[false]);
  }
}

TEST(Ops, SequentialStagesComposeToTheWholeNet) {
  // Running the net as two stages (gradient of the first stage's output passed back) gives the
  // same gradients as one stage: what model parallelism relies on.
  Rand r;
  const NetSpec net = small_net(r);
  const NetPlan plan = plan_net(net);
  const int64_t batch = 2;
  SCOPED_TRACE(fmt::format("seed {}", r.seed));
  const std::vector<float> p = init_params(plan, 7);
  const auto x = r.vec(batch * numel_of(plan.input)), t = r.vec(batch * numel_of(plan.output));
  auto be = make_backend(cpu());
  const int L = static_cast<int>(plan.layers.size());
  Sequential whole(plan, 0, L, *be), a(plan, 0, 3, *be), b(plan, 3, L, *be);
  for (Sequential* s : {&whole, &a, &b}) s->load_params(p);
  const int64_t n = whole.out_numel(batch);
  std::vector<float> dy(n), dmid(a.out_numel(batch));
  float ls = 0;
  be->mse_loss_grad(n, whole.forward(x.data(), batch), t.data(), 2.0f / n, dy.data(), &ls);
  whole.backward(dy.data(), nullptr, false);
  be->mse_loss_grad(n, b.forward(a.forward(x.data(), batch), batch), t.data(), 2.0f / n, dy.data(), &ls);
  b.backward(dy.data(), dmid.data(), false);
  a.backward(dmid.data(), nullptr, false);
  std::vector<float> full(p.size()), staged = whole.grads().to_host();
  auto ga = a.grads().to_host(), gb = b.grads().to_host();
  ga.insert(ga.end(), gb.begin(), gb.end());
  EXPECT_CLOSE(ga, ref::to_double(staged), 1e-7, 1e-6);
}

}  // namespace
}  // namespace pb
