// tp and dp x tp under --precision bf16 against regular's bf16 run (docs/bf16.md, "tp across
// workers", derives both bounds): activations all-gathered in bf16, partial input gradients summed
// in fp32 and rounded once, so tp rounds where regular does and differs only where a reordered fp32
// sum lands on the other side of a bf16 rounding boundary.
#include <cmath>

#include "tests/bf16_skip.h"
#include "tests/test_strategies_support.h"

namespace pb::strategies_test {
namespace {

struct Case {
  std::string strategy;
  int devices, ways;
};

// great_net 8x8 at width 0.3125 (5, 10, 20, ... 320 channels): every split layer's channels cut
// unevenly over 2, 3 and 4 workers (5: 3+2, 2+2+1, 2+1+1+1); batch 7 in dp2's pieces 4 and 3.
const std::vector<Case> kCases = {{"tp", 2, 2}, {"tp", 3, 3}, {"tp", 4, 4}, {"dp2xtp2", 4, 2}, {"dp1xtp3", 3, 3},
                                  {"dp2xtp1", 2, 1}};

NetSpec tp_net() { return great_net(8, 0.3125); }
// Nets tp runs as a graph: skips (a U-Net's concats, a ResNet's adds), pooling, upsampling and
// transposed convs, their outputs' gradients summed over readers in bf16 as regular sums them.
std::vector<NetSpec> nets() { return {tp_net(), unet(16, 0.125), resnet(16, 0.125)}; }

Trained run(const std::string& name, int devices, const NetSpec& net, int steps, Precision p = Precision::Bf16) {
  StrategyOptions o = options(devices);
  o.backend.precision = p;
  return train(name, o, net, {7}, steps);
}

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(double(a[i]) - b[i]));
  return d;
}

// Worst case: whatever the gradients, an Adam step moves a parameter by at most lr c_t, c_t =
// sqrt(sum_i a_i^2 / b_i) (Cauchy-Schwarz over m-hat's weights a_i and v-hat's b_i at step t), so
// two runs of k steps part by at most 2 lr sum_t c_t, plus 2^-21 (|p| + lr) for the fp32 updates.
TEST(TpBf16, WithinAdamsWorstCaseOfRegular) {
  SKIP_WITHOUT_BF16();
  for (const NetSpec& net : nets()) {
  SCOPED_TRACE(net.name);
  const int steps = 3;
  const Trained want = run("regular", 1, net, steps);
  const double b1 = net.adam.beta1, b2 = net.adam.beta2, lr = net.adam.lr;
  double reach = 0;
  for (int t = 1; t <= steps; ++t) {
    double s = 0;
    for (int i = 1; i <= t; ++i) {
      const double a = (1 - b1) * std::pow(b1, t - i) / (1 - std::pow(b1, t)), b = (1 - b2) * std::pow(b2, t - i) / (1 - std::pow(b2, t));
      s += a * a / b;
    }
    reach += 2 * lr * std::sqrt(s);
  }
  for (const Case& c : kCases) {
    SCOPED_TRACE(fmt::format("{} on {} workers", c.strategy, c.devices));
    const Trained got = run(c.strategy, c.devices, net, steps);
    ASSERT_EQ(got.params.size(), want.params.size());
    for (std::size_t i = 0; i < want.params.size(); ++i)
      ASSERT_LE(std::abs(double(got.params[i]) - want.params[i]), reach + std::ldexp(std::abs(want.params[i]) + lr, -21)) << "[" << i << "]";
    for (double l : got.losses) EXPECT_TRUE(std::isfinite(l));
    std::printf("%s %s x%d: parameters %.3g from regular's bf16 run (bound %.3g)\n", net.name.c_str(), c.strategy.c_str(),
                c.devices, max_diff(got.params, want.params), reach);
  }
  }
}

// Adam with lr = eps = 1 moves each parameter by g / (|g| + 1), about g here (|g| << 1): one step's
// parameters show the gradients. Regular's bf16 and fp32 runs part by R, every value rounded; tp's
// bf16 run differs from regular's only where an input gradient's fp32 sum, reordered (within
// (K + N) 2^-24 of the sum of |terms|), crosses a bf16 rounding boundary (spacing 2^-8 relative):
// about a (K + N) 2^-16 share of them, each one ulp (2^-7, four times an average rounding's 2^-9),
// so within (K + N) 2^-14 R, K the widest split layer's channels and N the ways; the loss likewise.
// Partial sums rounded to bf16 before their all-reduce (every one, 2^-9 on average) exceed it; so
// does fp32. dp x tp's D replicas take ddp's chunks and sum their fp32 gradients in ddp's rank
// order: they are held to ddp at D workers instead, equal to it where nothing is split.
TEST(TpBf16, GradientsDifferOnlyByReorderedFp32Sums) {
  SKIP_WITHOUT_BF16();
  for (const NetSpec& base : nets()) {
  SCOPED_TRACE(base.name);
  const NetSpec net = scale_sensitive(base, 1.0, 1.0);
  const NetPlan plan = plan_net(net);
  const Trained regular = run("regular", 1, net, 1), fp32 = run("regular", 1, net, 1, Precision::Fp32);
  const double R = max_diff(regular.params, fp32.params), R_loss = std::abs(regular.losses[0] - fp32.losses[0]);
  ASSERT_GT(R, 0.0);
  for (const Case& c : kCases) {
    SCOPED_TRACE(fmt::format("{} on {} workers", c.strategy, c.devices));
    const int replicas = c.devices / c.ways;
    const Trained want = replicas > 1 ? run("ddp", replicas, net, 1) : regular;
    int64_t K = 0;
    for (const LayerPlan& l : plan.layers)
      if (has_weights(l.spec.type) && c.ways > 1 && l.out[0] >= c.ways)
        K = std::max(K, l.out[0]);
    const double share = K > 0 ? std::ldexp(static_cast<double>(K + c.ways), -14) : 0.0;
    const Trained got = run(c.strategy, c.devices, net, 1);
    const double d = max_diff(got.params, want.params), dl = std::abs(got.losses[0] - want.losses[0]);
    std::printf("%s %s x%d: parameters %.3g from %s (bound %.3g; R %.3g), loss %.3g (bound %.3g)\n", net.name.c_str(),
                c.strategy.c_str(), c.devices, d, replicas > 1 ? "ddp" : "regular", share * R, R, dl, share * R_loss);
    EXPECT_LE(d, share * R);
    EXPECT_LE(dl, share * R_loss);
  }
  }
}

}  // namespace
}  // namespace pb::strategies_test
