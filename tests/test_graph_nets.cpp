// Nets with skips (residual adds, U-Net concats): the JSON format's "inputs", the shapes plan_net
// gives them, the double reference against its own finite differences, and Sequential's graph
// path against the reference.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <map>
#include <set>

#include "engine/backend.h"
#include "engine/check.h"
#include "engine/graph_stage.h"
#include "engine/model.h"
#include "reference.h"
#include "strategies/plan_gen.h"
#include "strategies/strategy.h"
#include "tests/bf16_skip.h"
#include "tests/paths.h"
#include "tests/support.h"
#include "workloads/workload.h"

namespace pb {
namespace {

using ::testing::HasSubstr;
using test::Rand;

NetSpec parse(const std::string& text) { return parse_net_json(text, "net.json"); }

std::string error_of(const std::string& text) {
  try {
    parse(text);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(accepted)";
}

// The odd cases: an add of one output to itself, a concat of one output twice and of the net's
// input, a ReLU read twice (so not in place), a residual from the net's input, a flatten of a
// concat, and the net's input read by three layers.
const char* kOddNet = R"({"name": "odd", "input": [2, 4, 6], "target": "random", "layers": [
  {"type": "conv2d", "out_channels": 3, "kernel_size": 3, "padding": 1, "name": "a"},
  {"type": "relu", "name": "r"},
  {"type": "add", "inputs": ["r", "r"]},
  {"type": "conv2d", "out_channels": 2, "kernel_size": [1, 3], "padding": [0, 1]},
  {"type": "add", "inputs": [3, "input"]},
  {"type": "concat", "inputs": [4, "r", 4, "input"]},
  {"type": "relu"},
  {"type": "maxpool2d"},
  {"type": "upsample"},
  {"type": "conv2d", "out_channels": 2, "kernel_size": 3, "padding": 1, "inputs": [8]},
  {"type": "concat", "inputs": [9, "r"]},
  {"type": "flatten"},
  {"type": "linear", "out_features": 3}
]})";

NetPlan fixture_plan(const std::string& name) {
  return plan_net(load_net_json((test::source_dir() / "tests/fixtures/graph" / name / "net.json").string()));
}

std::vector<NetPlan> graph_nets() {
  return {plan_net(parse(kOddNet)), fixture_plan("resnet_small"), fixture_plan("unet_small")};
}

TEST(GraphNets, InputsResolveToLayersAndShapesFollowThem) {
  const NetPlan p = plan_net(parse(kOddNet));
  EXPECT_EQ(p.layers[2].inputs, (std::vector<int>{1, 1}));
  EXPECT_EQ(p.layers[4].inputs, (std::vector<int>{3, kNetInput}));
  EXPECT_EQ(p.layers[5].inputs, (std::vector<int>{4, 1, 4, kNetInput}));
  EXPECT_EQ(p.layers[3].inputs, (std::vector<int>{2}));  // none given: the layer before
  EXPECT_EQ(p.layers[5].out, (Shape{2 + 3 + 2 + 2, 4, 6}));
  EXPECT_EQ(p.layers[7].out, (Shape{9, 2, 3}));
  EXPECT_EQ(p.layers[10].out, (Shape{2 + 3, 4, 6}));
  EXPECT_EQ(p.layers[1].readers, 4);  // twice by the add, once by each concat
  EXPECT_EQ(p.layers[4].readers, 2);
  EXPECT_TRUE(p.has_skips());
  EXPECT_EQ(first_skip(p), "layer 2 (add) reads layer 1 and layer 1");
  EXPECT_TRUE(is_graph_stage(p, 0, static_cast<int>(p.layers.size())));
  // A ReLU computes in place on its input where nothing else reads that; a flatten is a view.
  EXPECT_TRUE(graph_in_place(p, 0, 1));
  EXPECT_TRUE(graph_in_place(p, 0, 6));
  EXPECT_TRUE(graph_in_place(p, 0, 11));
  const NetPlan twice = plan_net(parse(R"({"name": "t", "input": [2, 3, 3], "target": "random", "layers": [
    {"type": "conv2d", "out_channels": 2, "kernel_size": 1}, {"type": "relu"}, {"type": "relu", "inputs": [0]},
    {"type": "add", "inputs": [1, 2]}, {"type": "relu"}]})"));
  EXPECT_FALSE(graph_in_place(twice, 0, 1));
  EXPECT_FALSE(graph_in_place(twice, 0, 2));
  EXPECT_TRUE(graph_in_place(twice, 0, 4));
  EXPECT_FALSE(graph_in_place(twice, 1, 1));  // its input is the stage's caller's
  // A chain is none of these.
  const NetPlan chain = plan_net(parse(R"({"name": "c", "input": [2, 3, 3], "target": "random", "layers": [
    {"type": "conv2d", "out_channels": 2, "kernel_size": 1}, {"type": "relu"}]})"));
  EXPECT_FALSE(chain.has_skips());
  EXPECT_FALSE(is_graph_stage(chain, 0, 2));
}

TEST(GraphNets, BadInputsAreRefusedNamingTheLayer) {
  auto net = [](const std::string& layers) {
    return R"({"name": "g", "input": [2, 4, 4], "target": "random", "layers": [)" + layers + "]}";
  };
  const std::string conv = R"({"type": "conv2d", "out_channels": 2, "kernel_size": 1, "name": "c"})";
  EXPECT_THAT(error_of(net(conv + R"(, {"type": "add", "inputs": ["c", "d"]})")),
              HasSubstr("layer 1 (add): field \"inputs\": \"d\" is not an earlier layer's name or index"));
  EXPECT_THAT(error_of(net(conv + R"(, {"type": "add", "inputs": [0, 2]}, {"type": "relu"})")),
              HasSubstr("layer 1 (add): reads layer 2, which is not an earlier layer"));
  EXPECT_THAT(error_of(net(conv + R"(, {"type": "add", "inputs": [0]})")), HasSubstr("layer 1 (add): reads 1 inputs; it takes two"));
  EXPECT_THAT(error_of(net(conv + R"(, {"type": "relu", "inputs": [0, 0]})")), HasSubstr("layer 1 (relu): reads 2 inputs; it takes one"));
  EXPECT_THAT(error_of(net(conv + R"(, {"type": "concat", "inputs": [0]})")), HasSubstr("it takes two or more"));
  EXPECT_THAT(error_of(net(R"({"type": "conv2d", "out_channels": 3, "kernel_size": 1}, {"type": "add", "inputs": [0, "input"]})")),
              HasSubstr("layer 1 (add): adds inputs of two shapes, (3, 4, 4) (layer 0) and (2, 4, 4) (the net's input)"));
  EXPECT_THAT(error_of(net(R"({"type": "maxpool2d"}, {"type": "concat", "inputs": [0, "input"]})")),
              HasSubstr("layer 1 (concat): joins [C, H, W] inputs of one height and width"));
  EXPECT_THAT(error_of(net(conv + R"(, {"type": "relu"}, {"type": "conv2d", "out_channels": 2, "kernel_size": 1, "inputs": [0]})")),
              HasSubstr("layer 1 (relu): its output is read by no layer"));
  EXPECT_THAT(error_of(net(R"({"type": "relu", "name": "input"})")), HasSubstr("name 'input' stands for the net's input"));
  EXPECT_THAT(error_of(net(conv + R"(, {"type": "add", "inputs": "c"})")), HasSubstr("field \"inputs\" must be a list"));
  EXPECT_THAT(error_of(net(conv + R"(, {"type": "concat", "inputs": [0, 0], "dim": 2})")), HasSubstr("\"dim\" must be 1"));
  EXPECT_THAT(error_of(net(R"({"type": "conv2d", "out_channels": 2, "kernel_size": 1, "in_channels": 3, "inputs": ["input"]})")),
              HasSubstr("in_channels is 3 but the net's input gives 2 channels"));
}

// The reference itself: its gradients (parameters and input) are the slope of its loss.
TEST(GraphNets, ReferenceGradientIsTheLossSlope) {
  Rand r;
  for (const NetPlan& plan : graph_nets()) {
    SCOPED_TRACE(fmt::format("seed {}: a net of {} layers", r.seed, plan.layers.size()));
    const int64_t batch = 2;
    const ref::Vec p = ref::to_double(init_params(plan, r.seed));
    const ref::Vec x = ref::to_double(r.vec(batch * numel_of(plan.input))), t = ref::to_double(r.vec(batch * numel_of(plan.output)));
    ref::Vec grad, dx;
    ref::net_loss(plan, p, x, t, batch, &grad, &dx);
    auto slope = [&](ref::Vec v, std::size_t i, bool of_input) {
      const double h = 1e-6;
      v[i] += h;
      const double up = of_input ? ref::net_loss(plan, p, v, t, batch) : ref::net_loss(plan, v, x, t, batch);
      v[i] -= 2 * h;
      const double down = of_input ? ref::net_loss(plan, p, v, t, batch) : ref::net_loss(plan, v, x, t, batch);
      return (up - down) / (2 * h);
    };
    int checked = 0, off = 0;
    for (std::size_t i = 0; i < p.size(); i += 3, ++checked)
      off += std::abs(slope(p, i, false) - grad[i]) > 1e-5 + 1e-3 * std::abs(grad[i]);
    for (std::size_t i = 0; i < x.size(); i += 2, ++checked)
      off += std::abs(slope(x, i, true) - dx[i]) > 1e-5 + 1e-3 * std::abs(dx[i]);
    // A few may sit on a ReLU's or a max's kink, where the slope is one-sided.
    EXPECT_LE(off, checked / 50) << off << " of " << checked << " off their slope";
  }
}

TEST(GraphNets, SequentialMatchesTheReference) {
  Rand r;
  for (const NetPlan& plan : graph_nets()) {
    for (const int64_t batch : {1, 3}) {
      SCOPED_TRACE(fmt::format("seed {}: a net of {} layers, batch {}", r.seed, plan.layers.size(), batch));
      const std::vector<float> p = init_params(plan, r.seed);
      const auto x = r.vec(batch * numel_of(plan.input)), t = r.vec(batch * numel_of(plan.output));
      ref::Vec grad, rdx;
      const double rloss = ref::net_loss(plan, ref::to_double(p), ref::to_double(x), ref::to_double(t), batch, &grad, &rdx);
      auto be = make_backend(cpu(), {});
      Sequential model(plan, 0, static_cast<int>(plan.layers.size()), *be);
      model.load_params(p);
      for (int step = 0; step < 2; ++step) {  // the second reuses every buffer
        const int64_t n = model.out_numel(batch);
        const float* y = model.forward(x.data(), batch);
        std::vector<float> dy(n), dx(x.size(), NAN);
        float loss_sum = 0;
        be->mse_loss_grad(n, y, t.data(), 2.0f / static_cast<float>(n), dy.data(), &loss_sum);
        model.backward(dy.data(), dx.data(), false);
        EXPECT_NEAR(loss_sum / n, rloss, 1e-5 * rloss);
        const ref::Mismatch g = ref::worst(model.grads().to_host(), grad, 1e-5, 1e-4);
        EXPECT_LE(g.excess, 0.0) << "parameter gradients: " << ref::describe(g);
        const ref::Mismatch d = ref::worst(dx, rdx, 1e-5, 1e-4);
        EXPECT_LE(d.excess, 0.0) << "input gradient: " << ref::describe(d);
      }
    }
  }
}

// A net with skips cut into stages run one after another: each stage takes its entries from the
// stages before it and gives them their gradients (summed over the stages that read them here).
struct Staged {
  double loss = 0;
  std::vector<float> grads, dx;
};
Staged run_stages(const NetPlan& plan, const std::vector<int>& cuts, Backend& be, const std::vector<float>& p,
                  const std::vector<float>& x, const std::vector<float>& t, int64_t batch) {
  std::vector<std::unique_ptr<Sequential>> st;
  std::vector<int> stage_of(plan.layers.size());
  for (std::size_t s = 0; s + 1 < cuts.size(); ++s) {
    st.push_back(std::make_unique<Sequential>(plan, cuts[s], cuts[s + 1], be));
    st.back()->load_params(p);
    for (int l = cuts[s]; l < cuts[s + 1]; ++l) stage_of[l] = static_cast<int>(s);
  }
  auto value = [&](int e) -> const float* {
    if (e == kNetInput) return x.data();
    const Sequential& m = *st[stage_of[e]];
    const auto& ex = m.boundary().exits;
    return m.exit_value(std::find(ex.begin(), ex.end(), e) - ex.begin());
  };
  const float* y = nullptr;
  for (auto& m : st) {
    std::vector<const float*> in;
    for (int e : m->boundary().entries) in.push_back(value(e));
    y = m->forward(in, batch);
  }
  const int64_t n = batch * numel_of(plan.output);
  std::vector<float> dy(n);
  float loss_sum = 0;
  be.mse_loss_grad(n, y, t.data(), 2.0f / static_cast<float>(n), dy.data(), &loss_sum);
  std::map<int, std::vector<float>> grad;  // per value: its gradient so far
  grad[static_cast<int>(plan.layers.size()) - 1] = dy;
  grad[kNetInput].assign(x.size(), 0.0f);
  Staged out;
  for (int s = static_cast<int>(st.size()) - 1; s >= 0; --s) {
    Sequential& m = *st[s];
    std::vector<const float*> dys;
    for (int e : m.boundary().exits) dys.push_back(grad.at(e).data());
    std::vector<std::vector<float>> parts;
    std::vector<float*> dxs;
    for (int e : m.boundary().entries) {
      parts.emplace_back(batch * numel_of(e == kNetInput ? plan.input : plan.layers[e].out), NAN);
      dxs.push_back(parts.back().data());
    }
    m.backward(dys, dxs, false);
    for (std::size_t k = 0; k < parts.size(); ++k) {
      std::vector<float>& g = grad[m.boundary().entries[k]];
      if (g.empty()) g.assign(parts[k].size(), 0.0f);
      for (std::size_t i = 0; i < g.size(); ++i) g[i] += parts[k][i];
    }
  }
  out.loss = loss_sum / static_cast<double>(n);
  out.grads.assign(static_cast<std::size_t>(plan.param_count), 0.0f);
  for (auto& m : st) {
    const std::vector<float> g = m->grads().to_host();
    std::copy(g.begin(), g.end(), out.grads.begin() + plan.layers[m->begin()].param_offset);
  }
  out.dx = grad[kNetInput];
  return out;
}

// Cut anywhere, a net with skips computes the same loss and gradients: skips crossing one stage
// and several, entries from the net's input, exits read within the stage and after it.
TEST(GraphNets, StagesPassingSkipsMatchTheReference) {
  Rand r;
  auto be = make_backend(cpu(), {});
  for (const NetPlan& plan : graph_nets()) {
    const int layers = static_cast<int>(plan.layers.size());
    const int64_t batch = 2;
    const std::vector<float> p = init_params(plan, r.seed);
    const auto x = r.vec(batch * numel_of(plan.input)), t = r.vec(batch * numel_of(plan.output));
    ref::Vec grad, rdx;
    const double rloss = ref::net_loss(plan, ref::to_double(p), ref::to_double(x), ref::to_double(t), batch, &grad, &rdx);
    std::vector<std::vector<int>> cuts;
    for (int c = 1; c < layers; ++c) cuts.push_back({0, c, layers});
    for (int k = 0; k < 6; ++k) {  // three and four stages at random cuts
      std::set<int> at{0, layers};
      while (static_cast<int>(at.size()) < 4 + k % 2) at.insert(static_cast<int>(r.i(1, layers - 1)));
      cuts.emplace_back(at.begin(), at.end());
    }
    for (const std::vector<int>& c : cuts) {
      SCOPED_TRACE(fmt::format("seed {}: {} layers cut at {}", r.seed, layers, fmt::join(c, ",")));
      const Staged got = run_stages(plan, c, *be, p, x, t, batch);
      EXPECT_NEAR(got.loss, rloss, 1e-5 * rloss);
      const ref::Mismatch g = ref::worst(got.grads, grad, 1e-5, 1e-4);
      EXPECT_LE(g.excess, 0.0) << "parameter gradients: " << ref::describe(g);
      const ref::Mismatch d = ref::worst(got.dx, rdx, 1e-5, 1e-4);
      EXPECT_LE(d.excess, 0.0) << "input gradient: " << ref::describe(d);
    }
  }
}

// Under bf16 the stages compute the whole net's function: the values they pass are bf16 already,
// so rounding them again at an entry changes nothing.
TEST(GraphNets, Bf16StagesMatchTheWholeNet) {
  SKIP_WITHOUT_BF16();
  Rand r;
  BackendOptions bo;
  bo.precision = Precision::Bf16;
  auto be = make_backend(cpu(), bo);
  for (const NetPlan& plan : {fixture_plan("resnet_small"), fixture_plan("unet_levels")}) {
    const int layers = static_cast<int>(plan.layers.size());
    const int64_t batch = 2;
    const std::vector<float> p = init_params(plan, r.seed);
    const auto x = r.vec(batch * numel_of(plan.input)), t = r.vec(batch * numel_of(plan.output));
    const Staged whole = run_stages(plan, {0, layers}, *be, p, x, t, batch);
    for (int c = 1; c < layers; c += 2) {
      SCOPED_TRACE(fmt::format("seed {}: {} layers cut at {}", r.seed, layers, c));
      const Staged got = run_stages(plan, {0, c, layers}, *be, p, x, t, batch);
      EXPECT_NEAR(got.loss, whole.loss, 1e-6 * whole.loss);
      // A gradient read by layers of both stages sums in another order: a bf16 rounding apart.
      const ref::Mismatch g = ref::worst(got.grads, ref::to_double(whole.grads), 1e-3, 2e-2);
      EXPECT_LE(g.excess, 0.0) << "parameter gradients: " << ref::describe(g);
    }
  }
}

// The values stages run one after another pass: each entry comes from the stage and exit that
// make it; a chain's boundary gradients take two buffers in turn; a skip's gradient is held from
// its last reader's backward to its maker's, and no buffer serves two values held at once.
TEST(GraphNets, StagesPassWhatTheyReadInBuffersHeldWhileLive) {
  const NetPlan chain = plan_net(great_net(8, 0.125));
  std::vector<int> every;
  for (int i = 0; i <= static_cast<int>(chain.layers.size()); ++i) every.push_back(i);
  EXPECT_EQ(plan_stage_gradients(chain, every).pool.size(), 2u);
  const NetPlan p = fixture_plan("unet_small");
  const int L = static_cast<int>(p.layers.size());
  for (const std::vector<int>& cuts : {std::vector<int>{0, 3, 7, 12, L}, std::vector<int>{0, 9, 10, 14, L}}) {
    SCOPED_TRACE(fmt::format("cut at {}", fmt::join(cuts, ",")));
    const StageGradients g = plan_stage_gradients(p, cuts);
    std::map<int, int> held;  // buffer -> the value whose gradient it holds
    for (int s = static_cast<int>(cuts.size()) - 2; s >= 0; --s) {
      const StageBoundary sb = stage_boundary(p, cuts[s], cuts[s + 1]);
      ASSERT_EQ(g.entry_from[s].size(), sb.entries.size());
      for (std::size_t k = 0; k < sb.entries.size(); ++k) {
        const auto [from, exit] = g.entry_from[s][k];
        if (sb.entries[k] == kNetInput) {
          EXPECT_EQ(from, -1);
          continue;
        }
        ASSERT_GE(from, 0);
        EXPECT_EQ(stage_boundary(p, cuts[from], cuts[from + 1]).exits.at(exit), sb.entries[k]);
        const int buf = g.entry_buf[s][k];
        ASSERT_GE(buf, 0);
        EXPECT_GE(g.pool[buf], numel_of(p.layers[sb.entries[k]].out));
        if (held.count(buf)) {
          EXPECT_EQ(held[buf], sb.entries[k]) << "buffer " << buf << " holds two values at once";
        }
        held[buf] = sb.entries[k];
        if (g.entry_tmp[s][k] >= 0) {
          EXPECT_FALSE(held.count(g.entry_tmp[s][k])) << "a part made over a held gradient";
        }
      }
      for (std::size_t k = 0; k < sb.exits.size(); ++k) {  // read here, then given back
        const int buf = g.exit_buf[s][k];
        if (sb.exits[k] == L - 1) {
          EXPECT_EQ(buf, -1);
          continue;
        }
        ASSERT_GE(buf, 0);
        EXPECT_EQ(held.at(buf), sb.exits[k]);
        held.erase(buf);
      }
    }
  }
}

// Backward's gradient buffers: each output's held from its first write to its layer's backward.
TEST(GraphNets, BackwardPoolHoldsWhatIsLiveAtOnce) {
  const NetPlan p = fixture_plan("unet_small");
  const GraphBackward g = plan_graph_backward(p, 0, static_cast<int>(p.layers.size()));
  int64_t total = 0;
  for (int64_t v : g.pool) total += v;
  // At the decoder's first concat (layer 9), the gradients of enc2 and the input-level skips are
  // held at once with the concat's own: at least those three; fewer than one buffer per layer.
  EXPECT_GE(total, numel_of(p.layers[9].out) + numel_of(p.layers[4].out) + numel_of(p.layers[1].out));
  int64_t every = 0;
  for (const LayerPlan& l : p.layers) every += numel_of(l.out);
  EXPECT_LT(total, every);
  // Every write's buffer holds its target's output gradient.
  for (std::size_t j = 0; j < g.writes.size(); ++j)
    for (const GraphBackward::Write& w : g.writes[j]) {
      if (w.target < 0) continue;
      EXPECT_GE(g.pool[w.buf], numel_of(p.layers[w.target].out)) << "layer " << j;
      if (w.tmp >= 0) {
        EXPECT_NE(w.tmp, w.buf) << "layer " << j;
      }
    }
}

// A pipeline runs over a net with skips, but not from a plan file (run --plan, project --plan).
TEST(GraphNets, PlanFilesOverSkipsAreRefused) {
  const NetPlan plan = plan_net(parse(kOddNet));
  StrategyOptions o;
  o.devices = 2;
  const Plan own = make_plan("pipeline", plan, o, 4);
  try {
    check_plan_file(own, plan, o, "p.json");
    ADD_FAILURE() << "a plan file over a net with skips was taken";
  } catch (const UsageError& e) {
    EXPECT_THAT(e.what(), HasSubstr("p.json: the net has skips (layer 2 (add) reads layer 1 and layer 1); a plan file "
                                    "runs only a chain's pipeline yet"));
  }
}

// Autocast keeps what the fp32 input makes before any conv or linear in fp32: an add of it, or a
// skip carrying it, would differ from the engine's rounding at the stage's edge, so bf16 refuses
// those and runs the rest.
TEST(GraphNets, Bf16RefusesSkipsAutocastKeepsInFp32) {
  auto refusal = [](const NetPlan& p) { return bf16_graph_refusal(p); };
  EXPECT_EQ(refusal(fixture_plan("resnet_small")), "");
  EXPECT_EQ(refusal(fixture_plan("unet_levels")), "");
  EXPECT_THAT(refusal(fixture_plan("unet_small")),
              HasSubstr("layer 13 (concat) reads the net's input, a value autocast keeps in fp32"));
  EXPECT_THAT(refusal(plan_net(parse(kOddNet))), HasSubstr("reads the net's input"));
  // Through a ReLU and a pooling, still fp32: its first reader, a conv, is fine, an add of it not;
  // a second reader is refused even without a join (the two gradients would sum in fp32).
  const NetPlan pooled = plan_net(parse(R"({"name": "p", "input": [2, 4, 4], "target": "random", "layers": [
    {"type": "relu"}, {"type": "maxpool2d"}, {"type": "conv2d", "out_channels": 2, "kernel_size": 1},
    {"type": "add", "inputs": [1, 2]}]})"));
  EXPECT_THAT(refusal(pooled), HasSubstr("layer 3 (add) reads layer 1, a value autocast keeps in fp32"));
  const NetPlan twice = plan_net(parse(R"({"name": "t", "input": [2, 4, 4], "target": "random", "layers": [
    {"type": "conv2d", "out_channels": 2, "kernel_size": 1}, {"type": "conv2d", "out_channels": 2, "kernel_size": 1,
    "inputs": ["input"]}, {"type": "add", "inputs": [0, 1]}]})"));
  EXPECT_THAT(refusal(twice), HasSubstr("layer 1 (conv2d) reads the net's input, a value autocast keeps in fp32"));
  StrategyOptions o;
  o.backend.precision = Precision::Bf16;
  try {
    make_plan("ddp", fixture_plan("unet_small"), o, 4);
    ADD_FAILURE() << "planned";
  } catch (const UsageError& e) {
    EXPECT_THAT(e.what(), HasSubstr("ddp: precision bf16: layer 13 (concat)"));
  }
}

// Under bf16, the strategies whose workers run the whole net and the pipelines train a net with
// skips as regular does: the same per-sample values (fsdp's units and the stages pass bf16
// values, exact at their edges; a chunked schedule's stages on one worker read them in place),
// the weight gradients summed in fp32 (tests/test_bf16_net.cpp holds regular to PyTorch's
// autocast).
TEST(GraphNets, Bf16WholeNetStrategiesFollowRegular) {
  SKIP_WITHOUT_BF16();
  for (const char* name : {"resnet_small", "unet_levels"}) {
    SCOPED_TRACE(name);
    const NetSpec net = load_net_json((test::source_dir() / "tests/fixtures/graph" / name / "net.json").string());
    const NetPlan plan = plan_net(net);
    Rand r;
    const int64_t batch = 4;
    const std::vector<float> x = r.vec(batch * numel_of(plan.input));
    const std::vector<float> t = net.target == Target::Input ? x : r.vec(batch * numel_of(plan.output));
    auto train = [&](const std::string& strategy, int devices) {
      StrategyOptions o;
      o.devices = devices;
      o.backend.threads = 1;
      o.backend.precision = Precision::Bf16;
      auto s = make_strategy(strategy, o);
      s->setup(plan, init_params(plan, 3), net.adam);
      s->load_batch(x, t, batch);
      std::vector<double> losses;
      for (int k = 0; k < 3; ++k) s->step(), losses.push_back(s->loss());
      return std::make_pair(losses, s->params());
    };
    const auto [want, want_p] = train("regular", 1);
    for (const auto& [strategy, devices] :
         {std::pair{"dp", 2}, {"ddp", 2}, {"ddp", 4}, {"fsdp", 2}, {"zero2-prefetch", 3}, {"hsdp2x2", 4},
          {"pipeline-1f1b", 3}, {"pipeline-interleaved", 2}, {"pipeline-zbv", 2}, {"pipeline-zbv", 3}}) {
      SCOPED_TRACE(fmt::format("{} x{}", strategy, devices));
      const auto [got, got_p] = train(strategy, devices);
      for (std::size_t k = 0; k < want.size(); ++k) EXPECT_NEAR(got[k], want[k], 1e-5 * std::abs(want[k])) << "step " << k;
      double worst = 0;
      for (std::size_t i = 0; i < got_p.size(); ++i) worst = std::max(worst, double(std::abs(got_p[i] - want_p[i])));
      EXPECT_LE(worst, 1e-5);
    }
  }
}

}  // namespace
}  // namespace pb
