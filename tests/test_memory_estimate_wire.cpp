// The memory estimate of the bf16 wire (--reduce-dtype / --param-dtype bf16): the communicator's
// staging, kept from the first step on, and fsdp's whole parameters gathered into bf16 move each
// worker's allocator peak by exactly what the estimate moves (plan/memory.h: the buffers the plan names).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "plan/memory.h"
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

// Each worker's peak after three steps of `c` on `net`, and the estimate of the plan it ran
// (without workspace: the difference of two runs holds none).
struct Run {
  std::vector<double> peaks, estimate;
};
Run run(const NetSpec& net, int64_t batch, const Case& c, Precision precision) {
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
  Run out;
  for (const WorkerStats& w : s->stats().workers) out.peaks.push_back(static_cast<double>(w.peak_bytes));
  WorkspaceProbes none;
  none.layers = [](const std::vector<LayerPlan>&, int64_t) { return 0.0; };
  out.estimate = plan_memory(*s->step_plan(), plan, none).per_worker;
  return out;
}

// Each case against `base` of it: each worker's peak moves by exactly what the estimate moves,
// in the direction `sign` says.
void check(const std::vector<Case>& cases, Precision precision, Case (*base_of)(Case), int sign) {
  const NetSpec net = great_net(12, 0.125);
  const int64_t batch = 7;  // uneven chunks
  for (const Case& c : cases) {
    SCOPED_TRACE(fmt::format("{} x{} reduce {} param {} activations {}", c.strategy, c.devices, c.reduce, c.param, c.act));
    const Run one = run(net, batch, c, precision), other = run(net, batch, base_of(c), precision);
    const std::vector<double>&wired = one.peaks, &base = other.peaks, &e1 = one.estimate, &e0 = other.estimate;
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
