// The executor's trace: every span a strategy's step records carries the id of the
// action it ran for, and the action is of the span's kind (a forward span: a forward action; a
// transfer or wait: a communication), per layer (traced) and per call alike.
#include <gtest/gtest.h>

#include "plan/plan.h"
#include "strategies/plan_gen.h"
#include "strategies/registry.h"
#include "tests/plan_cases.h"

namespace pb {
namespace {

using test::PlanCase;

bool span_fits(const Span& s, ActionKind k) {
  switch (s.phase) {
    case Phase::Forward: return k == ActionKind::Forward || k == ActionKind::Recompute || k == ActionKind::Copy;
    case Phase::Backward:
      return k == ActionKind::BackwardData || k == ActionKind::BackwardWeights || k == ActionKind::Copy;
    case Phase::Loss: return k == ActionKind::Loss;
    case Phase::Optimizer: return k == ActionKind::Optimizer;
    case Phase::Transfer:
    case Phase::Idle:
      return k == ActionKind::Send || k == ActionKind::Recv || k == ActionKind::Collective || k == ActionKind::Wait ||
             k == ActionKind::GroupStart || k == ActionKind::GroupEnd;
  }
  return false;
}

TEST(PlanExec, EverySpanOfAStepCarriesItsActionsId) {
  const NetPlan net = test::plan_test_net();
  const int64_t b = test::kPlanBatch;
  const std::vector<PlanCase> cases = {{"regular", 1, 1}, {"ddp", 2, 1},     {"ddp", 3, 1},     {"dp", 3, 1},          {"fsdp", 2, 1},
                                       {"zero2", 3, 1},   {"tp", 2, 1},      {"dp2xtp1", 2, 1},     {"mp", 2, 1},
                                       {"pipeline-1f1b", 2, 4}, {"dp2xpp1", 2, 2}, {"dp1xtp2", 2, 1}};
  for (const PlanCase& c : cases)
    for (bool detail : {false, true}) {
      SCOPED_TRACE(c.label() + (detail ? ", traced" : ""));
      const StrategyOptions o = test::plan_options(c);
      auto s = make_strategy(c.strategy, o);
      s->setup(net, init_params(net, 0), AdamParams{});
      s->load_batch(synthetic_values(b * numel_of(net.input), 1), synthetic_values(b * numel_of(net.output), 2), b);
      s->set_trace_detail(detail);
      s->step();
      const Plan p = make_plan(c.strategy, net, o, b);
      const StepStats st = s->stats();
      ASSERT_EQ(static_cast<int>(st.workers.size()), p.workers);
      for (int w = 0; w < p.workers; ++w) {
        const std::vector<Action>& actions = p.actions[w];
        int with_action = 0;
        for (const Span& sp : st.workers[w].spans) {
          if (sp.action < 0) {  // only the group's idle before and after the worker's part
            EXPECT_EQ(sp.phase, Phase::Idle) << "worker " << w << ": a " << phase_name(sp.phase) << " span '"
                                             << sp.name << "' without an action";
            continue;
          }
          ASSERT_LT(sp.action, static_cast<int>(actions.size())) << "worker " << w << " span " << sp.name;
          const Action& a = actions[sp.action];
          EXPECT_TRUE(span_fits(sp, a.kind)) << "worker " << w << ": a " << phase_name(sp.phase) << " span '"
                                              << sp.name << "' carries " << describe(p, w, a.id);
          ++with_action;
        }
        if (!actions.empty()) {
          EXPECT_GT(with_action, 0) << "worker " << w << " ran actions and recorded no span of one";
        }
      }
    }
}

}  // namespace
}  // namespace pb
