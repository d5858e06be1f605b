// After warm-up a training step allocates nothing: every strategy and variant at 1-4 CPU workers
// keeps each worker's allocator count unchanged over further steps (on GPUs an allocation in a
// step is a cudaMalloc, and a free a device-wide synchronization).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "engine/device.h"
#include "engine/net.h"
#include "strategies/registry.h"
#include "tests/bf16_skip.h"
#include "workloads/workload.h"

namespace pb {
namespace {

// Every registered strategy runnable on n workers, the families' members expanded.
std::vector<std::string> strategies_at(int n, int layers) {
  std::vector<std::string> out;
  for (const StrategyInfo& s : strategy_infos()) {
    if (s.single_device && n != 1) continue;
    if (s.name == kHybridFamily) {
      for (auto [dp, pp] : hybrid_factorizations(n))
        for (Schedule sc : {Schedule::GPipe, Schedule::OneFOneB})
          for (bool rc : {false, true}) out.push_back(hybrid_name(dp, pp, sc, rc));
    } else if (s.name == kDpTpFamily) {
      for (auto [dp, tp] : hybrid_factorizations(n)) out.push_back(dptp_name(dp, tp));
    } else if (s.name == kHsdpFamily) {  // every R x S = n, groups of one and a single group too
      for (int r = 1; r <= n; ++r)
        if (n % r == 0) out.push_back(hsdp_name(r, n / r));
    } else if (!(s.name == "mp" || s.name.rfind("pipeline", 0) == 0) || n <= layers) {
      out.push_back(s.name);
    }
  }
  return out;
}

std::size_t allocations(int n) {
  std::size_t sum = 0;
  for (int i = 0; i < n; ++i) sum += allocator_for(cpu(i)).allocations();
  return sum;
}

TEST(SteadyAlloc, NoAllocationInAStepAfterWarmUp) {
  const NetSpec net = great_net(8, 0.1875);
  const NetPlan plan = plan_net(net);
  const int64_t batch = 7;  // uneven over 2-4 workers
  const std::vector<float> x = synthetic_values(batch * numel_of(plan.input), 1);
  const std::vector<float> t = synthetic_values(batch * numel_of(plan.output), 2);
  int checked = 0;
  for (int n = 1; n <= 4; ++n) {
    for (const std::string& name : strategies_at(n, static_cast<int>(plan.layers.size()))) {
      SCOPED_TRACE(fmt::format("{} on {} workers", name, n));
      StrategyOptions o;
      o.devices = n;
      o.backend.threads = 1;
      o.micro_batches = name == "pipeline-interleaved" && n > 2 ? n : 2;  // a multiple of its workers
      auto s = make_strategy(name, o);
      s->setup(plan, init_params(plan, 0), net.adam);
      s->load_batch(x, t, batch);
      for (int k = 0; k < 2; ++k) s->step();  // warm-up: buffers, scratch and algorithm choices
      const std::size_t before = allocations(n);
      for (int k = 0; k < 3; ++k) s->step();
      EXPECT_EQ(allocations(n), before) << "allocations in 3 steps after warm-up";
      ++checked;
    }
  }
  EXPECT_GE(checked, 40);  // every strategy at every count it runs at, not a vacuous loop
}

// Under autocast with gradients reduced and parameters gathered in bf16 too: the communicators'
// staging and the units' shared bf16 weight copy (fsdp, zero2, hsdp) are kept from step to step,
// and tp's bf16 scratch and its all-gathers' staging too.
TEST(SteadyAlloc, Bf16WireAndSharedWeightCopiesAfterWarmUp) {
  SKIP_WITHOUT_BF16();
  const NetSpec net = great_net(8, 0.1875);
  const NetPlan plan = plan_net(net);
  const int64_t batch = 7;
  const std::vector<float> x = synthetic_values(batch * numel_of(plan.input), 1);
  const std::vector<float> t = synthetic_values(batch * numel_of(plan.output), 2);
  int checked = 0;
  for (int n = 1; n <= 4; ++n) {
    for (const std::string& name : strategies_at(n, static_cast<int>(plan.layers.size()))) {
      // The others reduce in bf16 where they reduce; tp (and dp x tp) gathers activations in bf16.
      const bool tp = name == "tp" || name.find("xtp") != std::string::npos;
      if (!takes_reduce_dtype(name) && !tp) continue;
      SCOPED_TRACE(fmt::format("{} on {} workers", name, n));
      StrategyOptions o;
      o.devices = n;
      o.backend.threads = 1;
      o.backend.precision = Precision::Bf16;
      o.micro_batches = 2;
      if (takes_reduce_dtype(name)) o.reduce_dtype = DType::Bf16;
      if (takes_param_dtype(name)) o.param_dtype = DType::Bf16;
      auto s = make_strategy(name, o);
      s->setup(plan, init_params(plan, 0), net.adam);
      s->load_batch(x, t, batch);
      for (int k = 0; k < 2; ++k) s->step();
      const std::size_t before = allocations(n);
      for (int k = 0; k < 3; ++k) s->step();
      EXPECT_EQ(allocations(n), before) << "allocations in 3 steps after warm-up";
      ++checked;
    }
  }
  EXPECT_GE(checked, 20);
}

}  // namespace
}  // namespace pb
