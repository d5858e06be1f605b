// Sharded strategies: fsdp and zero2 match `regular` and hold a shard of the state; tp's channel
// slices match it, layer by layer.
#include "tests/test_strategies_support.h"

namespace pb {
namespace {

using namespace pb::strategies_test;

TEST(Strategies, FsdpMatchesRegular) {
  // Shards of ceil(numel / N), padded: the nets' layers are not all divisible by 3 or 4.
  const NetPlan plan = plan_net(small_great_net());
  int uneven = 0;
  for (const LayerPlan& l : plan.layers) uneven += (l.weight_numel + l.bias_numel) % 4 != 0;
  EXPECT_GT(uneven, 0);
  for (const char* s : {"fsdp", "zero2"}) {
    check_equivalence(s, options(1), {7});
    check_equivalence(s, options(1), {2}, false);  // fewer chunks than workers: the others still hold shards
  }
}

TEST(Strategies, FsdpCollectivesMoveTheShardsOfEveryUnit) {
  // Linear(5, 2): 12 parameters, one unit; over 4 workers shards of 3 (over 5: 3, padded to 15).
  // Per step and worker, nccl-tests sizes: fsdp gathers twice and reduce-scatters once (3 x the
  // padded unit), zero2 gathers once.
  for (int n : {4, 5}) {
    const std::size_t padded = static_cast<std::size_t>(n * ((12 + n - 1) / n)) * sizeof(float);
    for (const auto& [s, calls] : {std::pair<const char*, int>{"fsdp", 3}, {"zero2", 2}}) {
      SCOPED_TRACE(fmt::format("{} over {} workers", s, n));
      const Trained r = train(s, options(n), linear_net(), {7}, 1);
      for (int w = 0; w < n; ++w) EXPECT_EQ(r.stats.workers[w].comm_bytes, calls * padded) << "worker " << w;
      EXPECT_EQ(r.stats.workers_used, n) << "every worker holds a shard, with or without a chunk";
    }
  }
}

TEST(Strategies, FsdpWorkersHoldAShardOfTheState) {
  // The per-worker peak falls with N (parameters, gradients and Adam moments are split), below
  // ddp's replica at the same N; on a net whose parameters outweigh its activations.
  NetSpec net = linear_net();
  net.input = {512};
  net.layers = {LayerSpec{LayerType::Linear}, LayerSpec{LayerType::ReLU}, LayerSpec{LayerType::Linear}};
  net.layers[0].out_features = 256;
  net.layers[2].out_features = 512;
  net.target = Target::Input;
  for (int n : {2, 4}) {
    SCOPED_TRACE(fmt::format("{} workers", n));
    const Trained f = train("fsdp", options(n), net, {8}, 1), d = train("ddp", options(n), net, {8}, 1);
    const Trained z = train("zero2", options(n), net, {8}, 1);
    const std::size_t replica = static_cast<std::size_t>(plan_net(net).param_count) * sizeof(float);
    for (int r = 0; r < n; ++r) {
      EXPECT_LT(f.stats.workers[r].peak_bytes, d.stats.workers[r].peak_bytes) << "worker " << r;
      // ddp holds 4 copies (parameters, gradients, 2 moments); fsdp 4 shards plus one layer in full,
      // and the library workspace of one layer (the CPU linear's transposed weights).
      EXPECT_GE(d.stats.workers[r].peak_bytes, 4 * replica);
      const std::size_t workspace = 512 * 256 * sizeof(float);
      EXPECT_LT(f.stats.workers[r].peak_bytes, 4 * replica / n + 2 * replica * 3 / 5 + workspace) << "worker " << r;
      // zero2 holds the whole parameters from forward to backward, and one unit's gradients.
      EXPECT_GE(z.stats.workers[r].peak_bytes, 4 * replica / n + replica) << "worker " << r;
      EXPECT_LT(z.stats.workers[r].peak_bytes, d.stats.workers[r].peak_bytes) << "worker " << r;
    }
  }
}

// tp's channel slices change the kernels' shapes, so its gradients round differently from
// regular's (within a few 1e-6 of each layer's largest here). Plain Adam (eps 1e-8) divides each
// gradient by its own magnitude, and many of small_great_net's gradients are near 1e-8: over five
// steps some cross zero at rounding level and take a direction of up to lr from it (seen on an AMD
// EPYC: 8e-5 apart). With eps 1e-6 the larger layers' gradients are still normalized by v and the
// small ones move by lr g / eps, which rounding cannot turn: workloads_eps_1e6().

TEST(Strategies, TpMatchesRegular) {
  // great_net's last conv has 3 output channels: at N = 4 it stays whole on every worker.
  for (const NetSpec& net : workloads_eps_1e6()) {
    for (int n = 1; n <= 4; ++n) {
      SCOPED_TRACE(fmt::format("tp on {} workers, {}", n, net.name));
      if (net.layers.size() == 1 && n > 2) continue;  // Linear(5, 2): refused, below
      const Trained r = train("tp", options(n), net, {7});
      expect_matches(r, reference(net, {7}));
      for (int w = 0; w < n; ++w) {
        EXPECT_EQ(r.stats.workers[w].samples, 7) << "the whole batch on worker " << w;
        if (n > 1) {
          EXPECT_GT(r.stats.workers[w].comm_bytes, 0u) << "worker " << w << " gathered nothing: no layer split";
        }
      }
    }
  }
}

TEST(Strategies, TpGradientsMatchRegularLayerByLayer) {
  // One step with lr 1e6, eps 1 moves each parameter by 1e6 g / (|g| + 1): the first gradients,
  // each layer's within 1e-4 of its largest.
  NetSpec net = small_great_net();
  net.adam.lr = 1e6;
  net.adam.eps = 1.0;
  const NetPlan plan = plan_net(net);
  const std::vector<float> p0 = init_params(plan, 0);
  const Trained ref = train("regular", options(1), net, {7}, 1);
  for (int n = 2; n <= 4; ++n) {
    SCOPED_TRACE(fmt::format("tp on {} workers", n));
    const Trained got = train("tp", options(n), net, {7}, 1);
    for (const LayerPlan& l : plan.layers) {
      double largest = 0, worst = 0;
      for (int64_t i = l.param_offset; i < l.param_offset + l.weight_numel + l.bias_numel; ++i) {
        largest = std::max(largest, double(std::abs(ref.params[i] - p0[i])));
        worst = std::max(worst, double(std::abs(got.params[i] - ref.params[i])));
      }
      EXPECT_LE(worst, 1e-4 * largest) << "layer at parameter " << l.param_offset;
    }
  }
}

TEST(Strategies, TpRefusesANetWithNothingToSplit) {
  // Linear(5, 2) over 3 or 4 workers: no layer has an output channel for every worker.
  for (int n : {3, 4}) {
    try {
      train("tp", options(n), linear_net(), {7}, 1);
      ADD_FAILURE() << "tp of Linear(5, 2) over " << n << " workers ran";
    } catch (const UsageError& e) {
      EXPECT_THAT(e.what(), HasSubstr(fmt::format("no layer of the net has {} or more output channels", n)));
      EXPECT_THAT(e.what(), HasSubstr("the largest has 2"));
    }
  }
}

}  // namespace
}  // namespace pb
