// One device has nothing to split: every strategy's one-device step is regular's work, so its
// allocator peak (in all, and its tensors alone) is regular's within 3%, on the CPU backend.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "engine/device.h"
#include "engine/net.h"
#include "strategies/registry.h"
#include "workloads/workload.h"

namespace pb {
namespace {

struct Peak {
  double all = 0, tensors = 0;
};

// Worker 0's peaks over setup, loading and a few steps; the strategy is gone on return.
Peak one_device_peak(const std::string& name, const NetPlan& plan, const NetSpec& net, int64_t batch) {
  const std::vector<float> x = synthetic_values(batch * numel_of(plan.input), 1);
  const std::vector<float> t = synthetic_values(batch * numel_of(plan.output), 2);
  StrategyOptions o;
  o.devices = 1;
  o.backend.threads = 1;
  o.micro_batches = 1;  // pipelines then run the whole batch at once, as regular does
  auto s = make_strategy(name, o);
  s->setup(plan, init_params(plan, 0), net.adam);
  s->load_batch(x, t, batch);
  for (int k = 0; k < 3; ++k) s->step();
  const Allocator& a = allocator_for(cpu(0));
  return {static_cast<double>(a.peak_bytes()), static_cast<double>(a.peak_bytes(MemoryPool::Tensors))};
}

TEST(OneDevice, EveryStrategysPeakIsRegularsWithinThreePercent) {
  const NetSpec net = great_net(32, 0.25);
  const NetPlan plan = plan_net(net);
  const int64_t batch = 1;
  const Peak regular = one_device_peak("regular", plan, net, batch);
  ASSERT_GT(regular.all, regular.tensors) << "the backend's workspace is part of the peak";
  std::vector<std::string> names{dptp_name(1, 1), hsdp_name(1, 1)};
  for (const StrategyInfo& s : strategy_infos())
    if (s.name != "regular" && s.name != kHybridFamily && s.name != kDpTpFamily && s.name != kHsdpFamily)
      names.push_back(s.name);
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    const Peak p = one_device_peak(name, plan, net, batch);
    std::printf("%-24s peak %8.1f KiB (%+5.1f%%), tensors %8.1f KiB (%+5.1f%%)\n", name.c_str(), p.all / 1024,
                (p.all / regular.all - 1) * 100, p.tensors / 1024, (p.tensors / regular.tensors - 1) * 100);
    EXPECT_NEAR(p.all / regular.all, 1.0, 0.03) << name << ": " << p.all << " B, regular " << regular.all << " B";
    EXPECT_NEAR(p.tensors / regular.tensors, 1.0, 0.03)
        << name << "'s tensors: " << p.tensors << " B, regular " << regular.tensors << " B";
  }
  EXPECT_GE(names.size(), 10u);  // every strategy, not a vacuous loop
}

}  // namespace
}  // namespace pb
