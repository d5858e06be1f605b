// The strategies and shapes the plan tests cover: every strategy and variant at 1-4 workers, the
// pipelines at 1, 2 and 4 micro-batches (interleaved 1F1B at multiples of its workers), on a small
// net and an uneven batch.
#pragma once

#include <string>
#include <vector>

#include <fmt/format.h>

#include "engine/net.h"
#include "strategies/strategy.h"
#include "workloads/workload.h"

namespace pb::test {

struct PlanCase {
  std::string strategy;
  int devices = 1;
  int micro = 1;
  std::string label() const { return fmt::format("{} at {} worker(s), {} micro-batch(es)", strategy, devices, micro); }
};

inline constexpr int64_t kPlanBatch = 10;  // uneven over 3 and 4 workers, and over dp2's pieces

inline NetPlan plan_test_net() { return plan_net(great_net(8, 0.1875)); }

inline StrategyOptions plan_options(const PlanCase& c) {
  StrategyOptions o;
  o.devices = c.devices;
  o.micro_batches = c.micro;
  o.backend.threads = 1;
  o.first_bucket_bytes = 2 << 10;  // several ddp buckets on the small net
  o.bucket_bytes = 8 << 10;
  return o;
}

inline std::vector<PlanCase> plan_cases() {
  std::vector<PlanCase> v = {{"regular", 1, 1}};
  const std::vector<std::string> pipelines = {"pipeline", "pipeline-1f1b", "pipeline-zb", "pipeline-zbv",
                                              "pipeline-recompute", "pipeline-1f1b-recompute"};
  for (int n = 1; n <= 4; ++n) {
    for (const char* s : {"dp", "ddp", "mp", "fsdp", "zero2", "fsdp-prefetch", "zero2-prefetch", "tp"}) v.push_back({s, n, 1});
    for (const std::string& p : pipelines)
      for (int m : {1, 2, 4}) v.push_back({p, n, m});
  }
  // Interleaved 1F1B: M a multiple of the workers, and torch.chunk cutting the batch into M pieces.
  for (const auto& [n, m] : std::vector<std::pair<int, int>>{{1, 1}, {1, 2}, {2, 2}, {2, 4}, {3, 3}, {4, 4}})
    v.push_back({"pipeline-interleaved", n, m});
  for (const char* suffix : {"", "-1f1b", "-recompute", "-1f1b-recompute"})
    for (int m : {1, 2, 4}) {
      v.push_back({std::string("dp2xpp2") + suffix, 4, m});
      v.push_back({std::string("dp1xpp2") + suffix, 2, m});
      v.push_back({std::string("dp2xpp1") + suffix, 2, m});
    }
  for (const auto& [name, n] : std::vector<std::pair<std::string, int>>{
           {"dp2xtp2", 4}, {"dp1xtp2", 2}, {"dp2xtp1", 2}, {"hsdp2x2", 4}, {"hsdp1x2", 2}, {"hsdp2x1", 2}, {"hsdp3x1", 3}})
    v.push_back({name, n, 1});
  return v;
}

}  // namespace pb::test
