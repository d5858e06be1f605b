// The projection prices the plan the run runs (projection/plan_price.h): every strategy's plan is
// priced with the bytes it moves, and each disagreement issue 36 found between the projection's old
// copy of the strategies and the runs is gone -- ddp's first bucket, 1F1B's recompute, dp x pp's
// micro-batches and refusals, --balance, pipeline memory and waits, tp's layout copies, and the
// dp x pp variants.
#include <set>

#include "projection/plan_price.h"
#include "strategies/plan_gen.h"
#include "tests/plan_cases.h"
#include "tests/support.h"
#include "tests/test_projection_support.h"

namespace pb {
namespace {

using namespace projection_test;

StrategyOptions options(int devices, int micro = 1) {
  StrategyOptions o;
  o.devices = devices;
  o.micro_batches = micro;
  return o;
}

TEST(ProjectionPlans, EveryStrategysPlanIsPricedWithTheBytesItMoves) {
  const NetPlan net = test::plan_test_net();
  const pj::Profile prof = profile_of(net);
  const pj::Machine m = machine();
  for (const test::PlanCase& k : test::plan_cases()) {
    pj::Config c = config(k.strategy, k.devices, test::kPlanBatch);
    c.micro_batches = k.micro;
    const StrategyOptions o = test::plan_options(k);
    c.first_bucket_bytes = static_cast<double>(o.first_bucket_bytes), c.bucket_bytes = static_cast<double>(o.bucket_bytes);
    const Plan plan = make_plan(k.strategy, net, o, test::kPlanBatch);
    const pj::Prediction r = pj::predict(prof, m, c);
    ASSERT_TRUE(r.feasible) << k.label() << ": " << r.reason;
    // What the workers send: each send's payload, each collective's on every member.
    double bytes = 0, busiest = 0;
    for (int w = 0; w < plan.workers; ++w) {
      double compute = 0;
      for (const Action& a : plan.actions[w]) {
        if (a.kind == ActionKind::Send) bytes += static_cast<double>(a.bytes);
        if (a.kind == ActionKind::Collective && plan.groups[a.group].members.size() > 1) bytes += static_cast<double>(a.bytes);
        if (a.kind == ActionKind::Forward || a.kind == ActionKind::Recompute) compute += 1;
      }
      busiest = std::max(busiest, compute);
    }
    EXPECT_NEAR(r.comm_bytes, bytes, 1e-9 * bytes) << k.label();
    EXPECT_GT(busiest, 0) << k.label();
    EXPECT_GE(r.step_s, r.compute_s) << k.label();
  }
}

TEST(ProjectionPlans, DdpFirstBucketAsTheRun) {
  // Four layers of 148 parameters (592 B), buckets of 592 B. The run's first bucket (1 MiB by
  // default) takes all four: one all-reduce. The old model cut every bucket at 592 B.
  pj::Machine m = machine();
  m.overlap = false;  // every all-reduce on the critical path
  pj::Config c = config("ddp", 2, 8);
  c.bucket_bytes = 592;
  const double compute = 4 * (0.004 + 0.004);
  auto ar = [&](double b) { return pj::collective_cost(m, CollKind::AllReduce, b, 2, false).seconds; };
  EXPECT_NEAR(pj::predict(uniform(), m, c).step_s, compute + ar(4 * 592), 1e-9);
  c.first_bucket_bytes = 1184;  // the last two layers, then one each
  EXPECT_NEAR(pj::predict(uniform(), m, c).step_s, compute + ar(1184) + 2 * ar(592), 1e-9);
  c.first_bucket_bytes = 592;
  EXPECT_NEAR(pj::predict(uniform(), m, c).step_s, compute + 4 * ar(592), 1e-9);
}

TEST(ProjectionPlans, OneFOneBRecomputesOnlyWhereTheRunDoes) {
  // One micro-batch over four stages: each stage's backward follows its own forward, so nothing
  // is recomputed (the old model charged stages 0-2 a forward each).
  pj::Config f = config("pipeline-1f1b", 4, 8), r = config("pipeline-1f1b-recompute", 4, 8);
  f.micro_batches = r.micro_batches = 1;
  const pj::Machine m = free_links();
  EXPECT_NEAR(pj::predict(uniform(), m, r).step_s, pj::predict(uniform(), m, f).step_s, 1e-12);
  // Two: stage 0 (F0 F1 B0 B1) recomputes both, the last stage (F0 B0 F1 B1) neither -- as the
  // plan's Recompute actions say. A forward of 4 samples is 4 ms.
  f.micro_batches = r.micro_batches = 2;
  const pj::Prediction pf = pj::predict(uniform(), m, f), pr = pj::predict(uniform(), m, r);
  EXPECT_NEAR(pr.compute_s - pf.compute_s, 2 * 0.004, 1e-9);
  StrategyOptions o = options(4, 2);
  const Plan plan = make_plan("pipeline-1f1b-recompute", pj::net_of(uniform()), o, 8);
  auto recomputes = [&](int w) {
    return std::count_if(plan.actions[w].begin(), plan.actions[w].end(), [](const Action& a) { return a.kind == ActionKind::Recompute; });
  };
  EXPECT_EQ(recomputes(0), 2);
  EXPECT_EQ(recomputes(3), 0);
}

TEST(ProjectionPlans, DpxppMicroBatchesAndRefusalsAsTheRun) {
  const pj::Machine m = free_links();
  const NetPlan net = pj::net_of(uniform());
  // Batch 5 over two replicas: pieces of 3 and 2. The run's default micro-batches (capped at the
  // smaller piece): 2 per replica, cut by torch.chunk into [2, 1] and [1, 1] -- not the old
  // model's [1, 1, 1].
  pj::Config c = config("dp2xpp2", 4, 5);
  c.micro_batches = 4;
  c.cap_micro_batches = true;
  const pj::Prediction capped = pj::predict(uniform(), m, c);
  ASSERT_TRUE(capped.feasible) << capped.reason;
  EXPECT_EQ(pj::batch_pieces(net, c), (std::vector<int64_t>{1, 2, 5}));
  // Free links: the replica of 3 samples in [2, 1] sets the pace, as a 2-stage pipeline on 3.
  pj::Config pipe = config("pipeline", 2, 3);
  pipe.micro_batches = 2;
  EXPECT_NEAR(capped.step_s, pj::predict(uniform(), m, pipe).step_s, 1e-12);
  // Memory as the run holds it: two micro-batches in flight, not four.
  pj::Config two = c;
  two.micro_batches = 2;
  two.cap_micro_batches = false;
  EXPECT_NEAR(capped.peak_bytes, pj::predict(uniform(), m, two).peak_bytes, 1e-6);
  // --micro-batches 3 given (not capped): the run refuses the replica of 2 samples, and so does
  // the projection, in the run's words.
  c.micro_batches = 3;
  c.cap_micro_batches = false;
  const pj::Prediction refused = pj::predict(uniform(), m, c);
  EXPECT_FALSE(refused.feasible);
  expect_usage_error([&] { make_plan("dp2xpp2", net, options(4, 3), 5); }, {refused.reason});
}

TEST(ProjectionPlans, BalanceSplitsStagesAsTheRun) {
  const pj::Machine m = free_links();
  const NetPlan net = pj::net_of(uniform());
  using Ranges = std::vector<std::pair<int, int>>;
  pj::Config c = config("pipeline", 2, 8);
  c.micro_batches = 4;
  EXPECT_EQ(pj::stage_ranges(net, c, nullptr), (Ranges{{0, 2}, {2, 4}}));
  pj::set_balance(c, "1,3", "--balance");
  EXPECT_EQ(pj::stage_ranges(net, c, nullptr), (Ranges{{0, 1}, {1, 4}}));
  // GPipe, 4 micro-batches of 2 (a layer's forward and backward 2 ms each): stage 1's three layers
  // set the pace: stage 0's first forward, four forwards and four backwards of stage 1, stage 0's
  // last backward.
  EXPECT_NEAR(pj::predict(uniform(), m, c).step_s, 0.002 + 4 * 0.006 + 4 * 0.006 + 0.002, 1e-9);
  // By time: layer 0 five times slower forward than the others -- alone on its stage.
  json j = fixture_json("uniform.json");
  for (json& t : j["layers"][0]["forward_s"]) t = t.get<double>() * 5;
  const pj::Profile slow = pj::parse_profile(j.dump(), "slow.json");
  pj::set_balance(c, "time", "--balance");
  EXPECT_EQ(pj::stage_ranges(net, c, &slow), (Ranges{{0, 1}, {1, 4}}));
  pj::set_balance(c, "", "--balance");
  EXPECT_EQ(pj::stage_ranges(net, c, &slow), (Ranges{{0, 2}, {2, 4}}));  // FLOPs: equal
  // A balance the run refuses is refused here.
  pj::set_balance(c, "1,1", "--balance");
  EXPECT_FALSE(pj::predict(uniform(), m, c).feasible);
  expect_usage_error([&] { pj::set_balance(c, "1,x", "--balance"); }, {"--balance", "1,x"});
}

TEST(ProjectionPlans, PipelineWaitsAndMemoryAreTheRunsSlots) {
  // On a machine that runs communication beside compute, every started send and receive goes on
  // its lane, and compute waits for it exactly where the plan waits.
  const pj::Profile p = uniform();
  const pj::Machine m = machine();
  for (const char* name : {"pipeline", "pipeline-1f1b", "pipeline-zb", "pipeline-1f1b-recompute"}) {
    pj::Config c = config(name, 4, 8);
    c.micro_batches = 4;
    const Plan plan = pj::plan_for(p, c);
    pj::Options o;
    pj::StepBuilder bl(p, m, c.devices, o, 1);
    const pj::PricedPlan priced = pj::price_plan(plan, p, m, bl);
    for (int w = 0; w < plan.workers; ++w) {
      std::size_t waits = 0, signals = 0;
      for (const Action& a : plan.actions[w]) waits += a.kind == ActionKind::Wait ? a.waits.size() : 0;
      for (const pj::Op& op : priced.actors[w].ops) signals += op.kind == pj::Op::Wait;
      EXPECT_EQ(signals, waits) << name << " worker " << w;
    }
  }
  pj::Config g = config("pipeline", 4, 8), f = config("pipeline-1f1b", 4, 8);
  g.micro_batches = f.micro_batches = 8;
  EXPECT_LT(pj::predict(p, m, f).peak_bytes, pj::predict(p, m, g).peak_bytes);
  // ZB-H1 from its plan: B's chain without W's time, so a shorter step than 1F1B's; P slots on
  // every stage (stage 0's under 1F1B) and the kept output gradients, more than 1F1B's peak.
  pj::Config z = config("pipeline-zb", 4, 8);
  z.micro_batches = 8;
  const pj::Prediction pz = pj::predict(p, m, z), pf = pj::predict(p, m, f);
  EXPECT_LT(pz.step_s, pf.step_s);
  EXPECT_GE(pz.peak_bytes, pf.peak_bytes);
  EXPECT_LT(pz.peak_bytes, pj::predict(p, m, g).peak_bytes);
}

// The distinct layer ranges a plan's workers run forward: its stages, or an interleaved plan's chunks.
std::set<std::pair<int, int>> forward_ranges(const Plan& plan) {
  std::set<std::pair<int, int>> out;
  for (const std::vector<Action>& list : plan.actions)
    for (const Action& a : list)
      if (a.kind == ActionKind::Forward) out.insert({a.layer_begin, a.layer_end});
  return out;
}

// Interleaved 1F1B from its plan: two workers of two one-layer chunks each; on free links a shorter step than 1F1B's, the bubble (P-1)/(VM) of
// the ideal step against (P-1)/M, and a higher peak (more micro-batches' chunks in flight).
TEST(ProjectionPlans, InterleavedShortensOneFOneBsBubble) {
  const pj::Profile p = uniform();
  const pj::Machine m = free_links();
  pj::Config i = config("pipeline-interleaved", 2, 8), f = config("pipeline-1f1b", 2, 8);
  i.micro_batches = f.micro_batches = 4;
  EXPECT_EQ(forward_ranges(pj::plan_for(p, i)), (std::set<std::pair<int, int>>{{0, 1}, {1, 2}, {2, 3}, {3, 4}}));
  const pj::Prediction pi = pj::predict(p, m, i), pf = pj::predict(p, m, f);
  ASSERT_TRUE(pi.feasible);
  EXPECT_LT(pi.step_s, pf.step_s);
  EXPECT_GT(pi.peak_bytes, pf.peak_bytes);
}

// --virtual-stages as run takes it: V chunks per worker, priced and its memory estimated.
TEST(ProjectionPlans, InterleavedTakesTheRunsVirtualStages) {
  const pj::Profile p = profile_of(plan_net(test::linear_relu_pairs("pairs", 8, 6)));
  const pj::Machine m = free_links();
  pj::Config c = config("pipeline-interleaved", 2, 8);
  c.micro_batches = 4;
  auto stages = [&](int v) {
    c.virtual_stages = v;
    return forward_ranges(pj::plan_for(p, c)).size();
  };
  EXPECT_EQ(stages(2), 4u);
  EXPECT_EQ(stages(3), 6u);
  const pj::Prediction three = pj::predict(p, m, c);
  ASSERT_TRUE(three.feasible) << three.reason;
  c.virtual_stages = 7;  // 14 stages of 12 layers: refused as run refuses it
  EXPECT_FALSE(pj::predict(p, m, c).feasible);
}

// A bf16 profile's plans are the bf16 run's: pipeline activations and tp's gathers at half the bytes.
TEST(ProjectionPlans, ABf16ProfilePricesTheBf16RunsTransfers) {
  pj::Profile p = uniform();
  const pj::Machine m = free_links();
  for (const char* s : {"pipeline", "tp"}) {
    pj::Config c = config(s, 2, 8);
    c.micro_batches = 2;
    p.precision = "fp32";
    const double fp32 = pj::predict(p, m, c).comm_bytes;
    p.precision = "bf16";
    const double bf16 = pj::predict(p, m, c).comm_bytes;
    EXPECT_GT(fp32, 0) << s;
    EXPECT_LT(bf16, fp32) << s;
    if (std::string(s) == "pipeline") {
      EXPECT_EQ(2 * bf16, fp32);
    }
  }
}

TEST(ProjectionPlans, TpLayoutCopiesArePriced) {
  pj::Machine m = free_links();
  const pj::Config c = config("tp", 4, 4);
  const double without = pj::predict(uniform(), m, c).step_s;
  m.copy_bytes_per_s = 1e6;
  const Plan plan = make_plan("tp", pj::net_of(uniform()), options(4), 4);
  double bytes = 0;
  for (const Action& a : plan.actions[0]) bytes += a.kind == ActionKind::Copy ? static_cast<double>(a.bytes) : 0;
  ASSERT_GT(bytes, 0);
  EXPECT_NEAR(pj::predict(uniform(), m, c).step_s - without, bytes / 1e6, 1e-9);
  // A profile timed as tp runs its layers holds the copies in its layer times: not priced twice.
  json j = fixture_json("uniform.json");
  j["context"]["tp_relu_and_copies"] = true;
  EXPECT_NEAR(pj::predict(pj::parse_profile(j.dump(), "tp.json"), m, c).step_s, without, 1e-12);
}

TEST(ProjectionPlans, DpxppVariantsAreProjected) {
  const pj::Machine m = free_links();
  for (const std::string v : {"", "-1f1b", "-recompute", "-1f1b-recompute"}) {
    pj::Config h = config("dp2xpp2" + v, 4, 8), pipe = config("pipeline" + v, 2, 4);
    h.micro_batches = pipe.micro_batches = 2;
    const pj::Prediction r = pj::predict(uniform(), m, h);
    ASSERT_TRUE(r.feasible) << v << ": " << r.reason;
    EXPECT_NEAR(r.step_s, pj::predict(uniform(), m, pipe).step_s, 1e-12) << v;  // each replica, half the batch
  }
  const pj::Sweep sweep{{2}, {"gpipe", "1f1b"}, {}, true};
  std::vector<std::string> names;
  for (const pj::Config& c : pj::configurations("dpxpp", 4, 8, sweep)) names.push_back(c.strategy);
  EXPECT_EQ(names, (std::vector<std::string>{"dp2xpp2", "dp2xpp2-recompute", "dp2xpp2-1f1b", "dp2xpp2-1f1b-recompute"}));
  EXPECT_EQ(pj::configurations("dp2xpp2-1f1b", 4, 8, sweep).size(), 1u);
}

TEST(ProjectionPlans, WhatValidateTimesIsReadOffThePlan) {
  // --validate times layers as the plan runs them: one Sequential, layer by layer (fsdp's units,
  // tp's slices with their ReLUs and copies), or stage by stage. One worker of tp or fsdp runs the
  // whole net as one Sequential: timed so (the old name-based rule timed it layer by layer).
  const NetPlan net = test::plan_test_net();
  struct Want {
    const char* strategy;
    int devices;
    pj::Timing::Kind kind;
    int slices, stages;
    bool tp;
  };
  using K = pj::Timing::Kind;
  for (const Want& w : std::vector<Want>{{"regular", 1, K::Whole, 1, 1, false},  {"ddp", 2, K::Whole, 1, 1, false},
                                         {"fsdp", 1, K::Whole, 1, 1, false},     {"fsdp", 3, K::Layers, 1, 1, false},
                                         {"zero2", 2, K::Layers, 1, 1, false},   {"tp", 1, K::Whole, 1, 1, false},
                                         {"tp", 3, K::Layers, 3, 1, true},       {"dp2xtp2", 4, K::Layers, 2, 1, true},
                                         {"mp", 1, K::Whole, 1, 1, false},       {"pipeline-1f1b", 3, K::Stages, 1, 3, false},
                                         {"dp2xpp2-recompute", 4, K::Stages, 1, 2, false}}) {
    pj::Config c = config(w.strategy, w.devices, test::kPlanBatch);
    c.micro_batches = 2;
    const pj::Timing t = pj::timing_of(net, c);
    EXPECT_EQ(t.kind, w.kind) << w.strategy << " x" << w.devices;
    EXPECT_EQ(t.slices, w.slices) << w.strategy << " x" << w.devices;
    EXPECT_EQ(t.stages, w.stages) << w.strategy << " x" << w.devices;
    EXPECT_EQ(t.tp, w.tp) << w.strategy << " x" << w.devices;
  }
}

}  // namespace
}  // namespace pb
