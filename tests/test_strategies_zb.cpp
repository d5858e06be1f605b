// Zero-bubble ZB-H1 (pipeline-zb): its order of F, B and W per stage, the same function as
// `regular`, and what it holds against 1F1B.
#include "strategies/rules.h"
#include "tests/test_strategies_support.h"

namespace pb {
namespace {

using namespace pb::strategies_test;
using Part = PipeOp::Part;

// 1F1B's forwards and backwards in 1F1B's order, each backward's W after its B, at most
// min(P, M) micro-batches between F and W, and after stage s's last B its s deferred W's and
// that B's own (the drain they fill). Where a W would follow its own B at once (stage 0, one
// micro-batch) the backward is whole: nothing is deferred, nothing kept.
TEST(PipelineSchedule, ZeroBubbleIsOneFOneBWithDeferredWeights) {
  for (int p = 1; p <= 4; ++p)
    for (int m = 1; m <= 9; ++m)
      for (int s = 0; s < p; ++s) {
        SCOPED_TRACE(fmt::format("P {} M {} stage {}", p, m, s));
        const bool whole = s == 0 || m == 1;
        std::vector<std::pair<bool, int>> fb, ref;
        for (const PipeOp& op : pipeline_ops(Schedule::OneFOneB, false, p, s, m)) ref.push_back({op.forward, op.micro});
        std::vector<int> state(m, 0);  // 1: forward done, 2: B done, 3: W done
        int in_flight = 0, most = 0, after_last_b = 0;
        for (const PipeOp& op : pipeline_ops(Schedule::ZeroBubble, false, p, s, m)) {
          int& st = state.at(op.micro);
          if (op.forward) {
            ASSERT_EQ(st, 0);
            st = 1, most = std::max(most, ++in_flight);
          } else if (op.part != Part::Weights) {
            ASSERT_EQ(op.part, whole ? Part::Whole : Part::Data);
            ASSERT_EQ(st, 1) << "B of " << op.micro << " before its forward";
            st = 2, after_last_b = 0;
          }
          if (!op.forward && op.part != Part::Data) {
            ASSERT_EQ(st, 2) << "W of " << op.micro << " before its B";
            EXPECT_EQ(op.first_backward, op.micro == 0);  // the first W writes the gradients
            st = 3, --in_flight, after_last_b += op.part == Part::Weights;
          }
          if (op.forward || op.part != Part::Weights) fb.push_back({op.forward, op.micro});
        }
        EXPECT_EQ(fb, ref);
        EXPECT_EQ(state, std::vector<int>(m, 3));
        EXPECT_EQ(most, std::min(p, m));
        EXPECT_EQ(most, pipeline_slots(Schedule::ZeroBubble, p, s, m));
        EXPECT_EQ(after_last_b, whole ? 0 : std::min(s + 1, m));
      }
}

// Uneven micro-batches (7 -> 2,2,2,1; 3,3,1; seven of one, more than the stages), a second batch
// of another size, 1-4 workers.
TEST(Strategies, ZeroBubbleMatchesRegular) {
  StrategyOptions o = options(1);
  o.micro_batches = 4;
  check_equivalence("pipeline-zb", o, {7});
  o.micro_batches = 3;
  check_equivalence("pipeline-zb", o, {7, 5}, false);
  o.micro_batches = 7;
  check_equivalence("pipeline-zb", o, {7}, false);
}

// Peak memory per worker at M = 8 (great_net, whose parameters and Adam state dominate the later
// stages): stage 0 runs whole backwards in 1F1B's order and holds what it holds under 1F1B;
// stage s > 0 holds P slots where 1F1B holds P - s, and s + 1 sets of kept output gradients (W
// reads its layers' inputs and output gradients: more than B frees), so more than under 1F1B but
// less than GPipe's M slots.
TEST(Strategies, ZeroBubbleHoldsBetweenOneFOneBAndGPipe) {
  const NetSpec net = great_net(16, 0.25);
  for (int p = 2; p <= 4; ++p) {
    SCOPED_TRACE(fmt::format("{} stages", p));
    StrategyOptions o = options(p);
    o.micro_batches = 8;
    auto peak = peaks_per_worker({"pipeline", "pipeline-1f1b", "pipeline-zb"}, o, net);
    for (int st = 0; st < p; ++st) {
      SCOPED_TRACE(fmt::format("stage {}: zb {} 1f1b {} gpipe {}", st, peak["pipeline-zb"][st], peak["pipeline-1f1b"][st],
                               peak["pipeline"][st]));
      if (st > 0) {
        EXPECT_GT(peak["pipeline-zb"][st], peak["pipeline-1f1b"][st]);
      }
      EXPECT_LT(peak["pipeline-zb"][st], peak["pipeline"][st]);
    }
    EXPECT_EQ(peak["pipeline-zb"][0], peak["pipeline-1f1b"][0]);
  }
}

}  // namespace
}  // namespace pb
