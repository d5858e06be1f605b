// Sequential under autocast (Precision::Bf16): PyTorch's torch.autocast("cpu", bfloat16)
// trajectories (scripts/make_fixtures.py, tests/fixtures/bf16/), stages that compose exactly,
// weight gradients accumulated in fp32 and fp32 master parameters.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "engine/check.h"
#include "engine/fsutil.h"
#include "engine/model.h"
#include "engine/npy.h"
#include "engine/state_dict.h"
#include "strategies/rules.h"
#include "strategies/strategy.h"
#include "tests/paths.h"
#include "tests/bf16_skip.h"
#include "tests/support.h"
#include "workloads/workload.h"
#ifdef PARBENCH_HAVE_DNNL
#include "engine/dnnl/dnnl_bf16.h"
#endif

namespace pb {
namespace {

namespace fs = std::filesystem;

BackendOptions bf16_options() {
  BackendOptions o;
  o.threads = 2;
  o.precision = Precision::Bf16;
  return o;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double w = 0;
  for (std::size_t i = 0; i < a.size(); ++i) w = std::max(w, double(std::abs(a[i] - b[i])));
  return w;
}

std::vector<std::string> bf16_fixtures() {
  std::vector<std::string> names;
  const fs::path root = test::source_dir() / "tests/fixtures/bf16";
  if (fs::exists(root))
    for (const auto& e : fs::directory_iterator(root))
      if (fs::exists(e.path() / "net.json")) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

class Bf16Golden : public ::testing::TestWithParam<std::string> {};

// Tolerances (docs/bf16.md): the engine and PyTorch run the same bf16 function but round in
// different places (oneDNN's fp32 sums in another order can round an activation to the next bf16
// value, 2^-7 relative; PyTorch rounds weight gradients to bf16 before adding them to the fp32
// .grad, the engine keeps them fp32). Losses: 2^-6 relative, two bf16 ulps of slack over the
// output's rounding. Parameters: an Adam step moves each by about lr, whatever the gradient's
// size, so a difference in gradients moves a parameter by at most 2 lr per step: 2 k lr in all,
// which fp32 stays far inside too; what tells autocast from fp32 is the distance: the engine must
// be nearer PyTorch's bf16 trajectory than PyTorch's fp32 one (tests/fixtures/<net>/final).
TEST_P(Bf16Golden, RegularFollowsTorchAutocast) {
  SKIP_WITHOUT_BF16();
  const fs::path dir = test::source_dir() / "tests/fixtures/bf16" / GetParam();
  fs::path fp32_dir = test::source_dir() / "tests/fixtures" / GetParam();
  if (!fs::exists(fp32_dir)) fp32_dir = test::source_dir() / "tests/fixtures/graph" / GetParam();  // a net with skips
  const NetSpec net = load_net_json((dir / "net.json").string());
  const NetPlan plan = plan_net(net);
  const auto expected = nlohmann::json::parse(read_file((dir / "expected.json").string()));
  ASSERT_EQ(expected.value("autocast", ""), "cpu bfloat16");
  const NpyArray x = read_npy((dir / "input.npy").string());
  const int64_t batch = x.shape[0];
  std::vector<float> t = x.data;
  if (net.target == Target::Random) {
    Shape ts = plan.output;
    ts.insert(ts.begin(), batch);
    t = read_npy((dir / "target.npy").string(), ts).data;
  }
  // A net with skips under fsdp and pipelines too: its units, its stages pass the skips between them;
  // tp over every net it does not run as a chain.
  std::vector<std::pair<std::string, int>> runs = {{"regular", 1}};
  if (plan.has_skips())
    runs.insert(runs.end(), {{"fsdp", 2}, {"pipeline-1f1b", 3}, {"pipeline-zb", 3}, {"mp", 4}, {"pipeline-interleaved", 2},
                             {"pipeline-zbv", 2}});
  if (!tp_chain(plan)) runs.insert(runs.end(), {{"tp", 2}, {"tp", 3}});  // run as a graph (strategies/tp_plan.cpp)
  for (const auto& [strategy, devices] : runs) {
    SCOPED_TRACE(fmt::format("{} x{}", strategy, devices));
    StrategyOptions o;
    o.backend = bf16_options();
    o.devices = devices;
    o.micro_batches = static_cast<int>(std::min<int64_t>(2, batch));
    auto s = make_strategy(strategy, o);
    s->setup(plan, read_state_dict(plan, (dir / "params").string()), net.adam);
    s->load_batch(x.data, t, batch);
    const auto want = expected["losses"].get<std::vector<double>>();
    const double loss_rtol = 1.0 / 64;
    double worst_loss = 0;
    for (std::size_t k = 0; k < want.size(); ++k) {
      s->step();
      worst_loss = std::max(worst_loss, std::abs(s->loss() - want[k]) / std::abs(want[k]));
      EXPECT_NEAR(s->loss(), want[k], loss_rtol * std::abs(want[k])) << "step " << k + 1;
    }
    const std::vector<float> got = s->params();
    const std::vector<float> torch_bf16 = read_state_dict(plan, (dir / "final").string());
    const double lr = expected["lr"].get<double>();
    const double to_bf16 = max_abs_diff(got, torch_bf16);
    EXPECT_LE(to_bf16, 2 * lr * static_cast<double>(want.size()));
    if (fs::exists(fp32_dir / "final")) {
      const double to_fp32 = max_abs_diff(got, read_state_dict(plan, (fp32_dir / "final").string()));
      EXPECT_LT(to_bf16, to_fp32) << "nearer PyTorch's fp32 trajectory than its autocast one";
      std::printf("[ bf16 ] %s, %s x%d: worst loss rel diff %.3g; parameters: max |diff| to torch autocast %.3g, to torch "
                  "fp32 %.3g\n", GetParam().c_str(), strategy.c_str(), devices, worst_loss, to_bf16, to_fp32);
    }
  }
}

GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Bf16Golden);  // a checkout without tests/fixtures/bf16
INSTANTIATE_TEST_SUITE_P(Fixtures, Bf16Golden, ::testing::ValuesIn(bf16_fixtures()),
                         [](const auto& info) { return info.param; });

// Every strategy whose workers run Sequential stages computes regular's bf16 function: stage edges
// and transfers are fp32 holding bf16 values (exact), so only the order of fp32 sums differs
// (weight gradients over chunks), within the 1e-5 the fp32 trajectories keep (test_golden.cpp;
// measured here about 3e-8). tp across workers also sums input gradients in another order before
// rounding them to bf16 (test_strategies_tp_bf16.cpp bounds that); on this net's small layers
// (4 channels split 2+2, 2+1+1, 1+1+1+1; 2 split 1+1; the linear's 3 split 2+1, 1+1+1) it too
// stays within 1e-5 (measured equal).
TEST(Bf16Strategies, FollowRegularOrRefuse) {
  SKIP_WITHOUT_BF16();
  const fs::path dir = test::source_dir() / "tests/fixtures/bf16/conv_stride2";
  if (!fs::exists(dir / "net.json")) GTEST_SKIP() << "no " << dir;
  const NetSpec net = load_net_json((dir / "net.json").string());
  const NetPlan plan = plan_net(net);
  const NpyArray x = read_npy((dir / "input.npy").string());
  const int64_t batch = x.shape[0];
  Shape ts = plan.output;
  ts.insert(ts.begin(), batch);
  const std::vector<float> t = read_npy((dir / "target.npy").string(), ts).data;
  const std::vector<float> init = read_state_dict(plan, (dir / "params").string());
  auto run = [&](const std::string& name, int devices, std::vector<double>& losses) {
    StrategyOptions o;
    o.backend = bf16_options();
    o.devices = devices;
    o.backend.threads = 1;
    o.micro_batches = 3;
    o.cap_micro_batches = true;  // dp x pp: at most a replica's samples
    auto s = make_strategy(name, o);
    s->setup(plan, init, net.adam);
    s->load_batch(x.data, t, batch);
    for (int k = 0; k < 3; ++k) s->step(), losses.push_back(s->loss());
    return s->params();
  };
  std::vector<double> want;
  const std::vector<float> p_want = run("regular", 1, want);
  for (const auto& [name, devices] : std::vector<std::pair<std::string, int>>{
           {"dp", 2}, {"ddp", 2}, {"mp", 2}, {"pipeline", 2}, {"pipeline-1f1b-recompute", 3}, {"pipeline-zb", 2},
           {"pipeline-zb", 3}, {"pipeline-zbv", 2}, {"pipeline-zbv", 3}, {"fsdp", 2},
           {"zero2", 2}, {"dp2xpp2", 4}, {"tp", 2}, {"tp", 3}, {"tp", 4}, {"dp2xtp2", 4}}) {
    SCOPED_TRACE(fmt::format("{} on {} workers", name, devices));
    std::vector<double> got;
    const std::vector<float> p = run(name, devices, got);
    for (std::size_t k = 0; k < want.size(); ++k) EXPECT_NEAR(got[k], want[k], 1e-5 * want[k]) << "step " << k + 1;
    EXPECT_LE(max_abs_diff(p, p_want), 1e-5);
  }
}

NetPlan small_net() {
  // conv, ReLU, conv, ReLU, flatten, linear: every layer kind, stage cuts between each.
  return plan_net(load_net_json((test::source_dir() / "tests/fixtures/conv_stride2/net.json").string()));
}

std::vector<float> random_params(const NetPlan& plan, test::Rand& r) {
  std::vector<float> p = r.vec(plan.param_count);
  for (float& v : p) v *= 0.3f;
  return p;
}

// Stage edges are fp32 and bf16 widens exactly: a net cut into two stages computes bit for bit
// what the whole net does, forward and backward.
TEST(Bf16Sequential, StagesCutAnywhereComposeExactly) {
  SKIP_WITHOUT_BF16();
  auto be = make_backend(cpu(), bf16_options());
  const NetPlan plan = small_net();
  test::Rand r;
  const int64_t batch = 3;
  const std::vector<float> params = random_params(plan, r);
  const std::vector<float> x = r.vec(batch * numel_of(plan.input));
  Sequential whole(plan, 0, static_cast<int>(plan.layers.size()), *be);
  whole.load_params(params);
  const int64_t out_n = whole.out_numel(batch);
  const std::vector<float> dy = r.vec(out_n);
  const float* y = whole.forward(x.data(), batch);
  const std::vector<float> y_whole(y, y + out_n);
  std::vector<float> dx_whole(x.size());
  whole.backward(dy.data(), dx_whole.data(), false);
  const std::vector<float> g_whole = whole.grads().to_host();
  for (int cut = 1; cut < static_cast<int>(plan.layers.size()); ++cut) {
    SCOPED_TRACE(fmt::format("seed {} cut at layer {}", r.seed, cut));
    Sequential a(plan, 0, cut, *be), b(plan, cut, static_cast<int>(plan.layers.size()), *be);
    a.load_params(params);
    b.load_params(params);
    const float* ya = a.forward(x.data(), batch);
    const float* yb = b.forward(ya, batch);
    EXPECT_EQ(std::vector<float>(yb, yb + out_n), y_whole);
    std::vector<float> mid(static_cast<std::size_t>(a.out_numel(batch))), dx(x.size());
    b.backward(dy.data(), mid.data(), false);
    a.backward(mid.data(), dx.data(), false);
    EXPECT_EQ(dx, dx_whole);
    std::vector<float> ga = a.grads().to_host(), gb = b.grads().to_host();
    ga.insert(ga.end(), gb.begin(), gb.end());
    EXPECT_EQ(ga, g_whole);
  }
}

// Weight gradients are fp32 (not bf16 values) and accumulate in fp32: a second backward of the
// same micro-batch with accumulate doubles them exactly.
TEST(Bf16Sequential, WeightGradientsAccumulateInFp32) {
  SKIP_WITHOUT_BF16();
  auto be = make_backend(cpu(), bf16_options());
  const NetPlan plan = small_net();
  test::Rand r;
  const int64_t batch = 3;
  Sequential m(plan, 0, static_cast<int>(plan.layers.size()), *be);
  m.load_params(random_params(plan, r));
  const std::vector<float> x = r.vec(batch * numel_of(plan.input)), dy = r.vec(m.out_numel(batch));
  m.forward(x.data(), batch);
  m.backward(dy.data(), nullptr, false);
  const std::vector<float> once = m.grads().to_host();
  int not_bf16 = 0;
  for (float g : once) not_bf16 += round_bf16(g) != g;
  EXPECT_GT(not_bf16, static_cast<int>(once.size()) / 2) << "weight gradients rounded to bf16";
  m.backward(dy.data(), nullptr, true);
  const std::vector<float> twice = m.grads().to_host();
  for (std::size_t i = 0; i < once.size(); ++i) ASSERT_EQ(twice[i], 2 * once[i]) << "seed " << r.seed << " grad " << i;
}

// Master weights are fp32: an Adam step far below bf16's resolution still moves them, and the
// next forward sees the rounded copy of the moved weights.
TEST(Bf16Sequential, ParametersAndAdamStayFp32) {
  SKIP_WITHOUT_BF16();
  auto be = make_backend(cpu(), bf16_options());
  const NetPlan plan = small_net();
  test::Rand r;
  const int64_t batch = 3;
  Sequential m(plan, 0, static_cast<int>(plan.layers.size()), *be);
  const std::vector<float> p0 = random_params(plan, r);
  m.load_params(p0);
  AdamParams ap;
  ap.lr = 1e-6;  // 2^-20: below half a bf16 ulp of any parameter above 2^-12
  Adam adam(*be, m.params().numel(), ap);
  const std::vector<float> x = r.vec(batch * numel_of(plan.input)), dy = r.vec(m.out_numel(batch));
  m.forward(x.data(), batch);
  m.backward(dy.data(), nullptr, false);
  adam.step(m.params(), m.grads());
  const std::vector<float> p1 = m.params().to_host();
  int moved = 0, below_bf16 = 0;
  for (std::size_t i = 0; i < p0.size(); ++i) {
    moved += p1[i] != p0[i];
    below_bf16 += p1[i] != p0[i] && round_bf16(p1[i]) == round_bf16(p0[i]);
  }
  EXPECT_GT(moved, static_cast<int>(p0.size()) / 2);
  EXPECT_GT(below_bf16, static_cast<int>(p0.size()) / 2) << "updates below bf16's resolution were lost";
}

}  // namespace
}  // namespace pb
