// Data parallelism: dp and ddp match `regular` (losses and parameters after 5 Adam steps) on CPU
// for 1-4 workers and uneven splits, ddp's gradient weighting and buckets, dp reproduces the
// DataParallel tutorial's chunk sizes, and the per-worker statistics.
#include "tests/test_strategies_support.h"

namespace pb {
namespace {

using namespace pb::strategies_test;

TEST(Strategies, WorkloadsActuallyTrain) {
  // Equivalence proves nothing on a net whose gradients vanish: the loss must move.
  for (const NetSpec& net : workloads()) {
    SCOPED_TRACE(net.name);
    const Trained& r = reference(net, {7});
    EXPECT_GT(std::abs(r.losses.front() - r.losses.back()), 1e-6 * std::abs(r.losses.front()));
    const std::vector<float> init = init_params(plan_net(net), 0);
    double moved = 0;
    for (std::size_t i = 0; i < init.size(); ++i) moved = std::max(moved, double(std::abs(r.params[i] - init[i])));
    EXPECT_GT(moved, 1e-6);
  }
}

TEST(Strategies, RegisteredByName) {
  EXPECT_EQ(strategy_names(), (std::vector<std::string>{"regular", "dp", "ddp", "mp", "pipeline", "pipeline-1f1b",
                                                       "pipeline-zb", "pipeline-interleaved", "pipeline-zbv", "pipeline-recompute", "pipeline-1f1b-recompute", "fsdp",
                                                       "zero2", "fsdp-prefetch", "zero2-prefetch", "tp", "dpxpp",
                                                       "dpxtp", "hsdp"}));
}

TEST(Strategies, DpMatchesRegular) {
  check_equivalence("dp", options(1), {7});
  check_equivalence("dp", options(1), {2}, false);  // fewer chunks than workers
}

TEST(Strategies, DdpMatchesRegular) {
  check_equivalence("ddp", options(1), {7});
  StrategyOptions tiny = options(1);
  tiny.bucket_bytes = tiny.first_bucket_bytes = 1024;  // many buckets, started layer by layer during backward
  check_equivalence("ddp", tiny, {7}, false);
}

// torch DDP's weighting in double: each rank's gradient of its local mean, averaged over the
// ranks that got a chunk, then Adam; `steps` steps on one batch.
std::vector<double> local_average_reference(const NetSpec& net, int64_t batch, int workers, int steps) {
  const NetPlan plan = plan_net(net);
  const int64_t in = numel_of(plan.input), out = numel_of(plan.output);
  const std::vector<float> x = synthetic_values(batch * in, 1);
  const std::vector<float> t = net.target == Target::Input ? x : synthetic_values(batch * out, 2);
  const std::vector<int64_t> chunks = split_batch(batch, workers, "ddp");
  const std::vector<int64_t> at = chunk_offsets(chunks);
  std::vector<double> p = ref::to_double(init_params(plan, 0)), m(p.size(), 0.0), v(p.size(), 0.0);
  for (int k = 1; k <= steps; ++k) {
    std::vector<double> g(p.size(), 0.0), gi;
    for (std::size_t c = 0; c < chunks.size(); ++c) {
      const auto xs = ref::to_double(std::vector<float>(x.begin() + at[c] * in, x.begin() + (at[c] + chunks[c]) * in));
      const auto ts = ref::to_double(std::vector<float>(t.begin() + at[c] * out, t.begin() + (at[c] + chunks[c]) * out));
      ref::net_loss(plan, p, xs, ts, chunks[c], &gi);
      for (std::size_t i = 0; i < g.size(); ++i) g[i] += gi[i] / static_cast<double>(chunks.size());
    }
    ref::adam(p, g, m, v, net.adam, k);
  }
  return p;
}

double worst_excess(const std::vector<float>& got, const std::vector<double>& want) {
  return ref::worst(got, want, 1e-5, 1e-4).excess;
}

TEST(Strategies, DdpLocalAverageIsTorchDdpsWeighting) {
  StrategyOptions local = options(1);
  local.grad_average = StrategyOptions::GradAverage::Local;
  // A 4-conv net (small enough for the double reference) and Linear(5, 2), both SGD-like so
  // that the weighting shows in the parameters.
  const NetSpec conv = load_net_json((test::source_dir() / "tests/fixtures/conv_odd/net.json").string());
  for (const NetSpec& net : {scale_sensitive(conv, 1.0, 1.0), scale_sensitive(linear_net(), 1.0, 10.0)}) {
    for (int n = 2; n <= 4; ++n) {
      SCOPED_TRACE(fmt::format("{} on {} workers", net.name, n));
      local.devices = n;
      // 7 samples: 4,3 / 3,3,1 / 2,2,2,1 -- uneven chunks, where the two weightings differ.
      const std::vector<double> want = local_average_reference(net, 7, n, 5);
      const Trained got = train("ddp", local, net, {7});
      const ref::Mismatch mm = ref::worst(got.params, want, 1e-5, 1e-4);
      EXPECT_LE(mm.excess, 0.0) << ref::describe(mm);
      // The default (global mean) is a different function there: the test could tell them apart.
      StrategyOptions global = local;
      global.grad_average = StrategyOptions::GradAverage::Global;
      EXPECT_GT(worst_excess(train("ddp", global, net, {7}).params, want), 0.0) << "global equals local on uneven chunks";
      // Even chunks (8 over 2 or 4): the same function as global and regular.
      if (n != 3) expect_matches(train("ddp", local, net, {8}), reference(net, {8}));
    }
  }
}

TEST(Strategies, DdpBucketsFirstSmallThenFull) {
  const NetPlan plan = plan_net(small_great_net());
  auto be = make_backend(cpu(0));
  Sequential m(plan, 0, static_cast<int>(plan.layers.size()), *be);
  std::vector<std::pair<int64_t, int64_t>> layers;  // parameter ranges, last layer first
  for (int i = m.end() - 1; i >= m.begin(); --i)
    if (const auto r = m.layer_grad_range(i); r.second > r.first) layers.push_back(r);
  ASSERT_GE(layers.size(), 4u);
  const auto bytes = [](std::pair<int64_t, int64_t> r) { return static_cast<std::size_t>(r.second - r.first) * 4; };
  // A 1-byte first bucket holds the last layer alone; one huge bucket takes the rest.
  auto b = ddp_buckets(m, 1, std::size_t(1) << 40);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0], layers[0]);
  EXPECT_EQ(b[1], std::make_pair(int64_t{0}, layers[1].second));
  // Caps between layer sizes: every bucket but the last closes at the first layer that fills
  // it, whole layers only, contiguous and covering every parameter once.
  const std::size_t first = bytes(layers[0]) + bytes(layers[1]) / 2, rest = bytes(layers[2]) + 1;
  b = ddp_buckets(m, first, rest);
  EXPECT_EQ(b[0], std::make_pair(layers[1].first, layers[0].second)) << "first bucket: the last two layers";
  std::size_t li = 0;
  for (std::size_t k = 0; k < b.size(); ++k) {
    SCOPED_TRACE(fmt::format("bucket {}", k));
    EXPECT_EQ(b[k].second, layers[li].second) << "starts at a layer boundary";
    std::pair<int64_t, int64_t> acc{layers[li].first, layers[li].second};
    while (bytes(acc) < (k == 0 ? first : rest) && li + 1 < layers.size() && layers[li + 1].second == acc.first)
      acc.first = layers[++li].first;
    EXPECT_EQ(b[k], acc);
    ++li;
  }
  EXPECT_EQ(li, layers.size());
  EXPECT_EQ(b.back().first, 0);
}

TEST(Strategies, DdpReplicasRejoinAfterSittingOut) {
  // 7 over 4 uses 4 workers, 2 over 4 only 2; the others must come back in step.
  StrategyOptions o = options(4);
  for (const NetSpec& net : workloads()) {
    SCOPED_TRACE(net.name);
    const Trained r = train("ddp", o, net, {7, 2, 7}, 2);
    expect_matches(r, reference(net, {7, 2, 7}, 2));
    EXPECT_EQ(r.per_batch[1].workers_used, 2);
    EXPECT_EQ(r.per_batch[2].workers_used, 4);
  }
}

// The tutorial: Linear(5, 2), 100 samples in batches of 30 (30, 30, 30, 10), nn.DataParallel on
// 2, 3 and 8 GPUs; the "In Model: input size" lines it prints, per batch.
TEST(Strategies, DpReproducesTheTutorialsChunks) {
  const std::map<int, std::vector<std::vector<int64_t>>> printed = {
      {2, {{15, 15}, {15, 15}, {15, 15}, {5, 5}}},
      {3, {{10, 10, 10}, {10, 10, 10}, {10, 10, 10}, {4, 4, 2}}},
      {8, {{4, 4, 4, 4, 4, 4, 4, 2}, {4, 4, 4, 4, 4, 4, 4, 2}, {4, 4, 4, 4, 4, 4, 4, 2}, {2, 2, 2, 2, 2}}},
  };
  const std::vector<int64_t> batches = {30, 30, 30, 10};
  for (const auto& [gpus, want] : printed) {
    SCOPED_TRACE(fmt::format("{} workers", gpus));
    const Trained r = train("dp", options(gpus), linear_net(), batches, 1);
    for (std::size_t b = 0; b < batches.size(); ++b) {
      const StepStats& st = r.per_batch[b];
      std::vector<int64_t> ran;
      for (int i = 0; i < st.workers_used; ++i) ran.push_back(st.workers[i].samples);
      EXPECT_EQ(ran, want[b]) << "batch " << b + 1;
      for (int i = st.workers_used; i < gpus; ++i) EXPECT_EQ(st.workers[i].samples, 0) << "idle worker " << i;
      EXPECT_EQ(st.communicator, "inproc");
    }
    expect_matches(r, reference(linear_net(), batches, 1));
  }
}

TEST(Strategies, StatsPerWorker) {
  const NetSpec net = small_great_net();
  StrategyOptions o = options(3);
  o.micro_batches = 4;
  const Trained p = train("pipeline", o, net, {7}, 1);
  EXPECT_EQ(p.stats.workers_used, 3);
  EXPECT_EQ(p.stats.micro_batches, 4);
  EXPECT_DOUBLE_EQ(p.stats.bubble_fraction, 2.0 / 6.0);
  for (const WorkerStats& w : p.stats.workers) {
    EXPECT_EQ(w.samples, 7);
    EXPECT_GT(w.comm_bytes, 0u);
    EXPECT_GT(w.compute_s, 0.0);
    EXPECT_GT(w.peak_bytes, 0u);
  }
  EXPECT_EQ(p.stats.workers[1].device, "cpu:1");
  const Trained d = train("ddp", options(4), net, {7}, 1);
  EXPECT_EQ(d.stats.communicator, "inproc");
  const std::size_t grads = plan_net(net).param_count * sizeof(float);
  for (const WorkerStats& w : d.stats.workers) EXPECT_EQ(w.comm_bytes, grads);  // every gradient once
  const Trained solo = train("ddp", options(1), net, {7}, 1);
  EXPECT_EQ(solo.stats.communicator, "none");
  EXPECT_EQ(solo.stats.workers[0].comm_bytes, 0u);
}

}  // namespace
}  // namespace pb
