// oneDNN's blocked layout kept between chained convolutions: channel slices, Sequentials, stage
// cuts and the strategies' training steps give what the NCHW path gives, bit for bit.
#include "tests/test_dnnl_support.h"

namespace pb {
namespace {

#ifdef PARBENCH_HAVE_DNNL

using namespace pb::dnnl_test;

// CPU workers each own a backend with their own thread count and call it concurrently.
// Winograd in channel slices (a scratch cap forces it, as at great_net's 512 and 1024 channels):
// a slice of a blocked tensor is a view into it at whole blocks. Convs A (32 -> 64) and B
// (64 -> 64) chained through a blocked tensor and its gradient give what the NCHW calls give,
// bit for bit, in all three passes.
TEST_F(Dnnl, BlockedChannelSlicesMatchPlain) {
  ConvGeom a;
  a.n = 2, a.c = 32, a.h = a.w = 12, a.k = 64, a.r = a.s = 3, a.pad_h = a.pad_w = 1;
  ConvGeom b = a;
  b.c = 64;
  // Slices per pass and their scratch, from the plan of B: "forward IMPL xN (S B scratch), ...".
  auto passes = [](const std::string& plan) {
    std::vector<std::pair<int64_t, std::size_t>> out;
    const std::regex re(R"( x(\d+) \((\d+) B)");
    for (auto it = std::sregex_iterator(plan.begin(), plan.end(), re); it != std::sregex_iterator(); ++it)
      out.emplace_back(std::stoll((*it)[1]), std::stoull((*it)[2]));
    return out;
  };
  const std::string whole = DnnlConv(2, true).plan(b, true);
  if (whole.find("wino") == std::string::npos) GTEST_SKIP() << "no oneDNN Winograd on this CPU: " << whole;
  const auto x = random(a.n * a.c * a.h * a.w), wa = random(a.k * a.c * 9), ba = random(a.k),
             wb = random(b.k * b.c * 9), bb = random(b.k), dy = random(b.n * b.k * b.h * b.w);
  const std::size_t mid = static_cast<std::size_t>(a.n * a.k * a.h * a.w);
  const ConvLayouts plain, into{ActLayout::Plain, ActLayout::Blocked}, from{ActLayout::Blocked, ActLayout::Plain};
  struct Out {
    std::vector<float> y_a, y_b, dx_b, dx_a, dw_a, db_a, dw_b, db_b;
  };
  // Caps just below each pass's unsliced scratch, so that each pass runs sliced under one of them.
  bool pass_sliced[3] = {false, false, false};
  for (const auto& [whole_parts, whole_bytes] : passes(whole)) {
    if (whole_bytes == 0) continue;
    const std::size_t cap = whole_bytes - 1;
    DnnlConv conv(2, true, cap);
    const std::string sliced = conv.plan(b, true);
    const auto got = passes(sliced);
    for (std::size_t i = 0; i < got.size() && i < 3; ++i) pass_sliced[i] = pass_sliced[i] || got[i].first > 1;
    std::printf("B under a %zu-byte scratch cap: %s\n", cap, sliced.c_str());
    SCOPED_TRACE(fmt::format("seed {}: {}", seed_, sliced));
    ASSERT_TRUE(conv.keeps_blocked(a, b)) << "the tensor between A and B is not kept blocked";
    auto run = [&](ConvLayouts io_a, ConvLayouts io_b, bool accumulate) {
      Out o;
      o.y_a.assign(mid, NAN), o.y_b.assign(dy.size(), NAN), o.dx_b.assign(mid, NAN), o.dx_a.assign(x.size(), NAN);
      o.dw_a.assign(wa.size(), 0.5f), o.db_a.assign(ba.size(), 0.5f), o.dw_b.assign(wb.size(), 0.5f),
          o.db_b.assign(bb.size(), 0.5f);
      conv.forward(a, x.data(), wa.data(), ba.data(), o.y_a.data(), io_a);
      conv.forward(b, o.y_a.data(), wb.data(), bb.data(), o.y_b.data(), io_b);
      conv.backward_weights(b, o.y_a.data(), dy.data(), o.dw_b.data(), o.db_b.data(), accumulate, io_b);
      conv.backward_data(b, dy.data(), wb.data(), o.dx_b.data(), io_b);
      conv.backward_weights(a, x.data(), o.dx_b.data(), o.dw_a.data(), o.db_a.data(), accumulate, io_a);
      conv.backward_data(a, o.dx_b.data(), wa.data(), o.dx_a.data(), io_a);
      return o;
    };
    for (const bool accumulate : {false, true}) {
      SCOPED_TRACE(accumulate ? "weight gradients accumulated" : "weight gradients overwritten");
      const Out p = run(plain, plain, accumulate), q = run(into, from, accumulate);
      // The tensor in between holds the same values in another order.
      EXPECT_NE(q.y_a, p.y_a);
      std::vector<float> sp = p.y_a, sq = q.y_a;
      std::sort(sp.begin(), sp.end()), std::sort(sq.begin(), sq.end());
      EXPECT_EQ(sq, sp);
      EXPECT_EQ(q.y_b, p.y_b);
      EXPECT_EQ(q.dx_a, p.dx_a);
      EXPECT_EQ(q.dw_a, p.dw_a);
      EXPECT_EQ(q.db_a, p.db_a);
      EXPECT_EQ(q.dw_b, p.dw_b);
      EXPECT_EQ(q.db_b, p.db_b);
      // And the plain calls against the double loop.
      EXPECT_TRUE(near(p.y_b, Reference{b}.forward(p.y_a, wb, bb.data()), "sliced forward vs double"));
    }
  }
  // Forward and backward data slice where their scratch is over the cap; backward weights may
  // then run direct (oneDNN's choice), which the loop above covers too.
  EXPECT_TRUE(pass_sliced[0] && pass_sliced[1]) << "forward or backward data never ran sliced";
}

// Activations kept in oneDNN's blocked layout between chained convolutions. A net whose convs
// chain at whole channel blocks (16: direct kernels; 32 and 64: Winograd where the CPU has it),
// through a ReLU and directly, then Flatten + Linear (which need NCHW).
NetSpec chained_convs_net() {
  auto conv = [](int64_t k) {
    LayerSpec l;
    l.type = LayerType::Conv2d, l.out_channels = k, l.kernel_h = l.kernel_w = 3, l.pad_h = l.pad_w = 1;
    return l;
  };
  LayerSpec relu, flatten, linear;
  relu.type = LayerType::ReLU, flatten.type = LayerType::Flatten;
  linear.type = LayerType::Linear, linear.out_features = 5;
  NetSpec n;
  n.name = "chained_convs";
  n.target = Target::Random;
  n.input = {3, 10, 12};
  n.layers = {conv(16), relu, conv(32), relu, conv(32), conv(64), relu, conv(16), relu, conv(16), flatten, linear};
  return n;
}

// One forward and backward of a Sequential over layers [begin, end) of the net, fed `x` and the
// output gradient `dy` (or an MSE gradient against `t` where dy is empty).
struct Pass {
  std::vector<float> y, dx, grads;
};
Pass run_stage(const NetPlan& plan, int begin, int end, Backend& be, const std::vector<float>& p,
               const std::vector<float>& x, const std::vector<float>& dy, int64_t batch) {
  Sequential m(plan, begin, end, be);
  m.load_params(p);
  const int64_t n = m.out_numel(batch);
  const float* y = m.forward(x.data(), batch);
  Pass out;
  out.y.assign(y, y + n);
  out.dx.assign(static_cast<std::size_t>(m.in_numel(batch)), NAN);
  m.backward(dy.data(), out.dx.data(), false);
  out.grads = m.grads().to_host();
  return out;
}

std::unique_ptr<Backend> blocked_backend(bool blocked, bool fuse_relu) {
  BackendOptions o;
  o.threads = 2;
  o.cpu_blocked = blocked;
  o.cpu_fuse_relu = fuse_relu;
  return make_backend(cpu(), o);
}

// The geometries of the conv pairs of a plan that chain (conv, conv or conv, ReLU, conv).
std::vector<std::pair<ConvGeom, ConvGeom>> chained_pairs(const NetPlan& plan, int64_t batch) {
  auto geom = [&](const LayerPlan& l) {
    ConvGeom g;
    g.n = batch, g.c = l.in[0], g.h = l.in[1], g.w = l.in[2];
    g.k = l.spec.out_channels, g.r = l.spec.kernel_h, g.s = l.spec.kernel_w;
    g.pad_h = l.spec.pad_h, g.pad_w = l.spec.pad_w;
    return g;
  };
  std::vector<std::pair<ConvGeom, ConvGeom>> out;
  const auto& L = plan.layers;
  for (std::size_t i = 0; i < L.size(); ++i) {
    if (L[i].spec.type != LayerType::Conv2d) continue;
    std::size_t next = i + 1;
    if (next < L.size() && L[next].spec.type == LayerType::ReLU) ++next;
    if (next < L.size() && L[next].spec.type == LayerType::Conv2d) out.emplace_back(geom(L[i]), geom(L[next]));
  }
  return out;
}

// The blocked layout changes where values lie, never the arithmetic: the same primitives run, so
// forward output, input gradient and parameter gradients equal the NCHW path's bit for bit, with
// the ReLU fused and not; and the loss matches the double-precision reference (measured within
// 7e-8 relative over 60 seeds; the bound is 1e-5).
TEST(DnnlBlocked, SequentialMatchesPlainBitForBit) {
  test::ScopedEnv env("PARBENCH_CPU_BLOCKED", "");  // the options decide
  test::Rand r;
  SCOPED_TRACE(fmt::format("seed {}", r.seed));
  const NetPlan plan = plan_net(chained_convs_net());
  const int64_t batch = 2;
  const std::vector<float> p = init_params(plan, r.seed);
  const std::vector<float> x = r.vec(batch * numel_of(plan.input)), t = r.vec(batch * numel_of(plan.output));
  const double rloss = ref::net_loss(plan, ref::to_double(p), ref::to_double(x), ref::to_double(t), batch);
  const int L = static_cast<int>(plan.layers.size());
  for (const bool fuse : {true, false}) {
    SCOPED_TRACE(fuse ? "ReLU fused" : "ReLU unfused");
    auto on = blocked_backend(true, fuse), off = blocked_backend(false, fuse);
    // The test means something only where the layout is kept: on this CPU's oneDNN, every pair.
    int kept = 0;
    for (const auto& [a, b] : chained_pairs(plan, batch)) {
      kept += on->conv_keeps_blocked(a, b);
      EXPECT_FALSE(off->conv_keeps_blocked(a, b));
    }
    ASSERT_GT(kept, 0) << "no conv pair kept blocked";
    // dy: the MSE gradient the plain path computes.
    Sequential m(plan, 0, L, *off);
    m.load_params(p);
    const int64_t n = m.out_numel(batch);
    const float* y = m.forward(x.data(), batch);
    std::vector<float> dy(static_cast<std::size_t>(n));
    float loss_sum = 0;
    off->mse_loss_grad(n, y, t.data(), 2.0f / static_cast<float>(n), dy.data(), &loss_sum);
    const Pass a = run_stage(plan, 0, L, *on, p, x, dy, batch), b = run_stage(plan, 0, L, *off, p, x, dy, batch);
    EXPECT_EQ(a.y, b.y);
    EXPECT_EQ(a.dx, b.dx);
    EXPECT_EQ(a.grads, b.grads);
    // Against the double reference: the loss (gradients are compared above with the NCHW path,
    // which tests/test_ops.cpp checks against the reference; a whole deep net's gradients would
    // differ wherever float and double disagree on the sign of a pre-ReLU value near 0).
    double loss = 0;
    for (std::size_t i = 0; i < a.y.size(); ++i) loss += (double(a.y[i]) - t[i]) * (double(a.y[i]) - t[i]);
    loss /= static_cast<double>(a.y.size());
    EXPECT_NEAR(loss, rloss, 1e-5 * rloss);
  }
}

// Stage boundaries stay NCHW: a net cut between a conv and its ReLU, or between a ReLU and the
// next conv, gives what the whole net gives, as model parallelism relies on.
TEST(DnnlBlocked, StagesCutAnywhereComposeToTheWholeNet) {
  test::ScopedEnv env("PARBENCH_CPU_BLOCKED", "");
  test::Rand r;
  SCOPED_TRACE(fmt::format("seed {}", r.seed));
  const NetPlan plan = plan_net(chained_convs_net());
  const int64_t batch = 3;
  const int L = static_cast<int>(plan.layers.size());
  const std::vector<float> p = init_params(plan, r.seed);
  const std::vector<float> x = r.vec(batch * numel_of(plan.input)), dy = r.vec(batch * numel_of(plan.output));
  auto be = blocked_backend(true, true);
  const Pass whole = run_stage(plan, 0, L, *be, p, x, dy, batch);
  for (const int cut : {1, 2, 4, 5, 6}) {
    SCOPED_TRACE(fmt::format("cut before layer {}", cut));
    // The first stage's own output gradient only sizes its backward here; its y is what counts.
    const std::vector<float> first_dy(static_cast<std::size_t>(batch * numel_of(plan.layers[cut - 1].out)), 0.0f);
    const Pass second = run_stage(plan, cut, L, *be, p, run_stage(plan, 0, cut, *be, p, x, first_dy, batch).y, dy, batch);
    // The first stage again, now with the second's input gradient.
    Sequential first(plan, 0, cut, *be);
    first.load_params(p);
    first.forward(x.data(), batch);
    std::vector<float> dx(x.size(), NAN);
    first.backward(second.dx.data(), dx.data(), false);
    EXPECT_EQ(second.y, whole.y);
    EXPECT_EQ(dx, whole.dx);
    std::vector<float> grads = first.grads().to_host();
    grads.insert(grads.end(), second.grads.begin(), second.grads.end());
    EXPECT_EQ(grads, whole.grads);
  }
}

// Training steps of the strategies that cut the net (pipeline: stage boundaries, micro-batches
// accumulating gradients; tp: channel slices between all-gathers) and the single worker: the
// same parameters and losses with the blocked layout on as off, bit for bit.
TEST(DnnlBlocked, StrategiesTrainTheSameSteps) {
  test::Rand r;
  SCOPED_TRACE(fmt::format("seed {}", r.seed));
  NetSpec net = chained_convs_net();
  const NetPlan plan = plan_net(net);
  const int64_t batch = 4;
  const std::vector<float> p0 = init_params(plan, r.seed);
  const std::vector<float> x = r.vec(batch * numel_of(plan.input)), t = r.vec(batch * numel_of(plan.output));
  struct Case {
    std::string name;
    int devices;
    std::vector<int> balance;
  };
  for (const Case& c : {Case{"regular", 1, {}}, Case{"pipeline", 2, {3, 9}}, Case{"pipeline", 2, {6, 6}},
                        Case{"mp", 2, {4, 8}}, Case{"tp", 2, {}}}) {
    SCOPED_TRACE(fmt::format("{} over {} workers, balance {}", c.name, c.devices, fmt::join(c.balance, ",")));
    std::vector<float> params[2];
    std::vector<double> losses[2];
    for (const bool blocked : {true, false}) {
      test::ScopedEnv env("PARBENCH_CPU_BLOCKED", blocked ? "1" : "0");
      StrategyOptions o;
      o.devices = c.devices;
      o.backend.threads = 1;
      o.micro_batches = 2;
      o.balance = c.balance;
      auto s = make_strategy(c.name, o);
      s->setup(plan, p0, net.adam);
      s->load_batch(x, t, batch);
      for (int k = 0; k < 3; ++k) {
        s->step();
        losses[blocked].push_back(s->loss());
      }
      params[blocked] = s->params();
    }
    EXPECT_EQ(losses[true], losses[false]);
    EXPECT_EQ(params[true], params[false]);
    EXPECT_NE(params[true], p0) << "no step changed the parameters";
  }
}

#endif  // PARBENCH_HAVE_DNNL

}  // namespace
}  // namespace pb
