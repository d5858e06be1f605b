// Each strategy's simulated step (scenarios/strategy_model.h) against closed forms: the profile
// sum, the GPipe bubble, 1F1B, recompute, overlap, shared cores, fsdp / zero2, tp, the hybrids.
#include "tests/test_projection_support.h"

namespace pb {
namespace {

using namespace projection_test;

TEST(Projection, RegularIsTheProfileSum) {
  const pj::Prediction r = pj::predict(uniform(), free_links(), config("regular", 1, 2));
  EXPECT_NEAR(r.step_s, 4 * (0.002 + 0.002), 1e-12);
  EXPECT_NEAR(r.compute_s, r.step_s, 1e-12);
  EXPECT_FALSE(pj::predict(uniform(), free_links(), config("regular", 2, 2)).feasible);
}

TEST(Projection, GpipeBubbleIsTheFormula) {
  // Four equal stages, free links: step = (M + P - 1) (f + b), idle share (P - 1) / (M + P - 1).
  for (int M : {1, 2, 4, 8}) {
    pj::Config c = config("pipeline", 4, 8);
    c.micro_batches = M;
    const pj::Prediction r = pj::predict(uniform(), free_links(), c);
    const double per = 2 * 0.001 * (8.0 / M);  // forward + backward of one layer, one micro-batch
    EXPECT_NEAR(r.step_s, (M + 3) * per, 1e-9) << M;
    EXPECT_NEAR(r.idle_s / r.step_s, 3.0 / (M + 3), 1e-9) << M;
  }
}

TEST(Projection, OneFOneBSameTimeLessMemory) {
  pj::Config g = config("pipeline", 4, 8), f = g;
  g.micro_batches = f.micro_batches = 8;
  f.schedule = "1f1b";
  const pj::Prediction pg = pj::predict(uniform(), free_links(), g), pf = pj::predict(uniform(), free_links(), f);
  EXPECT_NEAR(pf.step_s, pg.step_s, 1e-9);
  EXPECT_LT(pf.peak_bytes, pg.peak_bytes);
}

TEST(Projection, RecomputeCostsForwardsAndSavesMemory) {
  pj::Config g = config("pipeline", 4, 8);
  g.micro_batches = 8;
  pj::Config rc = g;
  rc.strategy = "pipeline-recompute";  // the registered variant's name
  const pj::Prediction pg = pj::predict(uniform(), free_links(), g), pr = pj::predict(uniform(), free_links(), rc);
  ASSERT_TRUE(pr.feasible) << pr.reason;
  // Each stage runs one layer's forward again for every micro-batch but the last (still in its
  // slot): 7 x 1 ms more compute on each stage.
  EXPECT_NEAR(pr.compute_s - pg.compute_s, 7 * 0.001, 1e-9);
  EXPECT_LT(pr.peak_bytes, pg.peak_bytes);
  rc.strategy = "pipeline-1f1b";
  EXPECT_NEAR(pj::predict(uniform(), free_links(), rc).step_s, pg.step_s, 1e-9);
  rc.strategy = "pipeline-zigzag";
  EXPECT_FALSE(pj::predict(uniform(), free_links(), rc).feasible);
}

TEST(Projection, DdpOverlapHidesBucketsBehindBackward) {
  pj::Machine m = machine();
  pj::Config c = config("ddp", 2, 8);
  c.bucket_bytes = c.first_bucket_bytes = 148 * 4;  // one bucket per layer
  const double ar = pj::collective_cost(m, CollKind::AllReduce, 148 * 4, 2, false).seconds;
  const double compute = 4 * (0.004 + 0.004);  // chunk 4 per worker
  m.overlap = false;  // every bucket on the critical path
  const pj::Prediction serial = pj::predict(uniform(), m, c);
  EXPECT_NEAR(serial.step_s, compute + 4 * ar, 1e-9);
  EXPECT_NEAR(serial.exposed_comm_s, 4 * ar, 1e-9);
  m.overlap = true;  // only the last bucket (layer 0, after all backward) is exposed
  const pj::Prediction over = pj::predict(uniform(), m, c);
  EXPECT_NEAR(over.step_s, compute + ar, 1e-9);
  EXPECT_NEAR(over.exposed_comm_s, ar, 1e-9);
}

TEST(Projection, DpSerialisesOnDeviceZero) {
  const pj::Machine m = machine();
  const pj::Prediction r = pj::predict(uniform(), m, config("dp", 2, 4));
  auto cost = [&](CollKind c, double bytes, int n) { return pj::collective_cost(m, c, bytes, n, false).seconds; };
  const double P = 4 * 148 * 4.0, sample = 4 * 8 * 8 * 4.0;
  // broadcast, scatter, forward, gather, send back output gradients, backward, reduce.
  const double want = cost(CollKind::Broadcast, P, 2) + cost(CollKind::SendRecv, 2 * sample, 2) + 4 * 0.002 +
                      cost(CollKind::SendRecv, 2 * sample, 2) + cost(CollKind::SendRecv, 2 * sample, 2) + 4 * 0.002 +
                      cost(CollKind::Reduce, P, 2);
  EXPECT_NEAR(r.step_s, want, 1e-9);
}

TEST(Projection, SharedCoresSlowConcurrentWorkers) {
  pj::Machine m = free_links();
  m.shared_cores = 2;
  pj::Options o;
  o.threads_per_worker = 1;
  // Four one-thread workers on two cores run at half speed; two run at full speed.
  const double two = pj::predict(uniform(), m, config("ddp", 2, 8), o).step_s;
  const double four = pj::predict(uniform(), m, config("ddp", 4, 8), o).step_s;
  EXPECT_NEAR(two, 4 * 0.008, 1e-9);
  EXPECT_NEAR(four, 2 * (4 * 0.004), 1e-9);
  // Where other work leaves only one thread's worth of the cores, two workers share it.
  m.parallel_threads = 1;
  EXPECT_NEAR(pj::predict(uniform(), m, config("ddp", 2, 8), o).step_s, 2 * two, 1e-9);
}

TEST(Projection, BoundWorkersTakeTurnsOnTheirOwnCore) {
  // Four one-thread workers on two cores are bound round robin (worker i on core i mod 2). In
  // dp2xpp2 with one micro-batch the replicas' first stages (workers 0 and 2) compute together,
  // then their second stages (1 and 3): two busy workers at a time, always on one core, at half
  // speed -- where four cores (nothing shared) run every phase at full speed.
  pj::Machine m = free_links();
  m.kind = "cpu";
  m.shared_cores = 2;
  pj::Options o;
  o.threads_per_worker = 1;
  pj::Config c = config("dp2xpp2", 4, 4);
  c.micro_batches = 1;
  const double bound = pj::predict(uniform(), m, c, o).step_s;
  m.shared_cores = 4;
  const double apart = pj::predict(uniform(), m, c, o).step_s;
  EXPECT_NEAR(bound, 2 * apart, 1e-9);
  // ddp keeps all four busy together: two on each core, as shared evenly.
  m.shared_cores = 2;
  EXPECT_NEAR(pj::predict(uniform(), m, config("ddp", 4, 8), o).step_s, 2 * (4 * 0.004), 1e-9);
}

TEST(Projection, ProfileTimedByConcurrentWorkersIsTheirSpeed) {
  pj::Machine m = free_links();
  m.shared_cores = 2;
  pj::Options o;
  o.threads_per_worker = 1;
  json j = fixture_json("uniform.json");
  j["context"]["concurrent_workers"] = 4;
  const pj::Profile four = pj::parse_profile(j.dump(), "four.json");
  EXPECT_EQ(four.concurrent, 4);
  // Timed with four workers busy: four ddp workers run at the profile's speed, not half of it.
  EXPECT_NEAR(pj::predict(four, m, config("ddp", 4, 8), o).step_s, 4 * 0.004, 1e-9);
  // One worker busy alone (regular) runs twice as fast as the four did together.
  EXPECT_NEAR(pj::predict(four, m, config("regular", 1, 2), o).step_s, 4 * 0.004 / 2, 1e-9);
  // A measured slowdown curve replaces the core-count formula: two busy take 1.5x one's time,
  // four 3x. One busy worker then runs 3x the four-worker profile's speed; four, at its speed.
  o.busy_seconds = {1.0, 1.5, 2.25, 3.0};
  EXPECT_NEAR(pj::predict(four, m, config("regular", 1, 2), o).step_s, 4 * 0.004 / 3, 1e-9);
  EXPECT_NEAR(pj::predict(four, m, config("ddp", 4, 8), o).step_s, 4 * 0.004, 1e-9);
  // A pipeline's fill and drain have 1-3 stages busy. The curve of two cores fully shared is
  // the formula's; a flatter one (cores that barely help: a lone stage only 1.25x as fast)
  // makes the pipeline slower.
  pj::Config pipe = config("pipeline", 4, 8);
  pipe.micro_batches = 8;
  o.busy_seconds.clear();
  const double formula = pj::predict(four, m, pipe, o).step_s;
  o.busy_seconds = {1.0, 1.0, 1.5, 2.0};
  EXPECT_NEAR(pj::predict(four, m, pipe, o).step_s, formula, 1e-9);
  o.busy_seconds = {1.6, 1.7, 1.85, 2.0};
  EXPECT_GT(pj::predict(four, m, pipe, o).step_s, formula * 1.05);
  j["context"]["concurrent_workers"] = 0;
  expect_usage_error([&] { pj::parse_profile(j.dump(), "z.json"); }, {"z.json", "context.concurrent_workers"});
}

TEST(Projection, Zero2GathersOncePerUnitFsdpTwice) {
  const pj::Machine m = machine();
  // Four conv units of 148 parameters: over 4 workers 37 floats a shard, no padding.
  const double ag = pj::collective_cost(m, CollKind::AllGather, 148 * 4, 4, false).seconds;
  const double rs = pj::collective_cost(m, CollKind::ReduceScatter, 148 * 4, 4, false).seconds;
  const pj::Prediction f = pj::predict(uniform(), m, config("fsdp", 4, 8)), z = pj::predict(uniform(), m, config("zero2", 4, 8));
  ASSERT_TRUE(f.feasible && z.feasible) << f.reason << z.reason;
  const double compute = 4 * (0.002 + 0.002);  // chunk of 2 per worker
  EXPECT_NEAR(f.step_s, compute + 8 * ag + 4 * rs, 1e-9);
  EXPECT_NEAR(z.step_s, compute + 4 * ag + 4 * rs, 1e-9);
  EXPECT_LT(z.exposed_comm_s, f.exposed_comm_s);
  EXPECT_LT(z.comm_bytes, f.comm_bytes);
  // zero2 keeps every unit's parameters from forward to backward: more memory than fsdp.
  EXPECT_GT(z.peak_bytes, f.peak_bytes);
  // Their bookkeeping per unit and step (calibrate's unit_overhead_s), once a step: four units.
  pj::Machine u = m;
  u.unit_overhead_s = {{"fsdp", 1e-4}, {"zero2", 3e-4}};
  EXPECT_NEAR(pj::predict(uniform(), u, config("fsdp", 4, 8)).step_s, f.step_s + 4 * 1e-4, 1e-9);
  EXPECT_NEAR(pj::predict(uniform(), u, config("zero2", 4, 8)).step_s, z.step_s + 4 * 3e-4, 1e-9);
  EXPECT_NEAR(pj::predict(uniform(), u, config("ddp", 4, 8)).step_s, pj::predict(uniform(), m, config("ddp", 4, 8)).step_s, 1e-12);
}

TEST(Projection, TpSplitsChannelsAndPaysItsCollectives) {
  const pj::Machine m = machine();
  // The uniform net: four 4-channel convs on 4x8x8. Over 4 workers each computes one channel of
  // each layer on the whole batch (a quarter of the layer's time).
  const double regular = pj::predict(uniform(), free_links(), config("regular", 1, 4)).step_s;
  const pj::Prediction free = pj::predict(uniform(), free_links(), config("tp", 4, 4));
  ASSERT_TRUE(free.feasible) << free.reason;
  EXPECT_NEAR(free.step_s, regular / 4, 1e-9);
  // Every layer all-gathers its output (4 samples x 4 x 8 x 8 floats); every layer but the first
  // all-reduces its input gradient (the same size).
  const double act = 4 * 4 * 8 * 8 * 4.0;
  const double want = regular / 4 + 4 * pj::collective_cost(m, CollKind::AllGather, act, 4, false).seconds +
                      3 * pj::collective_cost(m, CollKind::AllReduce, act, 4, false).seconds;
  EXPECT_NEAR(pj::predict(uniform(), m, config("tp", 4, 4)).step_s, want, 1e-9);
  // Eight workers: no layer has 8 channels to split.
  EXPECT_FALSE(pj::predict(uniform(), m, config("tp", 8, 8)).feasible);
}

TEST(Projection, HybridNamesAndFactorizations) {
  using F = std::vector<std::pair<int, int>>;
  EXPECT_EQ(hybrid_factorizations(4), (F{{2, 2}}));
  EXPECT_EQ(hybrid_factorizations(8), (F{{2, 4}, {4, 2}}));
  EXPECT_EQ(hybrid_factorizations(12), (F{{2, 6}, {3, 4}, {4, 3}, {6, 2}}));
  EXPECT_EQ(hybrid_factorizations(12, 3), (F{{3, 4}}));
  EXPECT_EQ(hybrid_factorizations(4, 1), (F{{1, 4}}));
  EXPECT_TRUE(hybrid_factorizations(4, 0, 4).empty());  // D = 1 only when asked for
  for (int n : {1, 2, 3, 5, 7}) EXPECT_TRUE(hybrid_factorizations(n).empty()) << n;
  auto hybrid_shape = [](const std::string& name) {  // a dp<D>xpp<P>'s shape, as the registry reads it
    int d = 0, p = 0;
    Schedule sc = Schedule::GPipe;
    bool rc = false;
    return parse_hybrid_name(name, &d, &p, &sc, &rc) ? std::make_optional(std::make_pair(d, p)) : std::nullopt;
  };
  EXPECT_EQ(hybrid_shape("dp2xpp4"), std::make_optional(std::make_pair(2, 4)));
  int d = 0, t = 0;
  EXPECT_TRUE(parse_dptp_name("dp2xtp4", &d, &t) && d == 2 && t == 4);
  EXPECT_EQ(hybrid_shape("dp2xpp2-1f1b-recompute"), std::make_optional(std::make_pair(2, 2)));  // variants too
  for (const char* bad : {"dp_pp", "dp2xpp", "dp02xpp2", "dp2xpp2x", "pipeline", "dp-1xpp2", "dp2xpp2-zigzag", "dp2xtp2"})
    EXPECT_FALSE(hybrid_shape(bad)) << bad;
}

TEST(Projection, HybridIsReplicatedPipelinesAndAStageAllReduce) {
  pj::Machine m = free_links();
  pj::Config h = config("dp2xpp2", 4, 8), pipe = config("pipeline", 2, 4);
  h.micro_batches = pipe.micro_batches = 2;
  // Free links: each replica is the 2-stage pipeline on its half of the batch.
  const pj::Prediction free = pj::predict(uniform(), m, h);
  ASSERT_TRUE(free.feasible) << free.reason;
  EXPECT_NEAR(free.step_s, pj::predict(uniform(), m, pipe).step_s, 1e-9);
  // An all-reduce that costs: each stage's own parameters (2 layers x 148) over its 2 replicas.
  m.intra_node["all_reduce"]["ring"] = {0, 1e6, {}, {}};
  const double stage_bytes = 2 * 148 * 4.0;
  EXPECT_NEAR(pj::predict(uniform(), m, h).step_s - free.step_s, 2.0 * (2 - 1) / 2 * stage_bytes / 1e6, 1e-9);
  EXPECT_FALSE(pj::predict(uniform(), m, config("dp2xpp2", 8, 8)).feasible);  // dp2xpp2 is 4 devices
}

TEST(Projection, DpTpIsReplicatedTpAndASliceAllReduce) {
  pj::Machine m = machine();
  // Each replica is tp over 2 workers on its half of the batch, collectives included ...
  const pj::Prediction h = pj::predict(uniform(), m, config("dp2xtp2", 4, 8));
  ASSERT_TRUE(h.feasible) << h.reason;
  const double tp = pj::predict(uniform(), m, config("tp", 2, 4)).step_s;
  // ... plus one all-reduce of the tp rank's slices (half of each layer: 4 x 74 floats) over the
  // 2 replicas.
  const double slices = 4 * 74 * 4.0;
  EXPECT_NEAR(h.step_s - tp, pj::collective_cost(m, CollKind::AllReduce, slices, 2, false).seconds, 1e-9);
  EXPECT_FALSE(pj::predict(uniform(), m, config("dp2xtp2", 8, 8)).feasible);  // dp2xtp2 is 4 devices
  EXPECT_FALSE(pj::predict(uniform(), m, config("dp2xtp8", 16, 16)).feasible);  // no layer has 8 channels
}

TEST(Projection, MemoryFitsAndRefusals) {
  pj::Machine m = machine();
  m.memory_bytes = 1000;  // less than the parameters and Adam state
  EXPECT_FALSE(pj::predict(uniform(), m, config("ddp", 2, 2)).fits);
  // fsdp holds a 1/N shard of the Adam state: less memory per device than ddp.
  const pj::Machine big = machine();
  EXPECT_LT(pj::predict(uniform(), big, config("fsdp", 4, 4)).peak_bytes, pj::predict(uniform(), big, config("ddp", 4, 4)).peak_bytes);
  pj::Config c = config("pipeline", 8, 8);
  const pj::Prediction r = pj::predict(uniform(), big, c);
  EXPECT_FALSE(r.feasible);
  EXPECT_NE(r.reason.find("the net has only 4 layer(s)"), std::string::npos) << r.reason;  // the run's own refusal
  EXPECT_FALSE(pj::predict(uniform(), big, config("ddp", 32, 32)).feasible);  // 16 devices in the machine
}

TEST(Projection, CrossNodePipelinePaysTheSlowerLink) {
  pj::Machine m = machine();
  m.devices_per_node = 2;  // stages 0-1 on node 0, 2-3 on node 1
  pj::Config c = config("pipeline", 4, 4);
  c.micro_batches = 1;
  const double across = pj::predict(uniform(), m, c).step_s;
  m.devices_per_node = 8;
  EXPECT_GT(across, pj::predict(uniform(), m, c).step_s);
}

}  // namespace
}  // namespace pb
