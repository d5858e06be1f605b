// Every CPU op against the double-precision reference, on fresh random shapes and values each
// run (the seed is printed with any failure), plus finite-difference gradient checks.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <random>

#include "engine/model.h"
#include "reference.h"

namespace pb {
namespace {

struct Rand {
  std::mt19937_64 gen;
  uint64_t seed;
  Rand() : seed(std::random_device{}()) { gen.seed(seed); }
  int64_t i(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(gen); }
  std::vector<float> vec(int64_t n) {
    std::normal_distribution<float> d;
    std::vector<float> v(static_cast<std::size_t>(n));
    for (float& x : v) x = d(gen);
    return v;
  }
};

ConvGeom random_geom(Rand& r) {
  ConvGeom g;
  g.n = r.i(1, 3), g.c = r.i(1, 12), g.k = r.i(1, 12);
  g.r = r.i(1, 5), g.s = r.i(1, 5);
  g.stride_h = r.i(1, 2), g.stride_w = r.i(1, 2), g.pad_h = r.i(0, 2), g.pad_w = r.i(0, 2);
  g.h = r.i(std::max<int64_t>(1, g.r - 2 * g.pad_h), 13);
  g.w = r.i(std::max<int64_t>(1, g.s - 2 * g.pad_w), 13);
  return g;
}

std::string geom_str(const ConvGeom& g) {
  return fmt::format("n{} c{} {}x{} k{} kernel {}x{} stride {}x{} pad {}x{}", g.n, g.c, g.h, g.w, g.k, g.r, g.s,
                     g.stride_h, g.stride_w, g.pad_h, g.pad_w);
}

#define EXPECT_CLOSE(got, want, atol, rtol)                                  \
  do {                                                                       \
    const ref::Mismatch m_ = ref::worst((got), (want), (atol), (rtol));      \
    EXPECT_LE(m_.excess, 0.0) << ref::describe(m_);                          \
  } while (0)

TEST(Ops, ConvForwardBackwardMatchReference) {
  Rand r;
  auto be = make_backend(cpu());
  for (int trial = 0; trial < 25; ++trial) {
    const ConvGeom g = random_geom(r);
    SCOPED_TRACE(fmt::format("seed {} trial {}: {}", r.seed, trial, geom_str(g)));
    const int64_t xn = g.n * g.c * g.h * g.w, wn = g.k * g.c * g.r * g.s, yn = g.n * g.k * g.p() * g.q();
    const auto x = r.vec(xn), w = r.vec(wn), b = r.vec(g.k), dy = r.vec(yn);
    std::vector<float> y(yn, NAN), dx(xn, NAN), dw(wn, NAN), db(g.k, NAN);
    be->conv2d_forward(g, x.data(), w.data(), b.data(), y.data());
    be->conv2d_backward_data(g, dy.data(), w.data(), dx.data());
    be->conv2d_backward_weights(g, x.data(), dy.data(), dw.data(), db.data(), false);
    const ref::Vec ry = ref::conv2d_forward(g, ref::to_double(x), ref::to_double(w), ref::to_double(b));
    const ref::Vec rdx = ref::conv2d_backward_data(g, ref::to_double(dy), ref::to_double(w));
    ref::Vec rdw, rdb;
    ref::conv2d_backward_weights(g, ref::to_double(x), ref::to_double(dy), rdw, rdb);
    EXPECT_CLOSE(y, ry, 1e-5, 1e-4);
    EXPECT_CLOSE(dx, rdx, 1e-5, 1e-4);
    EXPECT_CLOSE(dw, rdw, 1e-4, 1e-4);
    EXPECT_CLOSE(db, rdb, 1e-4, 1e-4);
    // accumulate adds to what is there
    be->conv2d_backward_weights(g, x.data(), dy.data(), dw.data(), db.data(), true);
    for (double& v : rdw) v *= 2;
    for (double& v : rdb) v *= 2;
    EXPECT_CLOSE(dw, rdw, 2e-4, 1e-4);
    EXPECT_CLOSE(db, rdb, 2e-4, 1e-4);
  }
}

TEST(Ops, LinearMatchesReference) {
  Rand r;
  auto be = make_backend(cpu());
  for (int trial = 0; trial < 20; ++trial) {
    const int64_t n = r.i(1, 40), in = r.i(1, 70), out = r.i(1, 30);
    SCOPED_TRACE(fmt::format("seed {} trial {}: n {} in {} out {}", r.seed, trial, n, in, out));
    const auto x = r.vec(n * in), w = r.vec(out * in), b = r.vec(out), dy = r.vec(n * out);
    std::vector<float> y(n * out, NAN), dx(n * in, NAN), dw(out * in, NAN), db(out, NAN);
    be->linear_forward(n, in, out, x.data(), w.data(), b.data(), y.data());
    be->linear_backward_data(n, in, out, dy.data(), w.data(), dx.data());
    be->linear_backward_weights(n, in, out, x.data(), dy.data(), dw.data(), db.data(), false);
    ref::Vec rdw, rdb;
    ref::linear_backward_weights(n, in, out, ref::to_double(x), ref::to_double(dy), rdw, rdb);
    EXPECT_CLOSE(y, ref::linear_forward(n, in, out, ref::to_double(x), ref::to_double(w), ref::to_double(b)), 1e-5, 1e-4);
    EXPECT_CLOSE(dx, ref::linear_backward_data(n, in, out, ref::to_double(dy), ref::to_double(w)), 1e-5, 1e-4);
    EXPECT_CLOSE(dw, rdw, 1e-4, 1e-4);
    EXPECT_CLOSE(db, rdb, 1e-4, 1e-4);
  }
}

TEST(Ops, ReluMseAndElementwiseMatchReference) {
  Rand r;
  auto be = make_backend(cpu());
  const int64_t n = r.i(1, 200000);  // large enough to go multi-threaded sometimes
  SCOPED_TRACE(fmt::format("seed {} n {}", r.seed, n));
  const auto x = r.vec(n), t = r.vec(n), dy = r.vec(n);
  std::vector<float> y(n, NAN), dx(n, NAN), g(n, NAN);
  be->relu_forward(n, x.data(), y.data());
  EXPECT_CLOSE(y, ref::relu(ref::to_double(x)), 0, 0);
  be->relu_backward(n, y.data(), dy.data(), dx.data());
  ref::Vec rdx(n);
  for (int64_t i = 0; i < n; ++i) rdx[i] = x[i] > 0 ? dy[i] : 0.0;
  EXPECT_CLOSE(dx, rdx, 0, 0);
  float loss_sum = NAN;
  be->mse_loss_grad(n, x.data(), t.data(), 2.0f / static_cast<float>(n), g.data(), &loss_sum);
  ref::Vec rg;
  const double rloss = ref::mse(ref::to_double(x), ref::to_double(t), &rg);
  EXPECT_NEAR(loss_sum / n, rloss, 1e-6 * rloss);
  EXPECT_CLOSE(g, rg, 1e-9, 1e-5);
}

TEST(Ops, AdamMatchesReferenceOverSteps) {
  Rand r;
  auto be = make_backend(cpu());
  const int64_t n = r.i(1, 5000);
  SCOPED_TRACE(fmt::format("seed {} n {}", r.seed, n));
  AdamParams a;
  a.lr = 1e-3, a.weight_decay = 0.01;
  std::vector<float> p = r.vec(n), m(n, 0.0f), v(n, 0.0f);
  ref::Vec rp = ref::to_double(p), rm(n, 0.0), rv(n, 0.0);
  for (int64_t step = 1; step <= 5; ++step) {
    const auto g = r.vec(n);
    be->adam_step(n, p.data(), g.data(), m.data(), v.data(), a, step);
    ref::adam(rp, ref::to_double(g), rm, rv, a, step);
  }
  EXPECT_CLOSE(p, rp, 1e-6, 1e-6);
}

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
    ref::net_loss(plan, p, x, t, batch, &grad);
    const double h = 1e-6;
    double worst = 0;
    for (std::size_t i = 0; i < p.size(); ++i) {
      ref::Vec pp = p, pm = p;
      pp[i] += h, pm[i] -= h;
      const double fd = (ref::net_loss(plan, pp, x, t, batch) - ref::net_loss(plan, pm, x, t, batch)) / (2 * h);
      worst = std::max(worst, std::abs(fd - grad[i]) / (1e-6 + std::abs(fd)));
      // ReLU kinks make single elements non-differentiable; those are rare and tiny.
      EXPECT_NEAR(fd, grad[i], 1e-6 + 1e-4 * std::abs(fd)) << "parameter " << i;
    }
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
    auto be = make_backend(cpu());
    Sequential model(plan, 0, static_cast<int>(plan.layers.size()), *be);
    model.load_params(p);
    const int64_t n = model.out_numel(batch);
    const float* y = model.forward(x.data(), batch);
    std::vector<float> dy(n), dx(x.size(), NAN);
    float loss_sum = 0;
    be->mse_loss_grad(n, y, t.data(), 2.0f / static_cast<float>(n), dy.data(), &loss_sum);
    model.backward(dy.data(), dx.data(), false);
    ref::Vec grad;
    const double rloss = ref::net_loss(plan, ref::to_double(p), ref::to_double(x), ref::to_double(t), batch, &grad);
    EXPECT_NEAR(loss_sum / n, rloss, 1e-5 * rloss);
    EXPECT_CLOSE(model.grads().to_host(), grad, 1e-5, 1e-4);
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
