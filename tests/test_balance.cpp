// mp/pipeline stage splits besides FLOPs and lists: by per-layer weights (time), the time split as
// the strategies run it, the seed's split of great_net, and the flags that ask for them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "engine/check.h"
#include "strategies/stages.h"
#include "tests/cli_fixture.h"
#include "workloads/workload.h"

namespace pb {
namespace {

using ::testing::HasSubstr;
using Ranges = std::vector<std::pair<int, int>>;
using By = StrategyOptions::BalanceBy;

void expect_valid_split(const NetPlan& plan, const Ranges& r, int stages) {
  ASSERT_EQ(static_cast<int>(r.size()), stages);
  EXPECT_EQ(r.front().first, 0);
  EXPECT_EQ(r.back().second, static_cast<int>(plan.layers.size()));
  for (int s = 0; s < stages; ++s) {
    EXPECT_LT(r[s].first, r[s].second) << "stage " << s;
    if (s > 0) {
      EXPECT_EQ(r[s].first, r[s - 1].second);
    }
    EXPECT_GT(plan.layers[r[s].first].forward_flops, 0) << "stage " << s << " starts with a ReLU";
  }
}

TEST(Balance, ByWeightsMinimisesTheLargestStage) {
  const NetPlan plan = plan_net(great_net(8, 0.125));  // 28 layers, convs at even indices
  std::mt19937_64 gen(7);
  std::uniform_real_distribution<double> u(0.01, 1.0);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<double> w(28);
    for (double& x : w) x = u(gen);
    auto sum = [&](int b, int e) {
      double s = 0;
      for (int i = b; i < e; ++i) s += w[i];
      return s;
    };
    const Ranges two = split_stages_by(plan, 2, w, "mp");
    expect_valid_split(plan, two, 2);
    const double mine = std::max(sum(0, two[0].second), sum(two[0].second, 28));
    for (int cut = 2; cut < 28; cut += 2) {
      EXPECT_LE(mine, std::max(sum(0, cut), sum(cut, 28)) + 1e-12) << cut;
    }
    const Ranges three = split_stages_by(plan, 3, w, "pipeline");
    expect_valid_split(plan, three, 3);
    const double mine3 = std::max({sum(0, three[0].second), sum(three[1].first, three[1].second), sum(three[2].first, 28)});
    for (int a = 2; a < 28; a += 2)
      for (int b = a + 2; b < 28; b += 2) {
        EXPECT_LE(mine3, std::max({sum(0, a), sum(a, b), sum(b, 28)}) + 1e-12);
      }
  }
  // Weights, not FLOPs, decide: all the time in the last conv puts it alone in the last stage.
  std::vector<double> w(28, 1e-3);
  w[26] = 1;
  EXPECT_EQ(split_stages_by(plan, 2, w, "mp"), (Ranges{{0, 26}, {26, 28}}));
  EXPECT_NE(split_stages(plan, 2, {}, "mp"), (Ranges{{0, 26}, {26, 28}}));
}

TEST(Balance, ByTimeProfilesTheNetAndSplitsIt) {
  const NetPlan plan = plan_net(great_net(16, 0.25));
  StrategyOptions o;
  o.backend.threads = 1;
  o.balance_by = By::Time;
  o.profile_batch = 4;
  for (int stages : {2, 3}) expect_valid_split(plan, stage_ranges(plan, stages, o, 2, cpu(), "pipeline"), stages);
  // A list still wins over the mode.
  o.balance = {4, 24};
  EXPECT_EQ(stage_ranges(plan, 2, o, 1, cpu(), "mp"), (Ranges{{0, 4}, {4, 28}}));
}

TEST(Balance, SeedSplitsGreatNetAfterThe512ChannelLayer) {
  for (double width : {1.0, 0.25}) {
    const NetPlan plan = plan_net(great_net(8, width));
    StrategyOptions o;
    o.balance_by = By::Seed;
    o.seed_first_stage = kGreatNetSeedFirstStage;
    const Ranges r = stage_ranges(plan, 2, o, 1, cpu(), "mp");
    EXPECT_EQ(r, (Ranges{{0, 12}, {12, 28}}));
    // The first stage ends with the 512 (x width) channel conv and its ReLU; the second starts
    // with the conv to 1024 (x width) channels, as the seed's network1 / network2.
    EXPECT_EQ(plan.layers[10].spec.type, LayerType::Conv2d);
    EXPECT_EQ(plan.layers[10].out[0], std::llround(512 * width));
    EXPECT_EQ(plan.layers[11].spec.type, LayerType::ReLU);
    EXPECT_EQ(plan.layers[12].out[0], std::llround(1024 * width));
    try {
      stage_ranges(plan, 3, o, 1, cpu(), "pipeline");
      ADD_FAILURE() << "3 stages accepted";
    } catch (const UsageError& e) {
      EXPECT_THAT(e.what(), HasSubstr("2-stage split"));
      EXPECT_THAT(e.what(), HasSubstr("3 stage(s)"));
    }
    o.seed_first_stage = 0;
    EXPECT_THROW(stage_ranges(plan, 2, o, 1, cpu(), "mp"), UsageError);
  }
}

class BalanceCli : public test::CliTest {
 protected:
  BalanceCli() : CliTest("parbench_balance_") {}
};

TEST_F(BalanceCli, TimeAndSeedTrainAndBadValuesAreRefused) {
  const std::string small = "train --device-kind cpu --image 8 --width 0.125 --batch 4 --iterations 1 --warmup 0 --threads 1";
  for (const char* s : {"mp", "pipeline"})
    for (const char* b : {"time", "seed"}) {
      const test::Result r = parbench(fmt::format("{} --strategy {} --devices 2 --balance {}", small, s, b));
      EXPECT_EQ(r.code, 0) << s << " " << b << ": " << r.err;
      EXPECT_THAT(r.out, HasSubstr("median")) << s << " " << b;
    }
  test::Result r = parbench(small + " --strategy mp --devices 3 --balance seed");
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--balance seed is the seed's 2-stage split"));
  r = parbench("train --device-kind cpu --workload linear --strategy mp --devices 2 --balance seed");
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("workload 'linear' has none"));
  r = parbench(small + " --strategy mp --devices 2 --balance flops");
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--balance expects layers per stage (e.g. 14,14), time or seed, got 'flops'"));
}

}  // namespace
}  // namespace pb
