// The memory estimate of the bf16 wire (--reduce-dtype / --param-dtype bf16): the communicator's
// staging, kept from the first step on, and fsdp's whole parameters gathered into bf16 move each
// worker's allocator peak by exactly what the estimate moves (strategies/memory_estimate.cpp).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "strategies/memory_estimate.h"
#include "strategies/registry.h"
#include "tests/bf16_skip.h"
#include "workloads/workload.h"

namespace pb {
namespace {

struct Case {
  std::string strategy;
  int devices;
  bool reduce, param;
  bool act = false;  // a pipeline's activations and gradients in bf16 (under --precision bf16)
};

// Each worker's peak after three steps of `c` on `net`; stages: the stage split the run made (the
// estimate's default split may differ).
std::vector<double> peaks(const NetSpec& net, int64_t batch, const Case& c, Precision precision,
                          std::vector<std::pair<int, int>>* stages = nullptr) {
  const NetPlan plan = plan_net(net);
  const std::vector<float> x = synthetic_values(batch * numel_of(plan.input), 1),
                           t = synthetic_values(batch * numel_of(plan.output), 2);
  StrategyOptions o;
  o.devices = c.devices;
  o.backend.threads = 1;
  o.backend.precision = precision;
  o.micro_batches = 2;
  o.reduce_dtype = c.reduce ? DType::Bf16 : DType::F32, o.param_dtype = c.param ? DType::Bf16 : DType::F32;
  o.bf16_activation_wire = c.act;
  auto s = make_strategy(c.strategy, o);
  s->setup(plan, init_params(plan, 0), net.adam);
  s->load_batch(x, t, batch);
  for (int k = 0; k < 3; ++k) s->step();
  std::vector<double> p;
  const StepStats st = s->stats();
  for (const WorkerStats& w : st.workers) p.push_back(static_cast<double>(w.peak_bytes));
  if (stages && !st.chunk_stages.empty()) *stages = st.chunk_stages;
  else if (stages && st.staged)
    for (const WorkerStats& w : st.workers)
      if (stages->empty() || w.layer_begin > stages->back().first) stages->push_back({w.layer_begin, w.layer_end});
  return p;
}

std::vector<double> estimate(const NetSpec& net, int64_t batch, const Case& c, Precision precision,
                             const std::vector<std::pair<int, int>>& stages) {
  MemoryConfig mc;
  mc.bf16 = precision == Precision::Bf16;
  mc.strategy = c.strategy;
  mc.devices = c.devices;
  mc.micro_batches = 2;
  mc.reduce_bf16 = c.reduce, mc.param_bf16 = c.param;
  mc.bf16_activation_wire = c.act;
  mc.stages = stages;
  mc.workspace = [](const std::vector<LayerPlan>&, int64_t) { return 0.0; };
  return estimate_memory(plan_net(net), batch, mc).per_worker;
}

// Each case against `base` of it: each worker's peak moves by exactly what the estimate moves,
// in the direction `sign` says.
void check(const std::vector<Case>& cases, Precision precision, Case (*base_of)(Case), int sign) {
  const NetSpec net = great_net(12, 0.125);
  const int64_t batch = 7;  // uneven chunks
  for (const Case& c : cases) {
    SCOPED_TRACE(fmt::format("{} x{} reduce {} param {} activations {}", c.strategy, c.devices, c.reduce, c.param, c.act));
    const Case b = base_of(c);
    std::vector<std::pair<int, int>> stages;
    const std::vector<double> wired = peaks(net, batch, c, precision, &stages), base = peaks(net, batch, b, precision);
    const std::vector<double> e0 = estimate(net, batch, b, precision, stages), e1 = estimate(net, batch, c, precision, stages);
    ASSERT_EQ(base.size(), e0.size());
    double added = 0;
    for (std::size_t r = 0; r < base.size(); ++r) {
      EXPECT_EQ(wired[r] - base[r], e1[r] - e0[r]) << "worker " << r;
      added += e1[r] - e0[r];
    }
    EXPECT_GT(sign * added, 0);
  }
}

// The reduce dtype adds the communicator's staging.
TEST(MemoryEstimateWire, ReduceBf16StagingIsWhatTheEstimateAdds) {
  check({{"dp", 3, true, false},
         {"ddp", 2, true, false},
         {"ddp", 4, true, false},
         {"fsdp", 1, true, false},
         {"fsdp", 3, true, false},
         {"zero2", 2, true, false},
         {"fsdp-prefetch", 2, true, false},
         {"zero2-prefetch", 3, true, false},
         {"hsdp2x2", 4, true, false},
         {"hsdp2x1", 2, true, false},
         {"dp2xpp2", 4, true, false},
         {"dp2xtp2", 4, true, false}},
        Precision::Fp32, [](Case c) { return Case{c.strategy, c.devices, false, false}; }, +1);
}

// The param dtype over several shards keeps the whole parameters in bf16 and makes no bf16 copy
// of them: less memory, by what the estimate takes off; on one shard (fp32 whole parameters,
// gathered through staging) more.
TEST(MemoryEstimateWire, ParamDtypeBf16HalvesTheGatheredParametersAsEstimated) {
  SKIP_WITHOUT_BF16();
  auto without_param = [](Case c) { return Case{c.strategy, c.devices, c.reduce, false}; };
  check({{"fsdp", 2, false, true},
         {"fsdp", 3, true, true},
         {"zero2", 2, true, true},
         {"fsdp-prefetch", 3, true, true},
         {"fsdp-prefetch", 2, false, true},
         {"zero2-prefetch", 2, true, true},
         {"hsdp2x2", 4, true, true}},
        Precision::Bf16, without_param, -1);
  check({{"fsdp", 1, false, true}, {"hsdp2x1", 2, false, true}}, Precision::Bf16, without_param, +1);
}

// Under --precision bf16 pipeline stages send activations and gradients through bf16 staging: the
// slots their transfers in flight take, grown once (engine/comm_wire.cpp), per worker.
TEST(MemoryEstimateWire, ActivationBf16StagingIsWhatTheEstimateAdds) {
  SKIP_WITHOUT_BF16();
  check({{"mp", 3, false, false, true},
         {"pipeline", 2, false, false, true},
         {"pipeline", 4, false, false, true},
         {"pipeline-1f1b", 3, false, false, true},
         {"pipeline-zb", 3, false, false, true},
         {"pipeline-recompute", 2, false, false, true},
         {"pipeline-1f1b-recompute", 4, false, false, true},
         {"pipeline-interleaved", 2, false, false, true},
         {"dp2xpp2", 4, false, false, true},
         {"dp2xpp2-1f1b", 4, true, false, true}},
        Precision::Bf16, [](Case c) { return Case{c.strategy, c.devices, c.reduce, c.param, false}; }, +1);
}

}  // namespace
}  // namespace pb
