// Interleaved 1F1B (pipeline-interleaved): Megatron's order of each worker's chunks, the same
// function as `regular`, and what it holds against 1F1B.
#include <map>

#include "strategies/rules.h"
#include "tests/support.h"
#include "tests/test_strategies_support.h"

namespace pb {
namespace {

using namespace pb::strategies_test;

std::string ops_text(const std::vector<PipeOp>& ops) {
  std::string s;
  for (const PipeOp& o : ops) s += fmt::format("{}{}.{} ", o.forward ? 'F' : 'B', o.chunk, o.micro);
  return s;
}

// Megatron's table for P = 2, V = 2, M = 4 (forward_backward_pipelining_with_interleaving):
// worker 0 warms up with (P-1)*2 + (V-1)*P = 4 forwards, worker 1 with 2; backwards take the
// last chunk first.
TEST(PipelineSchedule, InterleavedIsMegatronsOrder) {
  EXPECT_EQ(ops_text(interleaved_ops(2, 2, 0, 4, "x")),
            "F0.0 F0.1 F1.0 F1.1 F0.2 B1.0 F0.3 B1.1 F1.2 B0.0 F1.3 B0.1 B1.2 B1.3 B0.2 B0.3 ");
  EXPECT_EQ(ops_text(interleaved_ops(2, 2, 1, 4, "x")),
            "F0.0 F0.1 F1.0 B1.0 F1.1 B1.1 F0.2 B0.0 F0.3 B0.1 F1.2 B1.2 F1.3 B1.3 B0.2 B0.3 ");
  // M = P: every forward first (Megatron's all-warm-up case).
  EXPECT_EQ(ops_text(interleaved_ops(2, 2, 1, 2, "x")), "F0.0 F0.1 F1.0 F1.1 B1.0 B1.1 B0.0 B0.1 ");
  EXPECT_THAT([] { interleaved_ops(3, 2, 0, 4, "pipeline-interleaved"); },
              ::testing::ThrowsMessage<UsageError>(HasSubstr("--micro-batches")));
  EXPECT_THAT([] { interleaved_ops(2, 1, 0, 4, "pipeline-interleaved"); },
              ::testing::ThrowsMessage<UsageError>(HasSubstr("--virtual-stages")));
}

// Every chunk's forwards and backwards once each, in micro-batch order, the first backward of
// each chunk marked; and the order runs: played on P workers, each op waiting for the stage
// before it (forward) or after it (backward), all of them finish.
TEST(PipelineSchedule, InterleavedRunsEveryChunkWithoutDeadlock) {
  for (int p = 1; p <= 4; ++p)
    for (int v = 2; v <= 3; ++v)
      for (int m : {p, 2 * p, 3 * p}) {
        SCOPED_TRACE(fmt::format("P {} V {} M {}", p, v, m));
        const int stages = p * v;
        std::vector<std::vector<PipeOp>> ops;
        for (int r = 0; r < p; ++r) {
          ops.push_back(interleaved_ops(p, v, r, m, "x"));
          ASSERT_EQ(static_cast<int>(ops.back().size()), 2 * v * m);
          for (int c = 0; c < v; ++c) {
            int f = 0, b = 0;
            for (const PipeOp& o : ops.back()) {
              if (o.chunk != c) continue;
              if (o.forward) {
                EXPECT_EQ(o.micro, f++);
              } else {
                EXPECT_EQ(o.first_backward, b == 0);
                EXPECT_EQ(o.micro, b++);
              }
            }
            EXPECT_EQ(f, m);
            EXPECT_EQ(b, m);
            EXPECT_GE(chunk_slots(ops.back(), c), 1);
            EXPECT_LE(chunk_slots(ops.back(), c), m);
          }
        }
        std::vector<std::vector<bool>> fwd(stages, std::vector<bool>(m)), bwd = fwd;
        std::vector<std::size_t> next(p, 0);
        for (bool moved = true; moved;) {
          moved = false;
          for (int r = 0; r < p; ++r)
            while (next[r] < ops[r].size()) {
              const PipeOp& o = ops[r][next[r]];
              const int s = o.chunk * p + r;
              const bool ready = o.forward ? s == 0 || fwd[s - 1][o.micro]
                                           : fwd[s][o.micro] && (s == stages - 1 || bwd[s + 1][o.micro]);
              if (!ready) break;
              (o.forward ? fwd : bwd)[s][o.micro] = true;
              ++next[r], moved = true;
            }
        }
        for (int r = 0; r < p; ++r) EXPECT_EQ(next[r], ops[r].size()) << "worker " << r << " stuck";
        // Between two workers activations and gradients share one channel (the plan's world group, a
        // communicator without tags): each worker receives them in the order its peer sends them.
        if (p == 1) continue;  // one worker runs it as 1F1B on one stage (Staged::plan_workers)
        std::map<std::pair<int, int>, std::vector<std::string>> sent, received;  // (from, to) -> messages
        for (int r = 0; r < p; ++r)
          for (const PipeOp& o : ops[r]) {
            const int s = o.chunk * p + r, up = (r + 1) % p, down = (r + p - 1) % p;
            const std::string act = fmt::format("act {} of {}", o.micro, s), grad = fmt::format("grad {} of {}", o.micro, s);
            if (o.forward && s + 1 < stages) sent[{r, up}].push_back(fmt::format("act {} of {}", o.micro, s + 1));
            if (o.forward && s > 0) received[{down, r}].push_back(act);
            if (!o.forward && s > 0) sent[{r, down}].push_back(fmt::format("grad {} of {}", o.micro, s - 1));
            if (!o.forward && s + 1 < stages) received[{up, r}].push_back(grad);
          }
        EXPECT_EQ(sent, received);
      }
}

// The schedule played out with every pass of a chunk taking one time (a whole backward two) idles
// each worker (P-1) / (VM + P-1) of the step: the formula the strategy reports.
TEST(PipelineSchedule, PlayedInterleavedBubbleIsItsFormula) {
  for (int p = 2; p <= 4; ++p)
    for (int v = 2; v <= 3; ++v)
      for (int m : {p, 2 * p, 3 * p}) {
        SCOPED_TRACE(fmt::format("P {} V {} M {}", p, v, m));
        StrategyOptions o;
        o.virtual_stages = v;
        const ChunkSchedule s = interleaved_schedule(o);
        EXPECT_NEAR(chunk_bubble(s, p, m, 1, 1, 1), (p - 1.0) / (v * m + p - 1), 1e-12);
        EXPECT_DOUBLE_EQ(s.bubble(p, m), (p - 1.0) / (v * m + p - 1));
      }
}

// 1-4 workers of two chunks each (the net in 2-8 stages of uneven layer counts), M = P, and 2P
// where torch.chunk cuts 7 samples into 2P pieces; batches of 7 and 10 (uneven micro-batches:
// 3,3,1; 2,2,2,1; 3,3,3,1).
TEST(Strategies, InterleavedMatchesRegular) {
  const std::vector<int64_t> batches = {7, 10};
  for (const NetSpec& net : workloads()) {
    const int layers = static_cast<int>(net.layers.size());
    for (int n = 1; n <= 4 && 2 * n <= layers; ++n)
      for (int m : {n, 2 * n}) {
        if (m > 4) continue;  // 7 samples: fewer than m pieces
        StrategyOptions o = options(n);
        o.micro_batches = m;
        SCOPED_TRACE(fmt::format("pipeline-interleaved on {} workers, M {}, {}", n, m, net.name));
        const Trained t = train("pipeline-interleaved", o, net, batches);
        EXPECT_EQ(t.stats.micro_batches, m);
        EXPECT_DOUBLE_EQ(t.stats.bubble_fraction, (n - 1.0) / (2 * m + n - 1));
        EXPECT_EQ(static_cast<int>(t.stats.chunk_stages.size()), n > 1 ? 2 * n : 0);  // one worker: one stage
        expect_matches(t, reference(net, batches));
      }
  }
  // Three chunks per worker.
  StrategyOptions o = options(2);
  o.micro_batches = 4;
  o.virtual_stages = 3;
  expect_matches(train("pipeline-interleaved", o, small_great_net(), {7}), reference(small_great_net(), {7}));
}

TEST(Strategies, InterleavedRefusesMicroBatchesNotAMultipleOfTheWorkers) {
  StrategyOptions o = options(3);
  o.micro_batches = 4;
  EXPECT_THAT([&] { train("pipeline-interleaved", o, small_great_net(), {8}, 1); },
              ::testing::ThrowsMessage<UsageError>(HasSubstr("--micro-batches")));
}

// Eight equal Linear(64) + ReLU pairs: every stage holds the same parameters under both schedules,
// so the difference is what is in flight.
NetSpec uniform_net() { return test::linear_relu_pairs("uniform_linear", 64, 8); }

// Peak memory at M = 8: each worker holds more under interleaved 1F1B than under 1F1B (a worker's
// warm-up runs (P-r-1)*2 + (V-1)*P chunk forwards, more than its 1F1B share of P-r stage
// forwards, and every chunk has its own input, output-gradient and input-gradient buffers). On
// great_net, whose stages hold unequal parameters, the sum over the workers.
TEST(Strategies, InterleavedHoldsMoreThanOneFOneB) {
  for (int p = 2; p <= 4; p += 2) {
    SCOPED_TRACE(fmt::format("{} workers", p));
    StrategyOptions o = options(p);
    o.micro_batches = 8;
    auto peak = peaks_per_worker({"pipeline-1f1b", "pipeline-interleaved"}, o, uniform_net());
    for (int r = 0; r < p; ++r)
      EXPECT_GT(peak["pipeline-interleaved"][r], peak["pipeline-1f1b"][r]) << "worker " << r;
    auto great = peaks_per_worker({"pipeline-1f1b", "pipeline-interleaved"}, o, great_net(16, 0.25));
    std::size_t inter = 0, one = 0;
    for (int r = 0; r < p; ++r) inter += great["pipeline-interleaved"][r], one += great["pipeline-1f1b"][r];
    EXPECT_GT(inter, one);
  }
}

}  // namespace
}  // namespace pb
