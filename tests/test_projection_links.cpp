// The projection's link model (projection/links.h) and the simulator's meetings: alpha-beta per
// collective and algorithm, measured points, per-count and per-layout fits, late arrivals, the fit.
#include "projection/plan_price.h"
#include "tests/test_projection_support.h"

namespace pb {
namespace {

using namespace projection_test;

TEST(Projection, AlphaBetaPerCollectiveAndAlgorithm) {
  const pj::Machine m = machine();
  // all-reduce ring over 4: 2(N-1) alpha + bytes * 2(N-1)/N / bandwidth.
  const pj::CollCost c = pj::collective_cost(m, CollKind::AllReduce, 1e6, 4, false);
  EXPECT_EQ(c.algorithm, "ring");
  EXPECT_NEAR(c.seconds, 6 * 1e-5 + 1e6 * 1.5 / 1e8, 1e-12);
  EXPECT_NEAR(pj::collective_cost(m, CollKind::AllReduce, 1e6, 16, true).seconds, 30 * 1e-4 + 1e6 * 2 * 15 / 16 / 1e7, 1e-12);
  EXPECT_EQ(pj::collective_cost(m, CollKind::AllReduce, 1e6, 1, false).seconds, 0);
  // With a tree listed, small messages over many ranks take it (log N latency terms).
  pj::Machine t = m;
  t.intra_node["all_reduce"]["tree"] = {1e-5, 5e7, {}, {}};
  EXPECT_EQ(pj::collective_cost(t, CollKind::AllReduce, 1e3, 8, false).algorithm, "tree");
  EXPECT_EQ(pj::collective_cost(t, CollKind::AllReduce, 1e8, 8, false).algorithm, "ring");
  // A fit at one worker count (calibrate's) is used for exactly that count; others keep the general fit.
  pj::Machine at = m;
  at.intra_node["all_reduce"]["ring"].at_ranks[2] = {3e-5, 2e8, {}, {}};
  EXPECT_NEAR(pj::collective_cost(at, CollKind::AllReduce, 1e6, 2, false).seconds, 2 * 3e-5 + 1e6 * 1.0 / 2e8, 1e-12);
  EXPECT_NEAR(pj::collective_cost(at, CollKind::AllReduce, 1e6, 4, false).seconds, c.seconds, 1e-12);
  EXPECT_NEAR(pj::collective_cost(at, CollKind::AllReduce, 1e6, 2, true).seconds,
              pj::collective_cost(m, CollKind::AllReduce, 1e6, 2, true).seconds, 1e-12);  // between nodes: its own level
  const pj::Machine again = pj::parse_machine(pj::machine_json(at).dump(), "again", unit_classes());
  ASSERT_EQ(again.intra_node.at("all_reduce").at("ring").at_ranks.size(), 1u);
  EXPECT_DOUBLE_EQ(again.intra_node.at("all_reduce").at("ring").at_ranks.at(2).alpha_s, 3e-5);
  pj::Machine no_gather = m;
  no_gather.intra_node.erase("all_gather");
  expect_usage_error([&] { pj::collective_cost(no_gather, CollKind::AllGather, 1e3, 4, false); }, {"links.intra_node.all_gather"});
  // A strategy that needs it is refused for that configuration, with the reason.
  const pj::Prediction f = pj::predict(uniform(), no_gather, config("fsdp", 2, 2));
  EXPECT_FALSE(f.feasible);
  EXPECT_NE(f.reason.find("all_gather"), std::string::npos) << f.reason;
}

// Calibrate's measured times (points) are read off for exactly the meeting they timed: between two
// sizes linearly, below the first as the first, above the last at the fit's bandwidth.
TEST(Projection, MeasuredPointsAreReadOffBetweenTheSizesTimed) {
  pj::Machine m = machine();
  pj::AlphaBeta& ab = m.intra_node["all_reduce"]["ring"];
  ab.at_ranks[2] = {3e-5, 2e8, {{64, 4e-6}, {1024, 5e-6}, {65536, 2e-5}}, {}};
  auto cost = [&](double bytes, int ranks, int fit = 0, const pj::AlphaBeta::Layout* l = nullptr) {
    return pj::collective_cost(m, CollKind::AllReduce, bytes, ranks, false, fit, l).seconds;
  };
  EXPECT_DOUBLE_EQ(cost(48, 2), 4e-6);
  EXPECT_DOUBLE_EQ(cost(64, 2), 4e-6);
  EXPECT_DOUBLE_EQ(cost(544, 2), 4.5e-6);
  EXPECT_DOUBLE_EQ(cost(65536, 2), 2e-5);
  EXPECT_NEAR(cost(65536 + 1e6, 2), 2e-5 + 1e6 * 1.0 / 2e8, 1e-15);  // all-reduce over 2: bus factor 1
  // A pair among 4 workers sharing the cores takes the 4 workers' fit (fit_ranks 4): its times are of
  // all 4 meeting, not of a pair, so its alpha and bandwidth apply instead.
  ab.at_ranks[4] = {1e-5, 1e8, {{64, 9e-6}, {1024, 1e-5}}, {}};
  EXPECT_NEAR(cost(544, 2, 4), 1e-5 * 2 + 544 * 1.0 / 1e8, 1e-15);
  EXPECT_DOUBLE_EQ(cost(544, 4), 9.5e-6);
  // A layout's own points apply to its groups.
  const pj::AlphaBeta::Layout pairs{2, 4, 2};
  ab.in_groups[pairs] = {1e-5, 1e8, {{64, 2e-6}, {1024, 3e-6}}, {}};
  EXPECT_DOUBLE_EQ(cost(544, 2, 4, &pairs), 2.5e-6);
  // The last participant arriving late: its late times up to the largest late size, the others' above.
  ab.at_ranks[2].late_points = {{64, 2.5e-6}, {1024, 3e-6}};
  EXPECT_DOUBLE_EQ(pj::collective_cost(m, CollKind::AllReduce, 544, 2, false, 0, nullptr, true).seconds, 2.75e-6);
  EXPECT_DOUBLE_EQ(pj::collective_cost(m, CollKind::AllReduce, 544, 2, false, 0, nullptr, false).seconds, 4.5e-6);
  EXPECT_DOUBLE_EQ(pj::collective_cost(m, CollKind::AllReduce, 4096, 2, false, 0, nullptr, true).seconds,
                   pj::collective_cost(m, CollKind::AllReduce, 4096, 2, false, 0, nullptr, false).seconds);
  // The machine file keeps them.
  const pj::Machine again = pj::parse_machine(pj::machine_json(m).dump(), "again", unit_classes());
  EXPECT_EQ(again.intra_node.at("all_reduce").at("ring").at_ranks.at(2).late_points, ab.at_ranks[2].late_points);
  EXPECT_EQ(again.intra_node.at("all_reduce").at("ring").at_ranks.at(2).points, ab.at_ranks[2].points);
  EXPECT_EQ(again.intra_node.at("all_reduce").at("ring").in_groups.at(pairs).points, ab.in_groups[pairs].points);
  json j = pj::machine_json(m);
  j["links"]["intra_node"]["all_reduce"]["ring"]["ranks"]["2"]["points"] = {{1024, 5e-6}, {64, 4e-6}};
  expect_usage_error([&] { pj::parse_machine(j.dump(), "m.json", unit_classes()); },
                     {"m.json", "links.intra_node.all_reduce.ring.ranks.2.points[1]", "bytes above the previous pair's 1024"});
  j["links"]["intra_node"]["all_reduce"]["ring"]["ranks"]["2"]["points"] = {{64, 0}};
  expect_usage_error([&] { pj::parse_machine(j.dump(), "m.json", unit_classes()); }, {"ranks.2.points[0]", "[bytes, seconds] of finite numbers > 0"});
}

TEST(Projection, MonotonePointsPoolNeighboursMeasuredOutOfOrder) {
  using P = std::vector<std::pair<double, double>>;
  // Given in any order; 4 KiB measured faster than 1 KiB: both read as their mean.
  EXPECT_EQ(pj::monotone_points({{2, 65536, 20}, {2, 1024, 5}, {2, 4096, 3}}), (P{{1024, 4}, {4096, 4}, {65536, 20}}));
  // A violation further up pools back as far as it must.
  EXPECT_EQ(pj::monotone_points({{2, 64, 4}, {2, 1024, 6}, {2, 4096, 7}, {2, 8192, 1}}), (P{{64, 4}, {1024, 14.0 / 3}, {4096, 14.0 / 3}, {8192, 14.0 / 3}}));
  // Already in order: unchanged.
  EXPECT_EQ(pj::monotone_points({{2, 64, 1}, {2, 128, 2}}), (P{{64, 1}, {128, 2}}));
}

TEST(Projection, WorkerOverheadPerWorkerCount) {
  pj::Machine m = free_links();
  m.kind = "cpu";
  m.shared_cores = 2;
  m.worker_overhead_s = 1e-6;
  // Without a table: per further worker.
  EXPECT_DOUBLE_EQ(m.workers_overhead_s(1), 0);
  EXPECT_NEAR(m.workers_overhead_s(4), 3e-6, 1e-15);
  // calibrate's overhead of 2 and 4 workers: used at those counts, interpolated between (1 worker:
  // none), per further worker beyond.
  m.worker_overhead_at_s = {{2, 10e-6}, {4, 14e-6}};
  EXPECT_DOUBLE_EQ(m.workers_overhead_s(1), 0);
  EXPECT_NEAR(m.workers_overhead_s(2), 10e-6, 1e-15);
  EXPECT_NEAR(m.workers_overhead_s(3), 12e-6, 1e-15);
  EXPECT_NEAR(m.workers_overhead_s(4), 14e-6, 1e-15);
  EXPECT_NEAR(m.workers_overhead_s(6), 16e-6, 1e-15);
  // Charged once a step: ddp on 4 workers costs the table's 14 us more than with no overhead.
  pj::Machine none = m;
  none.worker_overhead_at_s.clear();
  none.worker_overhead_s = 0;
  pj::Options o;
  o.threads_per_worker = 1;
  EXPECT_NEAR(pj::predict(uniform(), m, config("ddp", 4, 8), o).step_s - pj::predict(uniform(), none, config("ddp", 4, 8), o).step_s,
              14e-6, 1e-12);
  const pj::Machine again = pj::parse_machine(pj::machine_json(m).dump(), "again", unit_classes());
  EXPECT_EQ(again.worker_overhead_at_s, m.worker_overhead_at_s);
  json j = fixture_json("machine.json");
  j["worker_overhead_at_s"] = {{"1", 1e-6}};
  expect_usage_error([&] { pj::parse_machine(j.dump(), "m.json", unit_classes()); }, {"m.json", "worker_overhead_at_s.1", "worker count of 2 or more"});
  j["worker_overhead_at_s"] = {{"2", -1e-6}};
  expect_usage_error([&] { pj::parse_machine(j.dump(), "m.json", unit_classes()); }, {"worker_overhead_at_s.2", ">= 0"});
}

// Workers on cores of their own start after worker 0 (calibrate's worker_start_at_s): ddp's one
// all-reduce then finds worker 0 waiting and costs its late time; the lag is part of the dispatch
// already charged, so the step is the late time's saving shorter, not the lag longer.
TEST(Projection, AWorkerStartingLateMeetsItsPeerWaiting) {
  pj::Machine m = free_links();
  m.kind = "cpu";
  m.shared_cores = 2;
  m.worker_overhead_at_s = {{2, 1e-6}};
  pj::AlphaBeta& ar = m.intra_node["all_reduce"].begin()->second;
  ar.at_ranks[2] = {0, 1e30, {{64, 5e-6}, {1 << 30, 5e-6}}, {{64, 3e-6}, {1 << 30, 3e-6}}};
  pj::Options o;
  o.threads_per_worker = 1;
  const pj::Prediction together = pj::predict(uniform(), m, config("ddp", 2, 4), o);
  m.worker_start_at_s = {{2, 0.5e-6}};
  const pj::Prediction lagging = pj::predict(uniform(), m, config("ddp", 2, 4), o);
  EXPECT_NEAR(together.step_s - lagging.step_s, 2e-6, 1e-12);
  // A lag under the gap: the two still contend, as arriving together.
  m.late_arrival_gap_s = 0.6e-6;
  EXPECT_NEAR(pj::predict(uniform(), m, config("ddp", 2, 4), o).step_s, together.step_s, 1e-12);
  const pj::Machine again = pj::parse_machine(pj::machine_json(m).dump(), "again", unit_classes());
  EXPECT_EQ(again.worker_start_at_s, m.worker_start_at_s);
  EXPECT_DOUBLE_EQ(again.late_arrival_gap_s, 0.6e-6);
}

// A blocking send/recv lets its receiver go on before its sender (calibrate's sender_trails_s):
// dp's root, the sender of the output gradient, then starts its backward that much after the
// replica and arrives late at the reduce, which costs its late time.
TEST(Projection, TheReceiverOfABlockingSendGoesOnFirst) {
  pj::Machine m = free_links();
  m.kind = "cpu";
  m.shared_cores = 2;
  m.intra_node["send_recv"].begin()->second.at_ranks[2] = {0, 1e30, {{4, 1e-6}, {1 << 30, 1e-6}}, {}};
  m.intra_node["reduce"].begin()->second.at_ranks[2] = {0, 1e30, {{4, 5e-6}, {1 << 30, 5e-6}}, {{4, 3e-6}, {1 << 30, 3e-6}}};
  pj::Options o;
  o.threads_per_worker = 1;
  const pj::Prediction together = pj::predict(uniform(), m, config("dp", 2, 4), o);
  m.sender_trails_s = 0.5e-6;
  const pj::Prediction trailing = pj::predict(uniform(), m, config("dp", 2, 4), o);
  EXPECT_GT(together.step_s - trailing.step_s, 1.5e-6);
  EXPECT_LE(together.step_s - trailing.step_s, 2e-6 + 1e-12);
  // A trail under the gap: the two still meet together at the reduce.
  m.late_arrival_gap_s = 0.6e-6;
  EXPECT_NEAR(pj::predict(uniform(), m, config("dp", 2, 4), o).step_s, together.step_s, 1e-12);
  EXPECT_DOUBLE_EQ(pj::parse_machine(pj::machine_json(m).dump(), "again", unit_classes()).sender_trails_s, 0.5e-6);
}

// Each plan action costs its worker's host action_overhead_s before it begins: at one worker, a
// step longer by that times its actions, and ddp (a collective started and waited for beyond
// regular's actions) longer than regular by that times the actions it adds.
TEST(Projection, EveryActionCostsItsWorkersHostTheActionOverhead) {
  pj::Machine m = free_links();
  pj::Options o;
  auto actions = [&](const char* s) {
    return static_cast<double>(pj::plan_for(uniform(), config(s, 1, 4)).actions.at(0).size());
  };
  const pj::Prediction regular = pj::predict(uniform(), m, config("regular", 1, 4), o);
  const pj::Prediction ddp = pj::predict(uniform(), m, config("ddp", 1, 4), o);
  m.action_overhead_s = 1e-6;
  EXPECT_NEAR(pj::predict(uniform(), m, config("regular", 1, 4), o).step_s - regular.step_s, 1e-6 * actions("regular"), 1e-12);
  const double ddp_more = pj::predict(uniform(), m, config("ddp", 1, 4), o).step_s - ddp.step_s;
  EXPECT_NEAR(ddp_more, 1e-6 * actions("ddp"), 1e-12);
  EXPECT_GT(actions("ddp"), actions("regular"));
  EXPECT_DOUBLE_EQ(pj::parse_machine(pj::machine_json(m).dump(), "again", unit_classes()).action_overhead_s, 1e-6);
}

TEST(Projection, SharedCoreGroupsTakeTheFitOfTheNodesWorkers) {
  // dp2xtp2 on 4 CPU workers sharing the cores: its collectives are among 2 of them, but 4
  // threads share the cores, so the fit at 4 workers prices them. Its latency steps stay the group's.
  pj::Machine m = machine();
  m.kind = "cpu";
  m.overlap = false;
  for (const char* c : {"all_gather", "all_reduce"}) {
    m.intra_node[c]["ring"].at_ranks[2] = {1e-6, 1e12, {}, {}};
    m.intra_node[c]["ring"].at_ranks[4] = {50e-6, 1e12, {}, {}};
  }
  EXPECT_NEAR(pj::collective_cost(m, CollKind::AllGather, 64, 2, false, 4).seconds, 50e-6 + 64 * 0.5 / 1e12, 1e-12);
  pj::Options o;
  o.threads_per_worker = 1;
  pj::Machine own = m;  // each device its own cores (a GPU-like node): the group's own fit
  own.shared_cores = 0;
  m.shared_cores = 2;
  const pj::Prediction shared = pj::predict(uniform(), m, config("dp2xtp2", 4, 8), o);
  const pj::Prediction apart = pj::predict(uniform(), own, config("dp2xtp2", 4, 8), o);
  ASSERT_TRUE(shared.feasible && apart.feasible) << shared.reason << apart.reason;
  // uniform's 4 layers: an all-gather each, an all-reduce for 3 (not the first), then the slices'
  // all-reduce: 8 collectives of one latency step (all-gather) or two (all-reduce, 2 workers).
  const double steps = 4 * 1 + 3 * 2 + 2;
  EXPECT_NEAR(shared.exposed_comm_s - apart.exposed_comm_s, steps * (50e-6 - 1e-6), 2e-9);
}

TEST(Projection, BoundWorkerGroupsTakeTheirLayoutsFit) {
  // As above, but calibrate also timed pairs of the 4 bound workers meeting at once: dp2xtp2's tp
  // pairs are consecutive ranks (stride 1), its dp pairs 2 apart (stride 2); those fits apply.
  pj::Machine m = machine();
  m.kind = "cpu";
  m.overlap = false;
  m.shared_cores = 2;
  for (const char* c : {"all_gather", "all_reduce"}) m.intra_node[c]["ring"].at_ranks[4] = {50e-6, 1e12, {}, {}};
  pj::Options o;
  o.threads_per_worker = 1;
  const pj::Prediction by_count = pj::predict(uniform(), m, config("dp2xtp2", 4, 8), o);
  m.intra_node["all_gather"]["ring"].in_groups[{2, 4, 1}] = {20e-6, 1e12, {}, {}};
  m.intra_node["all_reduce"]["ring"].in_groups[{2, 4, 1}] = {20e-6, 1e12, {}, {}};
  m.intra_node["all_reduce"]["ring"].in_groups[{2, 4, 2}] = {30e-6, 1e12, {}, {}};
  const pj::Prediction by_layout = pj::predict(uniform(), m, config("dp2xtp2", 4, 8), o);
  ASSERT_TRUE(by_count.feasible && by_layout.feasible) << by_count.reason << by_layout.reason;
  // tp: 4 all-gathers of one latency step, 3 all-reduces of two; dp: the slices' all-reduce, two.
  EXPECT_NEAR(by_count.exposed_comm_s - by_layout.exposed_comm_s, (4 * 1 + 3 * 2) * 30e-6 + 2 * 20e-6, 2e-9);
  // With two threads a worker the workers are not bound (nor were the layouts timed so).
  o.threads_per_worker = 2;
  EXPECT_NEAR(pj::predict(uniform(), m, config("dp2xtp2", 4, 8), o).step_s,
              pj::predict(uniform(), machine_without_groups(m), config("dp2xtp2", 4, 8), o).step_s, 1e-12);
  // The key as machine files write it, and back.
  EXPECT_EQ(pj::layout_key({2, 4, 2}), "2 of 4 stride 2");
  const pj::Machine again = pj::parse_machine(pj::machine_json(m).dump(), "again", unit_classes());
  EXPECT_EQ(again.intra_node.at("all_reduce").at("ring").in_groups.size(), 2u);
  EXPECT_DOUBLE_EQ(again.intra_node.at("all_reduce").at("ring").in_groups.at({2, 4, 2}).alpha_s, 30e-6);
  for (const char* bad : {"2 of 4", "1 of 4 stride 1", "2 of 2 stride 1", "2 of 4 stride 4", "2 of 4 stride 1 ", "02 of 4 stride 1", "2 of 99999999999999999999 stride 1", "-2 of 4 stride 1"}) {
    json j = pj::machine_json(m);
    j["links"]["intra_node"]["all_reduce"]["ring"]["groups"][bad] = {{"alpha_s", 1e-6}, {"bus_bytes_per_s", 1e9}};
    expect_usage_error([&] { pj::parse_machine(j.dump(), "m.json", unit_classes()); },
                       {"m.json", fmt::format("links.intra_node.all_reduce.ring.groups.{}", bad), "G of N stride S"});
  }
}

TEST(Projection, DpSendsBetweenBoundWorkersTakeTheirPairsFit) {
  // dp on 4 bound workers: the root's sends and the replicas' replies to it are pairs 1, 2 or 3
  // apart; pairs 1 and 2 apart were timed (here 1 ms and 2 ms), 3 apart was not (free, as the rest).
  pj::Machine m = free_links();
  m.kind = "cpu";
  m.overlap = false;
  m.shared_cores = 2;
  pj::Options o;
  o.threads_per_worker = 1;
  const pj::Prediction free = pj::predict(uniform(), m, config("dp", 4, 8), o);
  m.intra_node["send_recv"]["direct"].in_groups[{2, 4, 1}] = {1e-3, 1e30, {}, {}};
  m.intra_node["send_recv"]["direct"].in_groups[{2, 4, 2}] = {2e-3, 1e30, {}, {}};
  const pj::Prediction paired = pj::predict(uniform(), m, config("dp", 4, 8), o);
  ASSERT_TRUE(free.feasible && paired.feasible) << free.reason << paired.reason;
  // The root's nine messages in turn: inputs out, outputs in, output gradients out; 3 x (1 + 2) ms.
  EXPECT_NEAR(paired.step_s - free.step_s, 9e-3, 1e-9);
  // Two workers on two cores are not bound round robin: the pairs' fits do not apply.
  EXPECT_NEAR(pj::predict(uniform(), m, config("dp", 2, 8), o).step_s, pj::predict(uniform(), free_links(), config("dp", 2, 8), o).step_s, 1e-12);
}

TEST(Projection, FitRecoversAlphaAndBandwidth) {
  std::vector<pj::Sample> s;
  for (int r : {2, 4})
    for (double b : {4e3, 6.4e4, 1e6, 8e6})
      s.push_back({r, b, 7e-6 * pj::latency_steps(CollKind::AllReduce, "ring", r) + b * bus_factor(CollKind::AllReduce, r) / 3e9});
  const pj::AlphaBeta ab = pj::fit_alpha_beta(CollKind::AllReduce, "ring", s);
  EXPECT_NEAR(ab.alpha_s, 7e-6, 1e-10);
  EXPECT_NEAR(ab.bus_bytes_per_s, 3e9, 3e9 * 1e-6);
}

}  // namespace
}  // namespace pb
