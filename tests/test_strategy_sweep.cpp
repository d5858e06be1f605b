// What project sweeps of each strategy, its rows' labels, its unit class and its memory layout,
// all read off the registry's lines (strategies/sweep.h), and each strategy's memory from its plan (plan/memory.h).
#include <gtest/gtest.h>

#include <algorithm>

#include "engine/check.h"
#include "engine/net.h"
#include "plan/memory.h"
#include "strategies/plan_gen.h"
#include "strategies/sweep.h"
#include "workloads/workload.h"

namespace pb {
namespace {

Setting setting(const std::string& name, int micro = 1) {
  Setting s;
  s.strategy = name;
  s.micro_batches = micro;
  return s;
}

TEST(StrategySweep, AllIsEveryRegisteredWordButTheVariants) {
  std::vector<std::string> expected;
  for (const StrategyInfo& i : strategy_infos()) {
    const ProjectionFacts* f = projection_facts_of(i.name);
    ASSERT_NE(f, nullptr) << i.name;
    EXPECT_TRUE(is_swept(i.name)) << i.name;
    if (f->projected.variant_of.empty()) expected.push_back(i.name);
  }
  EXPECT_EQ(swept_strategies(), expected);
  EXPECT_FALSE(is_swept("no-such"));
  EXPECT_TRUE(is_swept("dp2xpp2-1f1b") && is_swept("dp2xtp2") && is_swept("hsdp2x2"));  // members
  EXPECT_TRUE(is_family(kHybridFamily) && !is_family("dp2xpp2"));
}

TEST(StrategySweep, EveryVariantIsItsBaseWithItsOptionsAndBack) {
  int variants = 0;
  for (const ProjectionFacts& f : projection_facts()) {
    if (f.projected.variant_of.empty()) continue;
    ++variants;
    const Setting base = as_swept(setting(f.name, 4));
    EXPECT_EQ(base.strategy, f.projected.variant_of) << f.name;
    EXPECT_EQ(base.micro_batches, 4) << f.name;
    EXPECT_EQ(run_name(base), f.name);
    // By name it sweeps the micro-batch counts alone, each at most the batch.
    const std::vector<Setting> v = sweep_settings(f.name, 2, 4, {{2, 4, 8}, {Schedule::GPipe}, {}, true});
    ASSERT_EQ(v.size(), 2u) << f.name;
    for (const Setting& s : v) EXPECT_EQ(run_name(s), f.name);
  }
  EXPECT_GE(variants, 3);
}

TEST(StrategySweep, LabelsAndOptionsFollowWhatTheLineSweeps) {
  Setting ddp = setting("ddp");
  ddp.bucket_bytes = 1 << 20;
  EXPECT_EQ(setting_label(ddp), "ddp (1 MiB buckets)");
  EXPECT_EQ(setting_options(ddp), std::vector<std::string>{"bucket_mb:1"});
  Setting pipe = setting("pipeline", 8);
  pipe.schedule = Schedule::OneFOneB;
  pipe.recompute = true;
  EXPECT_EQ(setting_label(pipe), "pipeline (M=8, 1f1b, recompute)");
  EXPECT_EQ(setting_options(pipe), (std::vector<std::string>{"micro_batches:8", "schedule:1f1b", "recompute:1"}));
  EXPECT_EQ(run_name(pipe), "pipeline-1f1b-recompute");
  EXPECT_EQ(setting_label(setting("dp2xpp2-1f1b", 4)), "dp2xpp2-1f1b (M=4)");  // its schedule in its name
  EXPECT_EQ(setting_label(setting("fsdp", 4)), "fsdp");
  EXPECT_TRUE(setting_options(setting("tp", 4)).empty());
  // A family sweeps its members at the device count: schedules and recompute where they have them.
  std::vector<std::string> names;
  for (const Setting& s : sweep_settings(kHybridFamily, 4, 8, {{2}, {Schedule::GPipe, Schedule::OneFOneB}, {}, false}))
    names.push_back(s.strategy);
  EXPECT_EQ(names, (std::vector<std::string>{"dp2xpp2", "dp2xpp2-1f1b"}));
  EXPECT_EQ(sweep_settings(kHsdpFamily, 4, 8, {{2}, {Schedule::OneFOneB}, {}, true}).size(), 1u);
  EXPECT_TRUE(sweep_settings("regular", 2, 8, {}).empty());  // one device only
}

TEST(StrategySweep, UnitClassesAreTheLinesOwn) {
  const std::vector<std::string> classes = unit_classes();
  EXPECT_EQ(classes, (std::vector<std::string>{"fsdp", "zero2"}));
  EXPECT_EQ(unit_class_of("fsdp-prefetch"), "fsdp");
  EXPECT_EQ(unit_class_of("zero2-prefetch"), "zero2");
  EXPECT_EQ(unit_class_of("hsdp2x2"), "fsdp");
  EXPECT_EQ(unit_class_of("ddp"), "");
}

TEST(StrategySweep, TablesGroupAndMeasureSpeedupsAsTheLinesSay) {
  int baselines = 0;
  for (const ProjectionFacts& f : projection_facts()) {
    baselines += is_baseline(f.name) ? 1 : 0;
    EXPECT_EQ(is_baseline(f.name), f.single_device) << f.name;
    EXPECT_TRUE(is_swept(shown_with(f.name))) << f.name << " shown with " << shown_with(f.name);
  }
  EXPECT_EQ(baselines, 1);  // one strategy every speedup is measured against
  EXPECT_TRUE(is_baseline("regular"));
  EXPECT_EQ(shown_with("mp"), "pipeline");  // its one-micro-batch case
  EXPECT_EQ(shown_with("ddp"), "ddp");
  EXPECT_EQ(shown_with("no-such"), "no-such");
}

// Every registered strategy's plan names what its workers keep: each has a peak.
TEST(StrategySweep, EveryRegisteredStrategysPlanHasAMemoryPeak) {
  const NetPlan plan = plan_net(great_net(16, 0.25));
  for (const StrategyInfo& i : strategy_infos()) {
    if (is_family(i.name)) continue;
    StrategyOptions o;
    o.devices = i.single_device ? 1 : 2;
    o.micro_batches = 2;
    const MemoryEstimate e = plan_memory(make_plan(i.name, plan, o, 4), plan);
    EXPECT_EQ(e.per_worker.size(), static_cast<std::size_t>(o.devices)) << i.name;
    // Over two workers each holds at least half the parameters, with their gradients and Adam state.
    for (double b : e.per_worker) EXPECT_GT(b, static_cast<double>(plan.param_count) * sizeof(float)) << i.name;
  }
  StrategyOptions member;
  member.devices = 4;
  EXPECT_EQ(plan_memory(make_plan("dp2xpp2-1f1b", plan, member, 8), plan).per_worker.size(), 4u);
}

}  // namespace
}  // namespace pb
