// Hybrids dp x pp and dp x tp: every factorization matches `regular`, and each worker all-reduces
// what its stage or slice holds.
#include "tests/test_strategies_support.h"

namespace pb {
namespace {

using namespace pb::strategies_test;

// dp x pp: every factorization D x P of 1-4 workers (P up to the layers), uneven pieces (8 over 3
// replicas: 3,3,2, cut into micro-batches 2,1 / 2,1 / 1,1) and a second batch of another size.
TEST(Strategies, HybridsMatchRegular) {
  for (const NetSpec& net : workloads()) {
    const int layers = static_cast<int>(net.layers.size());
    for (int n = 1; n <= 4; ++n)
      for (int dp = 1; dp <= n; ++dp) {
        const int pp = n / dp;
        if (n % dp || pp > layers) continue;
        const std::string name = hybrid_name(dp, pp, Schedule::GPipe, false);
        StrategyOptions o = options(n);
        o.micro_batches = 2;
        SCOPED_TRACE(fmt::format("{} on {}", name, net.name));
        expect_matches(train(name, o, net, {8, 12}), reference(net, {8, 12}));
      }
  }
  for (const char* s : {"dp2xpp2-1f1b", "dp2xpp2-recompute", "dp2xpp2-1f1b-recompute", "dp2xpp2"}) {
    StrategyOptions o = options(4);
    o.micro_batches = 3;  // pieces 4,3 -> micro-batches 2,2 and 1,1,1
    SCOPED_TRACE(s);
    expect_matches(train(s, o, small_great_net(), {7}), reference(small_great_net(), {7}));
  }
}

// dp x tp: every factorization D x T of 1-4 workers (T up to what the net can split: Linear(5, 2)
// over 2 at most), uneven pieces and a second batch of another size.
TEST(Strategies, DpTpHybridsMatchRegular) {
  for (const NetSpec& net : workloads()) {
    const bool linear = net.layers.size() == 1;
    for (int n = 1; n <= 4; ++n)
      for (int dp = 1; dp <= n; ++dp) {
        const int tp = n / dp;
        if (n % dp || (linear && tp > 2)) continue;
        const std::string name = dptp_name(dp, tp);
        SCOPED_TRACE(fmt::format("{} on {}", name, net.name));
        expect_matches(train(name, options(n), net, {8, 12}), reference(net, {8, 12}));
      }
  }
}

// dp2xtp2 is tp within each replica (the same all-gathers as tp on 2 workers at the replica's
// batch) plus one all-reduce of each worker's slice gradients: over the two tp ranks, the whole
// net's parameters once.
TEST(Strategies, DpTpAllReducesEachSliceOnceMore) {
  const NetSpec net = small_great_net();
  const Trained h = train("dp2xtp2", options(4), net, {8}, 1);
  const Trained t = train("tp", options(2), net, {4}, 1);
  const auto ar = [](const WorkerStats& w) { return w.kinds[static_cast<int>(CollKind::AllReduce)]; };
  const auto ag = [](const WorkerStats& w) { return w.kinds[static_cast<int>(CollKind::AllGather)]; };
  std::size_t extra = 0;
  for (int r = 0; r < 4; ++r) {
    SCOPED_TRACE(fmt::format("worker {}", r));
    const WorkerStats& w = h.stats.workers[r];
    const WorkerStats& same = t.stats.workers[r % 2];
    EXPECT_EQ(w.samples, 4);
    EXPECT_EQ(ag(w).bytes, ag(same).bytes);
    EXPECT_EQ(ag(w).calls, ag(same).calls);
    EXPECT_EQ(ar(w).calls, ar(same).calls + 1);
    if (r < 2) extra += ar(w).bytes - ar(same).bytes;
  }
  int64_t whole = 0;  // every layer of this net has at least 2 outputs: all are split
  for (const LayerPlan& l : plan_net(net).layers) {
    if (l.weight_numel > 0) {
      ASSERT_GE(l.out[0], 2);
    }
    whole += l.weight_numel + l.bias_numel;
  }
  EXPECT_EQ(extra, static_cast<std::size_t>(whole) * sizeof(float));
}

// Worker r is stage r % P of replica r / P: the replicas hold the same stages, each worker
// all-reduces exactly its stage's gradients once with the other replicas' holder of that stage,
// and its samples are its replica's piece of the batch.
TEST(Strategies, HybridStagesAreReplicatedAndAllReduced) {
  const NetSpec net = small_great_net();
  const NetPlan plan = plan_net(net);
  StrategyOptions o = options(6);
  o.micro_batches = 2;
  const Trained t = train("dp3xpp2", o, net, {8}, 1);  // pieces 3,3,2
  ASSERT_EQ(t.stats.workers.size(), 6u);
  EXPECT_TRUE(t.stats.staged);
  EXPECT_EQ(t.stats.micro_batches, 2);
  EXPECT_DOUBLE_EQ(t.stats.bubble_fraction, 1.0 / 3.0);
  EXPECT_EQ(t.stats.workers[0].layer_end, t.stats.workers[1].layer_begin);
  const std::vector<int64_t> pieces = {3, 3, 2};
  for (int r = 0; r < 6; ++r) {
    SCOPED_TRACE(fmt::format("worker {}", r));
    const WorkerStats& w = t.stats.workers[r];
    EXPECT_EQ(w.layer_begin, t.stats.workers[r % 2].layer_begin);
    EXPECT_EQ(w.layer_end, t.stats.workers[r % 2].layer_end);
    EXPECT_EQ(w.samples, pieces[r / 2]);
    int64_t stage_params = 0;
    for (int l = w.layer_begin; l < w.layer_end; ++l) stage_params += plan.layers[l].weight_numel + plan.layers[l].bias_numel;
    const CollStats& all_reduce = w.kinds[static_cast<int>(CollKind::AllReduce)];
    EXPECT_EQ(all_reduce.calls, 1);
    EXPECT_EQ(all_reduce.bytes, static_cast<std::size_t>(stage_params) * sizeof(float));
    EXPECT_GT(w.kinds[static_cast<int>(CollKind::SendRecv)].calls, 0);
    EXPECT_EQ(w.comm_bytes, all_reduce.bytes + w.kinds[static_cast<int>(CollKind::SendRecv)].bytes);
  }
}

}  // namespace
}  // namespace pb
