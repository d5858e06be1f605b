// Under --precision bf16 pipeline stages send activations and their gradients in bf16 (docs/bf16.md):
// a stage's output is bf16 values widened, and the gradient it receives is rounded to bf16 on
// arrival, so every pipeline trains bit for bit as with fp32 on the wire, at half the bytes.
#include "tests/bf16_skip.h"
#include "tests/test_strategies_support.h"

namespace pb::strategies_test {
namespace {

std::size_t transfer_bytes(const Trained& t) {
  std::size_t b = 0;
  for (const StepStats& s : t.per_batch)
    for (const WorkerStats& w : s.workers) b += w.kinds[static_cast<int>(CollKind::SendRecv)].bytes;
  return b;
}

TEST(ActivationWireBf16, PipelinesTrainBitForBitAsWithFp32OnTheWire) {
  SKIP_WITHOUT_BF16();
  struct Case {
    std::string strategy;
    int devices, micro;
  };
  std::vector<Case> cases;
  for (int n = 2; n <= 4; ++n)
    for (const char* s : {"mp", "pipeline", "pipeline-1f1b", "pipeline-zb", "pipeline-recompute", "pipeline-1f1b-recompute"})
      cases.push_back({s, n, std::string(s) == "mp" ? 1 : 3});
  for (int n = 2; n <= 4; ++n) cases.push_back({"pipeline-interleaved", n, n});
  for (int n = 2; n <= 4; ++n) cases.push_back({"pipeline-zbv", n, 3});
  for (const char* s : {"dp2xpp2", "dp2xpp2-1f1b", "dp2xpp2-recompute", "dp2xpp2-1f1b-recompute"}) cases.push_back({s, 4, 2});
  cases.push_back({"dp1xpp3", 3, 2});
  const NetSpec net = small_great_net();
  for (const Case& c : cases) {
    SCOPED_TRACE(fmt::format("{} at {} workers, {} micro-batches", c.strategy, c.devices, c.micro));
    StrategyOptions o = options(c.devices);
    o.micro_batches = c.micro;
    o.backend.precision = Precision::Bf16;
    // Uneven micro-batches, then others; interleaved 1F1B needs M whole ones.
    const std::vector<int64_t> batches = c.strategy == "pipeline-interleaved" ? std::vector<int64_t>{8, 12} : std::vector<int64_t>{7, 5};
    const Trained bf16 = train(c.strategy, o, net, batches, 2);
    o.bf16_activation_wire = false;
    const Trained fp32 = train(c.strategy, o, net, batches, 2);
    EXPECT_EQ(bf16.losses, fp32.losses);
    EXPECT_EQ(bf16.params, fp32.params);
    EXPECT_GT(transfer_bytes(bf16), 0u);
    EXPECT_EQ(2 * transfer_bytes(bf16), transfer_bytes(fp32));
  }
}

}  // namespace
}  // namespace pb::strategies_test
