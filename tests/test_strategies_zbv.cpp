// Zero-bubble V (pipeline-zbv): PyTorch's ScheduleZBVZeroBubble order, two chunks a worker in a V,
// every pass once, the order runs, and its activations and gradients each keep one order between
// two workers (on one channel they would not: why the schedule asks for a channel each).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>

#include "strategies/plan_gen.h"
#include "strategies/registry.h"
#include "strategies/rules.h"
#include "workloads/workload.h"

namespace pb {

ChunkSchedule zbv_schedule(const StrategyOptions& o);  // strategies/pipeline_zbv.cpp

namespace {

std::string ops_text(const std::vector<PipeOp>& ops) {
  std::string s;
  for (const PipeOp& o : ops) {
    const char* kind = o.forward ? "F" : o.part == PipeOp::Part::Data ? "B" : o.part == PipeOp::Part::Weights ? "W" : "BW";
    s += fmt::format("{}{}.{} ", kind, o.chunk, o.micro);
  }
  return s;
}

// Two workers, four micro-batches: worker 0 holds stages 0 and 3 (the loss), worker 1 stages 1 and 2,
// handing stage 1's output to stage 2 in place. A W right after its B runs with it (BW).
TEST(ZbvSchedule, TwoWorkersInPyTorchsOrder) {
  const ChunkSchedule s = zbv_schedule({});
  EXPECT_EQ(s.chunks, 2);
  EXPECT_EQ(s.stage(2, 0, 0), 0);
  EXPECT_EQ(s.stage(2, 0, 1), 3);
  EXPECT_EQ(s.stage(2, 1, 0), 1);
  EXPECT_EQ(s.stage(2, 1, 1), 2);
  EXPECT_EQ(ops_text(s.ops(2, 0, 4, "x")),
            "F0.0 F0.1 F0.2 F1.0 BW1.0 F1.1 BW1.1 F0.3 BW0.0 F1.2 BW1.2 BW0.1 F1.3 BW1.3 BW0.2 BW0.3 ");
  EXPECT_EQ(ops_text(s.ops(2, 1, 4, "x")),
            "F0.0 F1.0 F0.1 F1.1 BW1.0 F0.2 BW0.0 F1.2 BW1.1 F0.3 BW0.1 F1.3 BW1.2 B0.2 B1.3 B0.3 W0.2 W1.3 W0.3 ");
}

// 1-4 workers, 1-12 micro-batches: each chunk's forwards, input gradients and weight gradients once
// each in micro-batch order, the first to write a chunk's gradients marked; played out, every
// worker finishes; between two workers each kind of message keeps the sender's order.
TEST(ZbvSchedule, EveryPassOnceInOrderAndTheOrderRuns) {
  const ChunkSchedule s = zbv_schedule({});
  for (int p = 1; p <= 4; ++p)
    for (int m = 1; m <= 12; ++m) {
      SCOPED_TRACE(fmt::format("P {} M {}", p, m));
      std::map<std::pair<int, int>, std::vector<std::string>> sent, received, one_channel_sent, one_channel_received;
      for (int r = 0; r < p; ++r) {
        const std::vector<PipeOp> ops = s.ops(p, r, m, "x");
        for (int c = 0; c < 2; ++c) {
          int f = 0, b = 0, w = 0, marked = 0;
          for (const PipeOp& o : ops) {
            if (o.chunk != c) continue;
            if (o.forward) {
              EXPECT_EQ(o.micro, f++);
              continue;
            }
            if (o.part != PipeOp::Part::Weights) {
              EXPECT_EQ(o.micro, b++);
            }
            if (o.part != PipeOp::Part::Data) {
              EXPECT_EQ(o.micro, w++);
              marked += o.first_backward;
              EXPECT_EQ(o.first_backward, w == 1);
            }
          }
          EXPECT_EQ(f, m);
          EXPECT_EQ(b, m);
          EXPECT_EQ(w, m);
          EXPECT_EQ(marked, 1);
          EXPECT_GE(chunk_slots(ops, c), 1);
          EXPECT_LE(chunk_slots(ops, c), m);
        }
        // Messages to and from the other workers, by kind.
        auto owner = [&](int stage) { return stage < p ? stage : 2 * p - 1 - stage; };
        for (const PipeOp& o : ops) {
          const int st = s.stage(p, r, o.chunk);
          auto note = [&](int from, int to, const std::string& what, bool out) {
            if (from == to) return;
            (out ? sent : received)[{from, to}].push_back(what);
            (out ? one_channel_sent : one_channel_received)[{from, to}].push_back(what);
          };
          if (o.forward) {
            if (st + 1 < 2 * p) note(r, owner(st + 1), fmt::format("act {} of {}", o.micro, st + 1), true);
            if (st > 0) note(owner(st - 1), r, fmt::format("act {} of {}", o.micro, st), false);
          } else if (o.part != PipeOp::Part::Weights) {
            if (st > 0) note(r, owner(st - 1), fmt::format("grad {} of {}", o.micro, st - 1), true);
            if (st + 1 < 2 * p) note(owner(st + 1), r, fmt::format("grad {} of {}", o.micro, st), false);
          }
        }
      }
      EXPECT_NEAR(s.bubble(p, m), chunk_bubble(s, p, m, 1, 1, 1), 1e-12);  // throws if the order cannot finish
      auto of_kind = [](std::map<std::pair<int, int>, std::vector<std::string>> all, const std::string& kind) {
        for (auto& [k, v] : all) v.erase(std::remove_if(v.begin(), v.end(), [&](const std::string& x) { return x.rfind(kind, 0) != 0; }), v.end());
        return all;
      };
      EXPECT_EQ(of_kind(sent, "act"), of_kind(received, "act"));
      EXPECT_EQ(of_kind(sent, "grad"), of_kind(received, "grad"));
      if (p == 2 && m >= 3) {
        EXPECT_NE(one_channel_sent, one_channel_received) << "one channel would do";
      }
    }
}

// One worker holds both stages and hands over in place both ways: nothing idles. More micro-batches
// shrink the bubble (once the warm-up is full, M >= 2P - 1).
TEST(ZbvSchedule, BubbleOfTheOrderPlayedOut) {
  const ChunkSchedule s = zbv_schedule({});
  for (int m = 1; m <= 6; ++m) EXPECT_NEAR(s.bubble(1, m), 0.0, 1e-12);
  for (int p = 2; p <= 4; ++p)
    for (int m = 2 * p - 1; m < 16; ++m) {
      SCOPED_TRACE(fmt::format("P {} M {}", p, m));
      EXPECT_GT(s.bubble(p, m), 0.0);
      EXPECT_LE(s.bubble(p, m + 1), s.bubble(p, m) + 1e-12);
    }
}

// Its plan: chunk 1 of the last worker reads chunk 0's activations and writes chunk 0's output
// gradient in place (no transfer between them); each chunk's activations and gradients travel on a
// group of their own, each one way between the two workers.
TEST(ZbvSchedule, PlanHandsOverInPlaceAndEachChannelGoesOneWay) {
  StrategyOptions o;
  o.devices = 2;
  o.micro_batches = 4;
  const NetPlan net = plan_net(great_net(8, 0.1875));
  const Plan plan = make_plan("pipeline-zbv", net, o, 8);
  ASSERT_EQ(plan.groups.size(), 4u);
  EXPECT_EQ(plan.groups[1].name, "grads 0");
  EXPECT_EQ(plan.groups[2].name, "acts 1");
  EXPECT_EQ(plan.groups[3].name, "grads 1");
  std::map<int, std::set<std::pair<int, int>>> ways;  // group -> (from, to) of its sends
  int sends = 0;
  for (int w = 0; w < 2; ++w)
    for (const Action& a : plan.actions[w]) {
      if (a.kind != ActionKind::Send) continue;
      const bool grad = plan.buffers.at(a.reads.at(0)).role == BufferRole::InputGrad;
      EXPECT_EQ(plan.groups.at(a.group).name.rfind(grad ? "grads" : (a.group == 0 ? "world" : "acts"), 0), 0u)
          << describe(plan, w, a.id);
      EXPECT_NE(a.peer, w);
      ways[a.group].insert({w, a.peer});
      ++sends;
    }
  // Worker 0 sends stage 0's 4 outputs and stage 3's 4 input gradients; worker 1 stage 2's outputs
  // and stage 1's input gradients: stage 1 to 2 is in place.
  EXPECT_EQ(sends, 16);
  for (const auto& [group, pairs] : ways) EXPECT_EQ(pairs.size(), 1u) << plan.groups[group].name << " goes both ways";
  EXPECT_EQ(ways.size(), 4u);
}

}  // namespace
}  // namespace pb
