// Model parallelism: mp and the pipeline schedules (GPipe, 1F1B, recompute) match `regular`, what
// each holds, and how the stages are balanced.
#include "tests/test_strategies_support.h"

namespace pb {
namespace {

using namespace pb::strategies_test;

TEST(Strategies, MpMatchesRegular) {
  check_equivalence("mp", options(1), {7});
}

TEST(Strategies, PipelineMatchesRegular) {
  StrategyOptions o = options(1);
  o.micro_batches = 4;  // 7 -> 2,2,2,1
  check_equivalence("pipeline", o, {7});
  o.micro_batches = 3;  // 7 -> 3,3,1
  check_equivalence("pipeline", o, {7}, false);
}

// Every schedule x recompute, uneven micro-batches (7 -> 2,2,2,1 and 3,3,1), and a second batch
// of another size (the activation slots are resized).
TEST(Strategies, PipelineSchedulesAndRecomputeMatchRegular) {
  for (const char* s : {"pipeline-1f1b", "pipeline-recompute", "pipeline-1f1b-recompute"}) {
    StrategyOptions o = options(1);
    o.micro_batches = 4;
    check_equivalence(s, o, {7});
    o.micro_batches = 3;
    check_equivalence(s, o, {7, 5}, false);
  }
}

// The options select the same schedules as the registered names.
TEST(Strategies, PipelineOptionsNameTheVariant) {
  StrategyOptions o = options(2);
  o.schedule = Schedule::OneFOneB;
  o.recompute = true;
  EXPECT_EQ(make_strategy("pipeline", o)->name(), "pipeline-1f1b-recompute");
  EXPECT_EQ(make_strategy("pipeline-1f1b", options(2))->name(), "pipeline-1f1b");
  EXPECT_EQ(make_strategy("mp", o)->name(), "mp");
}

// Peak memory per stage at M = 8: GPipe holds the activations of all 8 micro-batches, 1F1B at
// most P - s on stage s, recompute only the stage inputs and one micro-batch's activations.
TEST(Strategies, OneFOneBAndRecomputeHoldLessThanGPipe) {
  const NetSpec net = great_net(16, 0.25);
  for (int p = 2; p <= 4; ++p) {
    SCOPED_TRACE(fmt::format("{} stages", p));
    StrategyOptions o = options(p);
    o.micro_batches = 8;
    auto peak = peaks_per_worker({"pipeline", "pipeline-1f1b", "pipeline-recompute", "pipeline-1f1b-recompute"}, o, net);
    for (int st = 0; st < p; ++st) {
      SCOPED_TRACE(fmt::format("stage {}", st));
      EXPECT_LT(peak["pipeline-1f1b"][st], peak["pipeline"][st]);
      EXPECT_LT(peak["pipeline-recompute"][st], peak["pipeline"][st]);
      EXPECT_LE(peak["pipeline-1f1b-recompute"][st], peak["pipeline-1f1b"][st]);
    }
  }
}

TEST(Strategies, ExplicitBalance) {
  const NetSpec net = small_great_net();  // 28 layers: conv, relu, conv, relu, ...
  const std::vector<std::vector<int>> balances = {{1, 27}, {3, 25}, {5, 9, 14}, {7, 7, 7, 7}, {2, 1, 1, 24}};
  for (const auto& b : balances) {
    for (const char* s : {"mp", "pipeline"}) {
      StrategyOptions o = options(static_cast<int>(b.size()));
      o.balance = b;
      SCOPED_TRACE(fmt::format("{} --balance {}", s, fmt::join(b, ",")));
      const Trained r = train(s, o, net, {7});
      expect_matches(r, reference(net, {7}));
      int at = 0;
      for (std::size_t i = 0; i < b.size(); ++i) {
        EXPECT_EQ(r.stats.workers[i].layer_begin, at);
        EXPECT_EQ(r.stats.workers[i].layer_end, at + b[i]);
        at += b[i];
      }
    }
  }
}

TEST(Strategies, StagesBalancedByFlopsKeepReluWithItsConv) {
  const NetPlan plan = plan_net(small_great_net());
  for (int p = 1; p <= 6; ++p) {
    const auto st = split_stages(plan, p, {}, "mp");
    ASSERT_EQ(static_cast<int>(st.size()), p);
    EXPECT_EQ(st.front().first, 0);
    EXPECT_EQ(st.back().second, 28);
    for (int s = 0; s < p; ++s) {
      EXPECT_LT(st[s].first, st[s].second);
      EXPECT_EQ(st[s].first % 2, 0) << "stage " << s << " starts with a ReLU";
      if (s > 0) {
        EXPECT_EQ(st[s].first, st[s - 1].second);
      }
    }
  }
  // The largest stage is no bigger than any other contiguous split would force: for 2 stages,
  // compare with every cut.
  const auto two = split_stages(plan, 2, {}, "mp");
  auto flops = [&](int b, int e) {
    double f = 0;
    for (int i = b; i < e; ++i) f += plan.layers[i].forward_flops;
    return f;
  };
  const double mine = std::max(flops(0, two[0].second), flops(two[0].second, 28));
  for (int cut = 1; cut < 28; ++cut) EXPECT_LE(mine, std::max(flops(0, cut), flops(cut, 28)));
  // Too few producers for the stages: the ReLU gets a stage of its own.
  NetSpec tiny = linear_net();
  tiny.layers.push_back(LayerSpec{LayerType::ReLU});
  EXPECT_EQ(split_stages(plan_net(tiny), 2, {}, "mp"), (std::vector<std::pair<int, int>>{{0, 1}, {1, 2}}));
}

}  // namespace
}  // namespace pb
