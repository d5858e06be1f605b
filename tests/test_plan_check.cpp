// The plan's ordering checker and validator: every strategy's plan passes at 1-4 workers and 1, 2
// and 4 micro-batches; a plan with one wait deleted, a send moved after its receive, a collective
// of another size or a forward missing is refused, naming the worker, the action and the buffer.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/check.h"
#include "engine/graph_stage.h"
#include "plan/check.h"
#include "plan/plan.h"
#include "strategies/plan_gen.h"
#include "strategies/rules.h"
#include "strategies/stages.h"
#include "tests/paths.h"
#include "tests/plan_cases.h"
#include "workloads/workload.h"

namespace pb {
namespace {

using ::testing::HasSubstr;

Plan plan_of(const std::string& strategy, int devices, int micro) {
  const test::PlanCase c{strategy, devices, micro};
  return make_plan(strategy, test::plan_test_net(), test::plan_options(c), test::kPlanBatch);
}

// Moves worker w's action `from` to position `to` (in the list without it), renumbering ids and
// the waits that name them.
void move_action(Plan& p, int w, int from, int to) {
  auto& list = p.actions[w];
  Action a = list[from];
  list.erase(list.begin() + from);
  list.insert(list.begin() + (to >= 0 ? to : static_cast<int>(list.size())), a);
  std::vector<int> new_id(list.size());
  for (int i = 0; i < static_cast<int>(list.size()); ++i) new_id[list[i].id] = i;
  for (int i = 0; i < static_cast<int>(list.size()); ++i) {
    list[i].id = i;
    for (int& id : list[i].waits) id = new_id[id];
  }
}

void erase_action(Plan& p, int w, int id) {
  auto& list = p.actions[w];
  list.erase(list.begin() + id);
  for (int i = 0; i < static_cast<int>(list.size()); ++i) {
    list[i].id = i;
    for (int& x : list[i].waits) x = x > id ? x - 1 : x;
  }
}

int find_action(const Plan& p, int w, ActionKind kind, int after = -1,
                const std::function<bool(const Action&)>& also = {}) {
  for (const Action& a : p.actions[w])
    if (a.id > after && a.kind == kind && (!also || also(a))) return a.id;
  return -1;
}

TEST(PlanCheck, EveryStrategysPlanIsValid) {
  int checked = 0;
  for (const test::PlanCase& c : test::plan_cases()) {
    SCOPED_TRACE(c.label());
    const Plan p = plan_of(c.strategy, c.devices, c.micro);
    const auto issues = validate_plan(p);
    EXPECT_TRUE(issues.empty()) << issues_text(issues);
    ++checked;
  }
  EXPECT_GT(checked, 100);
}

// Pipelines over nets with skips: every 2-way cut, and the FLOPs split at 3-4 stages under every
// schedule (chunked ones at 2-4 workers), is valid -- each skip sent has its receive, nothing deadlocks, every
// slot read after its receive's write -- and a skip over several stages goes on its own channel.
TEST(PlanCheck, PipelinesSendingSkipsAreValid) {
  for (const NetSpec& spec : {unet(16, 0.125), resnet(16, 0.125)}) {
    const NetPlan net = plan_net(spec);
    const int layers = static_cast<int>(net.layers.size());
    auto check = [&](const std::string& name, int devices, int micro, std::vector<int> balance, int64_t batch = 8) {
      SCOPED_TRACE(fmt::format("{}: {} on {}, {} micro-batches, balance {}", spec.name, name, devices, micro,
                               fmt::join(balance, ",")));
      StrategyOptions o;
      o.devices = devices, o.micro_batches = micro, o.balance = std::move(balance);
      const Plan p = make_plan(name, net, o, batch);
      const auto issues = validate_plan(p);
      EXPECT_TRUE(issues.empty()) << issues_text(issues);
      return p;
    };
    for (int a = 1; a < layers; ++a) check("pipeline-1f1b", 2, 3, {a, layers - a});
    for (const char* s : {"mp", "pipeline", "pipeline-1f1b", "pipeline-zb", "pipeline-recompute", "pipeline-1f1b-recompute"})
      for (int n = 3; n <= 4; ++n) check(s, n, 4, {});
    check("dp2xpp2-1f1b", 4, 2, {});
    // Chunked schedules: each flow between two workers on a channel of its own, two members.
    for (int n = 2; n <= 4; ++n) {
      for (int m : {n, 2 * n}) check("pipeline-interleaved", n, m, {}, 2 * m);
      for (int m : {1, 3, 8}) check("pipeline-zbv", n, m, {});
    }
    {
      StrategyOptions o;
      o.devices = 3, o.micro_batches = 6, o.virtual_stages = 3;
      const Plan p = make_plan("pipeline-interleaved", net, o, 12);
      EXPECT_TRUE(validate_plan(p).empty()) << issues_text(validate_plan(p));
      int flows = 0;
      for (const PlanGroup& g : p.groups)
        if (g.name.rfind("skip", 0) == 0) {
          EXPECT_EQ(g.members.size(), 2u) << g.name;
          ++flows;
        }
      EXPECT_GT(flows, 0);
    }
    const Plan far = check("pipeline-1f1b", 4, 4, {});
    int skips = 0;
    for (const auto& list : far.actions)
      for (const Action& a : list)
        if (a.kind == ActionKind::Send && a.group > 0) {
          EXPECT_GT(std::abs(a.peer - static_cast<int>(&list - far.actions.data())), 1) << "a neighbour's on its own channel";
          EXPECT_THAT(far.groups.at(a.group).name, ::testing::StartsWith("skip"));
          ++skips;
        }
    if (spec.name == "unet") {  // a ResNet's skips need not cross more than one
      EXPECT_GT(skips, 0) << "no skip crosses more than one of 4 stages";
    }
  }
}

// tp over nets with skips: the plans check, each split layer's partial input gradient is
// all-reduced once (not the net input's), and added to its other readers' sum (a Copy reading and
// writing an input-gradient buffer) exactly where backward's plan says another wrote it first --
// under bf16 after every weighted layer, whose fp32 sum that Copy rounds into the pool.
TEST(PlanCheck, TpOverNetsWithSkipsIsValid) {
  for (const NetSpec& spec : {unet(16, 0.125), resnet(16, 0.125)}) {
    const NetPlan net = plan_net(spec);
    const GraphBackward back = plan_graph_backward(net, 0, static_cast<int>(net.layers.size()));
    for (const auto& [name, devices] : {std::pair{"tp", 2}, {"tp", 3}, {"tp", 4}, {"dp2xtp2", 4}})
    for (const Precision precision : {Precision::Fp32, Precision::Bf16}) {
      SCOPED_TRACE(fmt::format("{}: {} on {}, {}", spec.name, name, devices, precision_name(precision)));
      const bool bf16 = precision == Precision::Bf16;
      StrategyOptions o;
      o.devices = devices;
      o.backend.precision = precision;
      const Plan p = make_plan(name, net, o, 8);
      const auto issues = validate_plan(p);
      EXPECT_TRUE(issues.empty()) << issues_text(issues);
      const int ways = name == std::string("tp") ? devices : 2;
      const std::vector<TpSlice> slices = tp_slices(net, ways, name);
      int reduces = 0, adds = 0;
      for (std::size_t i = 0; i < net.layers.size(); ++i) {
        const LayerPlan& l = net.layers[i];
        if (slices[i].channels == 0 || l.inputs[0] == kNetInput) continue;
        reduces += slices[i].split;
        adds += bf16 || !back.writes[i][0].first;
      }
      EXPECT_GT(reduces, 0);
      int got_reduces = 0, got_adds = 0;
      for (const Action& a : p.actions[0]) {
        if (a.kind == ActionKind::Collective && a.coll == CollKind::AllReduce && p.groups.at(a.group).name.rfind("dp ", 0) != 0)
          ++got_reduces;  // not dp x tp's gradient sum over replicas
        if (a.kind == ActionKind::Copy && !a.writes.empty() && p.buffers[a.writes[0]].role == BufferRole::InputGrad) {
          ++got_adds;
          if (!bf16) {
            EXPECT_NE(std::find(a.reads.begin(), a.reads.end(), a.writes[0]), a.reads.end()) << "an add reads what it adds to";
          }
        }
      }
      EXPECT_EQ(got_reduces, reduces);
      EXPECT_EQ(got_adds, adds);
      if (spec.name == "resnet") {
        EXPECT_GT(adds, 0) << "a block's first conv reads what its add reads too";
      }
    }
  }
}

// What a stage sends besides the chain's: the U-Net fixture cut after enc1's pooling (layers 0-2,
// then 3-16) sends the pooled value forward and takes its gradient back, as a chain would; enc1
// [4,8,8] and the input [2,8,8] go forward too, and enc1's gradient back.
TEST(PlanCheck, SkipBytesAreWhatStagesSendBesidesTheChain) {
  const NetPlan net = plan_net(load_net_json((test::source_dir() / "tests/fixtures/graph/unet_small/net.json").string()));
  StrategyOptions o;
  o.devices = 2, o.micro_batches = 2, o.balance = {3, 14};
  const Plan p = make_plan("pipeline-1f1b", net, o, 4);
  const std::vector<int64_t> skips = skip_bytes(p);
  ASSERT_EQ(skips.size(), 2u);
  EXPECT_EQ(skips[0], 4 * 4 * (256 + 128));
  EXPECT_EQ(skips[1], 4 * 4 * 256);
  o.balance = {};
  EXPECT_EQ(skip_bytes(make_plan("pipeline-1f1b", test::plan_test_net(), o, 4)), (std::vector<int64_t>{0, 0}))
      << "a chain's pipeline sends no skips";
  // ZB-V over it cut 2,1,13,1 (stages 0 and 3 on worker 0, 1 and 2 on worker 1): stage 2 reads
  // enc1 and the input [2,8,8] from stage 0 on the other worker, and sends enc1's gradient back
  // beside stage 1's input gradient (a chain's, the same layer's); the pooled value goes from
  // stage 1 to 2 in place, and stage 2's output to stage 3 as a chain's.
  o.balance = {2, 1, 13, 1};
  const std::vector<int64_t> zbv = skip_bytes(make_plan("pipeline-zbv", net, o, 4));
  ASSERT_EQ(zbv.size(), 2u);
  EXPECT_EQ(zbv[0], 4 * 4 * (256 + 128));
  EXPECT_EQ(zbv[1], 4 * 4 * 256);
}

// 1F1B at 3 stages: worker 1 receives micro-batch 0's activation into its input slot; without
// the wait for that receive, the forward reads the slot unordered after the receive's write.
TEST(PlanCheck, AMissingWaitForAReceiveIsARaceOnItsBuffer) {
  Plan p = plan_of("pipeline-1f1b", 3, 4);
  ASSERT_TRUE(check_plan_order(p).empty());
  const int recv = find_action(p, 1, ActionKind::Recv);
  ASSERT_GE(recv, 0);
  const int wait = find_action(p, 1, ActionKind::Wait, recv,
                               [&](const Action& a) { return a.waits == std::vector<int>{recv}; });
  ASSERT_GE(wait, 0);
  const std::string buffer = buffer_label(p.buffers[p.actions[1][recv].writes.at(0)]);
  erase_action(p, 1, wait);
  const auto issues = check_plan_order(p);
  ASSERT_FALSE(issues.empty());
  const std::string all = issues_text(issues);
  EXPECT_THAT(all, HasSubstr("worker 1 action " + std::to_string(wait) + " (forward"));  // the forward that reads it
  EXPECT_THAT(all, HasSubstr("buffer '" + buffer + "'"));
  EXPECT_THAT(all, HasSubstr("unordered after its write by worker 1 action " + std::to_string(recv) + " (recv"));
}

// Without the wait for an activation's send, the slot's next forward overwrites what the send
// may still be reading.
TEST(PlanCheck, AMissingWaitForASendIsARaceWithItsRead) {
  Plan p = plan_of("pipeline-1f1b-recompute", 2, 4);
  ASSERT_TRUE(check_plan_order(p).empty());
  const int send = find_action(p, 0, ActionKind::Send);
  const int wait = find_action(p, 0, ActionKind::Wait, send,
                               [&](const Action& a) { return a.waits == std::vector<int>{send}; });
  ASSERT_GE(wait, 0);
  erase_action(p, 0, wait);
  const std::string all = issues_text(check_plan_order(p));
  EXPECT_THAT(all, HasSubstr("writes buffer 'acts[0]' (worker 0) unordered after its read by worker 0 action " +
                             std::to_string(send) + " (send"));
}

// mp at 2 stages: stage 0 sends its activation, then waits for the gradient. Moved after that
// receive's wait, the send never goes out: both stages wait forever.
TEST(PlanCheck, ASendMovedAfterItsReceiveIsADeadlock) {
  Plan p = plan_of("mp", 2, 1);
  ASSERT_TRUE(validate_plan(p).empty());
  const int send = find_action(p, 0, ActionKind::Send);
  const int recv = find_action(p, 0, ActionKind::Recv);
  const int wait = find_action(p, 0, ActionKind::Wait, recv,
                               [&](const Action& a) { return a.waits == std::vector<int>{recv}; });
  ASSERT_TRUE(send >= 0 && recv > send && wait > recv);
  move_action(p, 0, send, wait);  // just after the wait (the list is one shorter while moving)
  const auto issues = validate_plan(p);
  const std::string all = issues_text(issues);
  EXPECT_THAT(all, HasSubstr("worker 0 action " + std::to_string(wait - 1) + " (wait"));
  EXPECT_THAT(all, HasSubstr("deadlock: waits for action"));
  EXPECT_THAT(all, HasSubstr("worker 1 has not started the matching send"));
  EXPECT_THAT(all, HasSubstr("worker 1 action"));  // stage 1 waits for the activation that never comes
}

TEST(PlanCheck, ACollectiveOfAnotherSizeIsRefused) {
  Plan p = plan_of("ddp", 3, 1);
  const int ar = find_action(p, 2, ActionKind::Collective);
  ASSERT_GE(ar, 0);
  p.actions[2][ar].count += 1;
  EXPECT_THAT(issues_text(validate_plan(p)), HasSubstr("does not match its partner"));
}

TEST(PlanCheck, ALayerWithoutItsForwardIsRefused) {
  Plan p = plan_of("regular", 1, 1);
  p.actions[0][find_action(p, 0, ActionKind::Forward)].layer_begin = 1;
  EXPECT_THAT(issues_text(validate_plan(p)), HasSubstr("layer 0 has 0 forward action(s), expected 1"));
}

TEST(PlanFormat, JsonRoundTripsAndBadFieldsAreNamed) {
  const Plan p = plan_of("dp2xpp2-1f1b", 4, 2);
  const std::string json = plan_to_json(p);
  const Plan back = plan_from_json(json, "plan.json");
  EXPECT_EQ(plan_to_json(back), json);
  EXPECT_TRUE(validate_plan(back).empty());
  std::string bad = json;
  const std::string kind = "\"kind\": \"forward\"";
  ASSERT_NE(bad.find(kind), std::string::npos);
  bad.replace(bad.find(kind), kind.size(), "\"kind\": \"fwd\"");
  try {
    plan_from_json(bad, "plan.json");
    FAIL() << "an unknown kind was accepted";
  } catch (const UsageError& e) {
    EXPECT_THAT(e.what(), HasSubstr("plan.json: worker 0 action"));
    EXPECT_THAT(e.what(), HasSubstr("unknown action kind 'fwd'"));
  }
  EXPECT_THROW(plan_from_json("{\"workers\": 2}", "p.json"), UsageError);  // no strategy
}

// --param-dtype bf16 over several shards: the whole parameters are gathered into bf16 buffers,
// half the bytes, and a plan file says so; one worker's whole parameters are its fp32 shards.
TEST(PlanFormat, GatheredParametersAreKeptInTheParamDtype) {
  for (const char* s : {"fsdp", "zero2", "fsdp-prefetch"})
    for (const int n : {1, 2}) {
      SCOPED_TRACE(fmt::format("{} x{}", s, n));
      test::PlanCase c{s, n, 1};
      StrategyOptions o = test::plan_options(c);
      const Plan fp32 = make_plan(s, test::plan_test_net(), o, test::kPlanBatch);
      o.param_dtype = DType::Bf16, o.backend.precision = Precision::Bf16;  // a plan: no kernels needed
      const Plan bf16 = make_plan(s, test::plan_test_net(), o, test::kPlanBatch);
      int gathered = 0;
      for (const PlanBuffer& b : bf16.buffers) {  // the whole parameters and the shards, as in fp32
        const bool whole = b.role == BufferRole::Gathered;
        if (!whole && b.role != BufferRole::ShardParams && b.role != BufferRole::ShardGrads) continue;
        gathered += whole;
        const auto in32 = std::find_if(fp32.buffers.begin(), fp32.buffers.end(), [&](const PlanBuffer& x) { return same_buffer(x, b); });
        ASSERT_NE(in32, fp32.buffers.end()) << buffer_label(b);
        EXPECT_EQ(b.dtype, whole && n > 1 ? DType::Bf16 : DType::F32) << buffer_label(b);
        EXPECT_EQ(b.bytes * (whole && n > 1 ? 2 : 1), in32->bytes) << buffer_label(b);
      }
      EXPECT_GT(gathered, 0);
      const Plan back = plan_from_json(plan_to_json(bf16), "plan.json");
      for (std::size_t b = 0; b < bf16.buffers.size(); ++b) EXPECT_EQ(back.buffers[b].dtype, bf16.buffers[b].dtype);
    }
}

}  // namespace
}  // namespace pb
