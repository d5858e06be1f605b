// Strategies: every one matches `regular` (losses and parameters after 5 Adam steps) on CPU for
// 1-4 workers and uneven splits; dp reproduces the DataParallel tutorial's chunk sizes; bad
// input is refused with a clear UsageError, also through the parbench binary (exit code 2).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "tests/paths.h"
#include "engine/check.h"
#include "engine/fsutil.h"
#include "strategies/batch.h"
#include "strategies/group.h"
#include "strategies/registry.h"
#include "strategies/stages.h"
#include "tests/reference.h"
#include "workloads/workload.h"

namespace pb {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

struct Trained {
  std::vector<double> losses;
  std::vector<float> params;
  StepStats stats;  // after the last step
  std::vector<StepStats> per_batch;
};

StrategyOptions options(int devices) {
  StrategyOptions o;
  o.devices = devices;
  o.backend.threads = 1;  // the test machine's cores are shared by all workers
  return o;
}

// Trains `net` from seeded parameters on the batches given (sizes, in order over one seeded data
// set), `steps` steps per batch.
Trained train(const std::string& strategy, const StrategyOptions& o, const NetSpec& net,
          const std::vector<int64_t>& batches, int steps = 5) {
  const NetPlan plan = plan_net(net);
  int64_t total = 0;
  for (int64_t b : batches) total += b;
  const int64_t in = numel_of(plan.input), out = numel_of(plan.output);
  const std::vector<float> x = synthetic_values(total * in, 1);
  const std::vector<float> t = net.target == Target::Input ? x : synthetic_values(total * out, 2);
  auto s = make_strategy(strategy, o);
  s->setup(plan, init_params(plan, 0), net.adam);
  Trained r;
  int64_t at = 0;
  for (int64_t b : batches) {
    s->load_batch(std::vector<float>(x.begin() + at * in, x.begin() + (at + b) * in),
                  std::vector<float>(t.begin() + at * out, t.begin() + (at + b) * out), b);
    at += b;
    for (int k = 0; k < steps; ++k) {
      s->step();
      r.losses.push_back(s->loss());
    }
    r.per_batch.push_back(s->stats());
  }
  r.params = s->params();
  r.stats = s->stats();
  return r;
}

const Trained& reference(const NetSpec& net, const std::vector<int64_t>& batches, int steps = 5) {
  static std::map<std::string, Trained> cache;
  std::string key = fmt::format("{} {} {} {}", net.name, net.input.back(), fmt::join(batches, ","), steps);
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, train("regular", options(1), net, batches, steps)).first;
  return it->second;
}

// Losses within rel `loss_rtol`; parameters within atol + rtol |ref|, reporting the worst element.
void expect_matches(const Trained& got, const Trained& ref, double loss_rtol = 1e-5, double atol = 1e-5, double rtol = 1e-4) {
  ASSERT_EQ(got.losses.size(), ref.losses.size());
  for (std::size_t k = 0; k < ref.losses.size(); ++k)
    EXPECT_NEAR(got.losses[k], ref.losses[k], loss_rtol * std::abs(ref.losses[k])) << "loss of step " << k + 1;
  ASSERT_EQ(got.params.size(), ref.params.size());
  double worst = -1;
  std::size_t at = 0;
  for (std::size_t i = 0; i < ref.params.size(); ++i) {
    const double excess = std::abs(double(got.params[i]) - ref.params[i]) - (atol + rtol * std::abs(ref.params[i]));
    if (excess > worst) worst = excess, at = i;
  }
  EXPECT_LE(worst, 0.0) << "worst parameter mismatch at [" << at << "]: " << got.params[at] << " vs "
                        << ref.params[at] << " (of " << ref.params.size() << ")";
}

// Width 0.1875 rather than 0.125: at 0.125 every ReLU of the last layer is dead from the start
// (seeded init), the gradients are zero and any strategy would "match".
NetSpec small_great_net() { return great_net(8, 0.1875); }

// Adam is blind to a uniform gradient scale (m / sqrt(v)); with eps far above the gradients it
// behaves like SGD (update ~ lr g / eps), so a wrong scale (a local instead of the global mean)
// shows in the parameters.
NetSpec scale_sensitive(NetSpec net, double lr, double eps) {
  net.name += "/sgd-like";
  net.adam.lr = lr;
  net.adam.eps = eps;
  return net;
}

std::vector<NetSpec> workloads() {
  return {small_great_net(), linear_net(), scale_sensitive(small_great_net(), 1.0, 1.0),
          scale_sensitive(linear_net(), 1.0, 10.0)};
}

void check_equivalence(const std::string& strategy, const StrategyOptions& base, const std::vector<int64_t>& batches,
                       bool linear_too = true) {
  for (const NetSpec& net : workloads()) {
    const int layers = static_cast<int>(net.layers.size());
    if (layers == 1 && !linear_too) continue;
    for (int n = 1; n <= 4; ++n) {
      if ((strategy == "mp" || strategy.rfind("pipeline", 0) == 0) && n > layers) continue;  // a stage per layer at most
      StrategyOptions o = base;
      o.devices = n;
      SCOPED_TRACE(fmt::format("{} on {} workers, {}, batches {}", strategy, n, net.name, fmt::join(batches, ",")));
      expect_matches(train(strategy, o, net, batches), reference(net, batches));
    }
  }
}

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
                                                       "pipeline-recompute", "pipeline-1f1b-recompute", "fsdp",
                                                       "zero2", "tp", "dpxpp", "dpxtp"}));
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
// small ones move by lr g / eps, which rounding cannot turn.
std::vector<NetSpec> tp_workloads() {
  std::vector<NetSpec> nets = workloads();
  for (NetSpec& net : nets)
    if (net.adam.eps < 1e-6) net.adam.eps = 1e-6, net.name += "/eps:1e-6";
  return nets;
}

TEST(Strategies, TpMatchesRegular) {
  // great_net's last conv has 3 output channels: at N = 4 it stays whole on every worker.
  for (const NetSpec& net : tp_workloads()) {
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

TEST(Strategies, MpMatchesRegular) {
  check_equivalence("mp", options(1), {7});
}

TEST(Strategies, PipelineMatchesRegular) {
  StrategyOptions o = options(1);
  o.micro_batches = 4;  // 7 -> 2,2,2,1
  check_equivalence("pipeline", o, {7});
  o.micro_batches = 3;  // 7 -> 3,3,1
  check_equivalence("pipeline", o, {7}, false);
}

// Every schedule x recompute, uneven micro-batches (7 -> 2,2,2,1 and 3,3,1), and a second batch
// of another size (the activation slots are resized).
TEST(Strategies, PipelineSchedulesAndRecomputeMatchRegular) {
  for (const char* s : {"pipeline-1f1b", "pipeline-recompute", "pipeline-1f1b-recompute"}) {
    StrategyOptions o = options(1);
    o.micro_batches = 4;
    check_equivalence(s, o, {7});
    o.micro_batches = 3;
    check_equivalence(s, o, {7, 5}, false);
  }
}

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

// The options select the same schedules as the registered names.
TEST(Strategies, PipelineOptionsNameTheVariant) {
  StrategyOptions o = options(2);
  o.schedule = Schedule::OneFOneB;
  o.recompute = true;
  EXPECT_EQ(make_strategy("pipeline", o)->name(), "pipeline-1f1b-recompute");
  EXPECT_EQ(make_strategy("pipeline-1f1b", options(2))->name(), "pipeline-1f1b");
  EXPECT_EQ(make_strategy("mp", o)->name(), "mp");
}

// Peak memory per stage at M = 8: GPipe holds the activations of all 8 micro-batches, 1F1B at
// most P - s on stage s, recompute only the stage inputs and one micro-batch's activations.
TEST(Strategies, OneFOneBAndRecomputeHoldLessThanGPipe) {
  const NetSpec net = great_net(16, 0.25);
  for (int p = 2; p <= 4; ++p) {
    SCOPED_TRACE(fmt::format("{} stages", p));
    StrategyOptions o = options(p);
    o.micro_batches = 8;
    std::map<std::string, std::vector<std::size_t>> peak;
    for (const char* s : {"pipeline", "pipeline-1f1b", "pipeline-recompute", "pipeline-1f1b-recompute"}) {
      const Trained t = train(s, o, net, {16}, 1);
      for (const WorkerStats& w : t.stats.workers) peak[s].push_back(w.peak_bytes);
    }
    for (int st = 0; st < p; ++st) {
      SCOPED_TRACE(fmt::format("stage {}", st));
      EXPECT_LT(peak["pipeline-1f1b"][st], peak["pipeline"][st]);
      EXPECT_LT(peak["pipeline-recompute"][st], peak["pipeline"][st]);
      EXPECT_LE(peak["pipeline-1f1b-recompute"][st], peak["pipeline-1f1b"][st]);
    }
  }
}

TEST(Strategies, ExplicitBalance) {
  const NetSpec net = small_great_net();  // 28 layers: conv, relu, conv, relu, ...
  const std::vector<std::vector<int>> balances = {{1, 27}, {3, 25}, {5, 9, 14}, {7, 7, 7, 7}, {2, 1, 1, 24}};
  for (const auto& b : balances) {
    for (const char* s : {"mp", "pipeline"}) {
      StrategyOptions o = options(static_cast<int>(b.size()));
      o.balance = b;
      SCOPED_TRACE(fmt::format("{} --balance {}", s, fmt::join(b, ",")));
      const Trained r = train(s, o, net, {7});
      expect_matches(r, reference(net, {7}));
      int at = 0;
      for (std::size_t i = 0; i < b.size(); ++i) {
        EXPECT_EQ(r.stats.workers[i].layer_begin, at);
        EXPECT_EQ(r.stats.workers[i].layer_end, at + b[i]);
        at += b[i];
      }
    }
  }
}

TEST(Strategies, StagesBalancedByFlopsKeepReluWithItsConv) {
  const NetPlan plan = plan_net(small_great_net());
  for (int p = 1; p <= 6; ++p) {
    const auto st = split_stages(plan, p, {}, "mp");
    ASSERT_EQ(static_cast<int>(st.size()), p);
    EXPECT_EQ(st.front().first, 0);
    EXPECT_EQ(st.back().second, 28);
    for (int s = 0; s < p; ++s) {
      EXPECT_LT(st[s].first, st[s].second);
      EXPECT_EQ(st[s].first % 2, 0) << "stage " << s << " starts with a ReLU";
      if (s > 0) {
        EXPECT_EQ(st[s].first, st[s - 1].second);
      }
    }
  }
  // The largest stage is no bigger than any other contiguous split would force: for 2 stages,
  // compare with every cut.
  const auto two = split_stages(plan, 2, {}, "mp");
  auto flops = [&](int b, int e) {
    double f = 0;
    for (int i = b; i < e; ++i) f += plan.layers[i].forward_flops;
    return f;
  };
  const double mine = std::max(flops(0, two[0].second), flops(two[0].second, 28));
  for (int cut = 1; cut < 28; ++cut) EXPECT_LE(mine, std::max(flops(0, cut), flops(cut, 28)));
  // Too few producers for the stages: the ReLU gets a stage of its own.
  NetSpec tiny = linear_net();
  tiny.layers.push_back(LayerSpec{LayerType::ReLU});
  EXPECT_EQ(split_stages(plan_net(tiny), 2, {}, "mp"), (std::vector<std::pair<int, int>>{{0, 1}, {1, 2}}));
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

std::string usage_error(const std::string& strategy, StrategyOptions o, const NetSpec& net, int64_t batch) {
  try {
    train(strategy, o, net, {batch}, 1);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "no UsageError";
}

TEST(Strategies, BadInput) {
  EXPECT_THAT(usage_error("nope", options(1), linear_net(), 4),
              HasSubstr("unknown strategy 'nope': expected one of regular, dp, ddp, mp, pipeline, pipeline-1f1b, "
                        "pipeline-recompute, pipeline-1f1b-recompute"));
  EXPECT_THAT(usage_error("dp", options(0), linear_net(), 4), HasSubstr("--devices must be at least 1, got 0"));
  EXPECT_THAT(usage_error("mp", options(2), linear_net(), 4),
              HasSubstr("mp: 2 stages but the net has only 1 layer(s)"));
  EXPECT_THAT(usage_error("pipeline", options(29), small_great_net(), 4), HasSubstr("only 28 layer(s)"));
  StrategyOptions o = options(2);
  o.balance = {10, 10};
  EXPECT_THAT(usage_error("mp", o, small_great_net(), 4), HasSubstr("--balance 10,10 sums to 20, but the net has 28 layers"));
  o.balance = {28, 0};
  EXPECT_THAT(usage_error("pipeline", o, small_great_net(), 4), HasSubstr("every stage needs at least one layer"));
  o.balance = {28};
  EXPECT_THAT(usage_error("mp", o, small_great_net(), 4), HasSubstr("has 1 entries for 2 stages"));
  o = options(2);
  o.micro_batches = 5;
  EXPECT_THAT(usage_error("pipeline", o, small_great_net(), 4), HasSubstr("5 micro-batches but the batch has only 4"));
  o.micro_batches = 0;
  EXPECT_THAT(usage_error("pipeline", o, small_great_net(), 4), HasSubstr("--micro-batches must be at least 1"));
  o = options(2);
  o.kind = DeviceKind::Cuda;
  if (cuda_device_count() == 0) {
    EXPECT_THAT(usage_error("ddp", o, linear_net(), 4), HasSubstr("no CUDA device"));
  } else {
    o.devices = cuda_device_count() + 1;
    EXPECT_THAT(usage_error("ddp", o, linear_net(), 4), HasSubstr("pass --oversubscribe"));
  }
}

TEST(Strategies, HybridNamesAndRefusals) {
  int dp = 0, pp = 0;
  Schedule sc = Schedule::GPipe;
  bool rc = false;
  EXPECT_EQ(hybrid_name(2, 4, Schedule::OneFOneB, true), "dp2xpp4-1f1b-recompute");
  ASSERT_TRUE(parse_hybrid_name("dp4xpp2-1f1b", &dp, &pp, &sc, &rc));
  EXPECT_EQ(dp, 4);
  EXPECT_EQ(pp, 2);
  EXPECT_EQ(sc, Schedule::OneFOneB);
  EXPECT_FALSE(rc);
  for (const char* bad : {"dp02xpp2", "dp2xpp", "dp2xpp2-", "dp2xpp2-gpipe", "dp0xpp2", "dp+2xpp2", "dpxpp", "xdp2xpp2"})
    EXPECT_FALSE(parse_hybrid_name(bad, &dp, &pp, &sc, &rc)) << bad;
  EXPECT_TRUE(strategy_info("dp2xpp2").multi_process);
  EXPECT_EQ(dptp_name(3, 2), "dp3xtp2");
  ASSERT_TRUE(parse_dptp_name("dp3xtp2", &dp, &pp));
  EXPECT_EQ(dp, 3);
  EXPECT_EQ(pp, 2);
  for (const char* bad : {"dp3xtp2-1f1b", "dp03xtp2", "dp3xtp", "dpxtp", "dp3xpp2"})
    EXPECT_FALSE(parse_dptp_name(bad, &dp, &pp)) << bad;
  EXPECT_EQ(strategy_info("dp2xtp2").name, "dpxtp");
  EXPECT_THAT(usage_error("dp2xtp2", options(2), small_great_net(), 8),
              HasSubstr("dp2xtp2: 2 replicas of a 2-way tp group run on 4 devices, got --devices 2"));
  EXPECT_THAT(usage_error("dpxtp", options(4), small_great_net(), 8), HasSubstr("pick one as dp<D>xtp<T>"));
  EXPECT_THAT(usage_error("dp2xtp3", options(6), linear_net(), 8),
              HasSubstr("dp2xtp3: no layer of the net has 3 or more output channels"));
  StrategyOptions o = options(4);
  o.schedule = Schedule::OneFOneB;
  EXPECT_EQ(make_strategy("dp2xpp2", o)->name(), "dp2xpp2-1f1b");  // as "pipeline" takes the options
  EXPECT_THAT(usage_error("dp2xpp2", options(3), small_great_net(), 8),
              HasSubstr("dp2xpp2: 2 replicas of a 2-stage pipeline run on 4 devices, got --devices 3"));
  EXPECT_THAT(usage_error("dpxpp", options(4), small_great_net(), 8), HasSubstr("pick one as dp<D>xpp<P>"));
  EXPECT_THAT(usage_error("dp4xpp1", options(4), small_great_net(), 3),
              HasSubstr("cuts the batch of 3 into 3 piece(s) for 4 replicas"));
  o = options(4);
  o.micro_batches = 3;
  EXPECT_THAT(usage_error("dp2xpp2", o, small_great_net(), 5),
              HasSubstr("3 micro-batches but replica 1's piece of the batch of 5 has only 2 sample(s)"));
  EXPECT_THAT(usage_error("dp2xpp2", options(4), linear_net(), 4), HasSubstr("only 1 layer(s)"));
}

TEST(Strategies, BatchSmallerThanWorkersUsesFewerWorkers) {
  for (const char* s : {"dp", "ddp"}) {
    SCOPED_TRACE(s);
    ::testing::internal::CaptureStderr();
    const Trained r = train(s, options(4), linear_net(), {3}, 2);
    EXPECT_THAT(::testing::internal::GetCapturedStderr(), HasSubstr("gives 3 chunk(s) (1,1,1); 1 worker(s) sit idle"));
    EXPECT_EQ(r.stats.workers_used, 3);
    EXPECT_EQ(r.stats.workers[3].samples, 0);
    expect_matches(r, reference(linear_net(), {3}, 2));
  }
}

// parbench replay through the binary: ddp on 3 workers writes the losses regular writes.
int parbench(const std::string& args) {
  const std::string cmd = pb::test::parbench_binary() + " " + args + " >/dev/null 2>&1";
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

TEST(Strategies, ReplayThroughTheBinary) {
  const fs::path dir = fs::path(::testing::TempDir()) / fmt::format("pb_strategies_{}", ::getpid());
  const std::string common = "replay --workload linear --batch 7 --steps 4 --threads 1 --device-kind cpu";
  ASSERT_EQ(parbench(fmt::format("{} --strategy regular --out {}", common, (dir / "regular").string())), 0);
  ASSERT_EQ(parbench(fmt::format("{} --strategy ddp --devices 3 --out {}", common, (dir / "ddp").string())), 0);
  const auto reg = nlohmann::json::parse(read_file((dir / "regular" / "losses.json").string()));
  const auto ddp = nlohmann::json::parse(read_file((dir / "ddp" / "losses.json").string()));
  ASSERT_EQ(ddp["losses"].size(), 4u);
  for (std::size_t k = 0; k < 4; ++k) {
    const double want = reg["losses"][k].get<double>();
    EXPECT_NEAR(ddp["losses"][k].get<double>(), want, 1e-5 * std::abs(want)) << "step " << k + 1;
  }
  EXPECT_EQ(ddp["worker_samples"], nlohmann::json::array({3, 3, 1}));
  EXPECT_EQ(parbench(fmt::format("{} --strategy nope --out {}", common, (dir / "x").string())), 2);
  EXPECT_EQ(parbench(fmt::format("{} --strategy mp --devices 2 --out {}", common, (dir / "x").string())), 2);
  EXPECT_EQ(parbench(fmt::format("{} --strategy pipeline --micro-batches 8 --out {}", common, (dir / "x").string())), 2);
  // --schedule and --recompute name the pipeline variant; the 1F1B-with-recompute stages of
  // great_net write regular's losses.
  const std::string net = "replay --workload great_net --image 8 --width 0.1875 --batch 7 --steps 3 --threads 1 --device-kind cpu";
  ASSERT_EQ(parbench(fmt::format("{} --strategy regular --out {}", net, (dir / "gn").string())), 0);
  ASSERT_EQ(parbench(fmt::format("{} --strategy pipeline --devices 3 --micro-batches 4 --schedule 1f1b --recompute --out {}",
                                 net, (dir / "gn1f1b").string())), 0);
  const auto gn = nlohmann::json::parse(read_file((dir / "gn" / "losses.json").string()));
  const auto f1b = nlohmann::json::parse(read_file((dir / "gn1f1b" / "losses.json").string()));
  EXPECT_EQ(f1b["strategy"], "pipeline-1f1b-recompute");
  ASSERT_EQ(f1b["losses"].size(), 3u);
  for (std::size_t k = 0; k < 3; ++k) {
    const double want = gn["losses"][k].get<double>();
    EXPECT_NEAR(f1b["losses"][k].get<double>(), want, 1e-5 * std::abs(want)) << "step " << k + 1;
  }
  EXPECT_EQ(parbench(fmt::format("{} --strategy pipeline --schedule zigzag --out {}", common, (dir / "x").string())), 2);
  EXPECT_EQ(parbench(fmt::format("{} --strategy ddp --devices 2 --recompute --out {}", common, (dir / "x").string())), 2);
  fs::remove_all(dir);
}

// On GPUs the reference is regular on a GPU, and cuDNN may pick other algorithms per chunk size:
// a looser tolerance.
TEST(Strategies, OnGpusMatchRegularOnAGpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const NetSpec net = small_great_net();
  StrategyOptions g = options(1);
  g.kind = DeviceKind::Cuda;
  const Trained ref = train("regular", g, net, {7});
  for (const char* s : {"dp", "ddp", "mp", "pipeline", "fsdp", "tp"}) {
    StrategyOptions o = g;
    o.devices = std::min(4, std::max(2, cuda_device_count()));
    o.oversubscribe = true;
    SCOPED_TRACE(fmt::format("{} on {} GPU workers", s, o.devices));
    const Trained r = train(s, o, net, {7});
    if (cuda_device_count() >= 2 && std::string(s) != "mp" && std::string(s) != "pipeline") {
#ifdef PARBENCH_HAVE_NCCL
      EXPECT_EQ(r.stats.communicator, "nccl");
#endif
    }
    expect_matches(r, ref, 1e-4, 1e-4, 1e-3);
  }
}

TEST(Strategies, OversubscribedWorkersShareAGpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  StrategyOptions o = options(cuda_device_count() + 1);
  o.kind = DeviceKind::Cuda;
  StrategyOptions g = o;
  g.devices = 1;
  EXPECT_THROW(make_strategy("ddp", o), UsageError);  // not without --oversubscribe
  o.oversubscribe = true;
  const Trained r = train("ddp", o, small_great_net(), {7});
  EXPECT_TRUE(r.stats.oversubscribed);
  EXPECT_EQ(r.stats.communicator, "inproc");  // NCCL cannot put two ranks on one GPU
  EXPECT_EQ(r.stats.workers.back().device, "cuda:0");
  expect_matches(r, train("regular", g, small_great_net(), {7}), 1e-4, 1e-4, 1e-3);
}

}  // namespace
}  // namespace pb
