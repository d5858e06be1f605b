// The projection model (reports/projection.*): file formats and their errors, the alpha-beta
// link model and its fit, and each strategy's simulated step against closed forms; then the
// project and calibrate commands end to end.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>
#include <thread>

#include <nlohmann/json.hpp>

#include "engine/check.h"
#include "engine/cpu_steal.h"
#include "engine/fsutil.h"
#include "reports/projection.h"
#include "reports/stats.h"
#include "strategies/stages.h"
#include "strategies/strategy.h"
#include "tests/cli_fixture.h"
#include "workloads/workload.h"

namespace pb {
namespace {

namespace pj = projection;
using nlohmann::json;

std::string fixture(const std::string& name) { return (test::source_dir() / "tests/fixtures/projection" / name).string(); }

json fixture_json(const std::string& name) { return json::parse(read_file(fixture(name))); }

pj::Profile uniform() { return pj::load_profile(fixture("uniform.json")); }
pj::Machine machine() { return pj::load_machine(fixture("machine.json")); }

// A machine whose links cost nothing: only compute and schedule remain.
pj::Machine free_links() {
  pj::Machine m = machine();
  for (auto* level : {&m.intra_node, &m.inter_node})
    for (auto& [c, algs] : *level)
      for (auto& [a, ab] : algs) ab = {0, 1e30, {}, {}};
  return m;
}

pj::Machine machine_without_groups(pj::Machine m) {
  for (auto* level : {&m.intra_node, &m.inter_node})
    for (auto& [c, algs] : *level)
      for (auto& [a, ab] : algs) ab.in_groups.clear();
  return m;
}

pj::Config config(const std::string& s, int n, int64_t batch) {
  pj::Config c;
  c.strategy = s;
  c.devices = n;
  c.global_batch = batch;
  return c;
}

// Throws UsageError whose message contains every needle.
template <class F>
void expect_usage_error(F&& f, std::initializer_list<std::string> needles) {
  try {
    f();
    ADD_FAILURE() << "no error";
  } catch (const UsageError& e) {
    for (const std::string& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
  }
}

TEST(Projection, ProfileInterpolatesAndExtrapolatesLinearly) {
  const pj::Profile p = uniform();
  EXPECT_EQ(p.param_count(), 4 * 148);
  EXPECT_NEAR(p.forward(0, 3), 0.003, 1e-12);  // between 2 and 4
  EXPECT_NEAR(p.forward(0, 8), 0.008, 1e-12);  // beyond 4, along the last two
  EXPECT_DOUBLE_EQ(p.forward(0, 0), 0);
}

TEST(Projection, ScaleImageScalesPixelsNotParameters) {
  const pj::Profile p = uniform(), q = pj::scale_image(p, 8, 16);
  EXPECT_EQ(q.layers[0].in, (std::vector<int64_t>{4, 16, 16}));
  EXPECT_EQ(q.param_count(), p.param_count());
  EXPECT_NEAR(q.forward(0, 2), 4 * p.forward(0, 2), 1e-15);
  EXPECT_NEAR(q.forward_flops(), 4 * p.forward_flops(), 1e-3);
  EXPECT_NEAR(q.input_bytes_per_sample(), 4 * p.input_bytes_per_sample(), 1e-9);
  json j = fixture_json("uniform.json");
  j["layers"][3]["type"] = "flatten";
  expect_usage_error([&] { pj::scale_image(pj::parse_profile(j.dump(), "f.json"), 8, 16); }, {"f.json", "layer 3 (flatten)"});
}

TEST(Projection, ProfileErrorsNameFileAndField) {
  json j = fixture_json("uniform.json");
  j["layers"][1]["forward_s"] = {0.001, 0.002};
  expect_usage_error([&] { pj::parse_profile(j.dump(), "p.json"); }, {"p.json", "layers[1].forward_s", "3 number(s)"});
  j = fixture_json("uniform.json");
  j["layers"][2]["speed"] = 1;
  expect_usage_error([&] { pj::parse_profile(j.dump(), "p.json"); }, {"p.json", "layers[2].speed", "unknown"});
  j = fixture_json("uniform.json");
  j["batches"] = {2, 1, 4};
  expect_usage_error([&] { pj::parse_profile(j.dump(), "p.json"); }, {"batches[1]", "ascending"});
  j = fixture_json("uniform.json");
  j["layers"][0]["backward_weights_s"][0] = -1;
  expect_usage_error([&] { pj::parse_profile(j.dump(), "p.json"); }, {"layers[0].backward_weights_s[0]", ">= 0"});
  expect_usage_error([&] { pj::parse_profile("{\"parbench_profile\": 1,", "p.json"); }, {"p.json", "malformed JSON"});
}

TEST(Projection, MachineErrorsNameFileAndField) {
  json j = fixture_json("machine.json");
  j["device"].erase("peak_flops");
  expect_usage_error([&] { pj::parse_machine(j.dump(), "m.json"); }, {"m.json", "device.peak_flops", "missing"});
  j = fixture_json("machine.json");
  j["links"]["intra_node"]["all_reduce"]["butterfly"] = {{"alpha_s", 0}, {"bus_bytes_per_s", 1}};
  expect_usage_error([&] { pj::parse_machine(j.dump(), "m.json"); }, {"links.intra_node.all_reduce.butterfly", "ring, tree or direct"});
  j = fixture_json("machine.json");
  j["links"]["intra_node"]["send_recv"]["direct"]["bus_bytes_per_s"] = 0;
  expect_usage_error([&] { pj::parse_machine(j.dump(), "m.json"); }, {"links.intra_node.send_recv.direct.bus_bytes_per_s", "> 0"});
  j = fixture_json("machine.json");
  j["links"].erase("inter_node");
  expect_usage_error([&] { pj::parse_machine(j.dump(), "m.json"); }, {"links.inter_node", "nodes > 1"});
  for (const char* key : {"1", "two", "2x"}) {
    j = fixture_json("machine.json");
    j["links"]["intra_node"]["all_reduce"]["ring"]["ranks"][key] = {{"alpha_s", 1e-5}, {"bus_bytes_per_s", 1e9}};
    expect_usage_error([&] { pj::parse_machine(j.dump(), "m.json"); },
                       {fmt::format("links.intra_node.all_reduce.ring.ranks.{}", key), "worker count of 2 or more"});
  }
  j = fixture_json("machine.json");
  j["unit_overhead_s"] = {{"ddp", 1e-6}};
  expect_usage_error([&] { pj::parse_machine(j.dump(), "m.json"); }, {"unit_overhead_s.ddp", "unknown"});
  j["unit_overhead_s"] = {{"fsdp", -1e-6}};
  expect_usage_error([&] { pj::parse_machine(j.dump(), "m.json"); }, {"unit_overhead_s.fsdp", ">= 0"});
  j = fixture_json("machine.json");
  j["links"]["intra_node"]["all_reduce"]["ring"]["ranks"]["4"] = {{"alpha_s", 1e-5}};
  expect_usage_error([&] { pj::parse_machine(j.dump(), "m.json"); }, {"links.intra_node.all_reduce.ring.ranks.4.bus_bytes_per_s", "missing"});
  j = fixture_json("machine.json");
  j["devices_per_node"] = int64_t{1} << 40;  // an int cannot hold it: an error, not a wrapped count
  expect_usage_error([&] { pj::parse_machine(j.dump(), "m.json"); }, {"m.json", "devices_per_node", "an integer from 1 to 2147483647"});
}

TEST(Projection, PresetsParseAndRoundTrip) {
  for (const auto& e : std::filesystem::directory_iterator(test::source_dir() / "machines")) {
    const pj::Machine m = pj::load_machine(e.path().string());
    const pj::Machine again = pj::parse_machine(pj::machine_json(m).dump(), "again");
    EXPECT_EQ(again.name, m.name);
    EXPECT_EQ(again.total_devices(), m.total_devices());
    EXPECT_EQ(pj::machine_json(again), pj::machine_json(m)) << e.path();
  }
}

TEST(Projection, AlphaBetaPerCollectiveAndAlgorithm) {
  const pj::Machine m = machine();
  // all-reduce ring over 4: 2(N-1) alpha + bytes * 2(N-1)/N / bandwidth.
  const pj::CollCost c = pj::collective_cost(m, pj::Coll::AllReduce, 1e6, 4, false);
  EXPECT_EQ(c.algorithm, "ring");
  EXPECT_NEAR(c.seconds, 6 * 1e-5 + 1e6 * 1.5 / 1e8, 1e-12);
  EXPECT_NEAR(pj::collective_cost(m, pj::Coll::AllReduce, 1e6, 16, true).seconds, 30 * 1e-4 + 1e6 * 2 * 15 / 16 / 1e7, 1e-12);
  EXPECT_EQ(pj::collective_cost(m, pj::Coll::AllReduce, 1e6, 1, false).seconds, 0);
  // With a tree listed, small messages over many ranks take it (log N latency terms).
  pj::Machine t = m;
  t.intra_node["all_reduce"]["tree"] = {1e-5, 5e7, {}, {}};
  EXPECT_EQ(pj::collective_cost(t, pj::Coll::AllReduce, 1e3, 8, false).algorithm, "tree");
  EXPECT_EQ(pj::collective_cost(t, pj::Coll::AllReduce, 1e8, 8, false).algorithm, "ring");
  // A fit at one worker count (calibrate's) is used for exactly that count; others keep the general fit.
  pj::Machine at = m;
  at.intra_node["all_reduce"]["ring"].at_ranks[2] = {3e-5, 2e8, {}, {}};
  EXPECT_NEAR(pj::collective_cost(at, pj::Coll::AllReduce, 1e6, 2, false).seconds, 2 * 3e-5 + 1e6 * 1.0 / 2e8, 1e-12);
  EXPECT_NEAR(pj::collective_cost(at, pj::Coll::AllReduce, 1e6, 4, false).seconds, c.seconds, 1e-12);
  EXPECT_NEAR(pj::collective_cost(at, pj::Coll::AllReduce, 1e6, 2, true).seconds,
              pj::collective_cost(m, pj::Coll::AllReduce, 1e6, 2, true).seconds, 1e-12);  // between nodes: its own level
  const pj::Machine again = pj::parse_machine(pj::machine_json(at).dump(), "again");
  ASSERT_EQ(again.intra_node.at("all_reduce").at("ring").at_ranks.size(), 1u);
  EXPECT_DOUBLE_EQ(again.intra_node.at("all_reduce").at("ring").at_ranks.at(2).alpha_s, 3e-5);
  pj::Machine no_gather = m;
  no_gather.intra_node.erase("all_gather");
  expect_usage_error([&] { pj::collective_cost(no_gather, pj::Coll::AllGather, 1e3, 4, false); }, {"links.intra_node.all_gather"});
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
    return pj::collective_cost(m, pj::Coll::AllReduce, bytes, ranks, false, fit, l).seconds;
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
  EXPECT_DOUBLE_EQ(pj::collective_cost(m, pj::Coll::AllReduce, 544, 2, false, 0, nullptr, true).seconds, 2.75e-6);
  EXPECT_DOUBLE_EQ(pj::collective_cost(m, pj::Coll::AllReduce, 544, 2, false, 0, nullptr, false).seconds, 4.5e-6);
  EXPECT_DOUBLE_EQ(pj::collective_cost(m, pj::Coll::AllReduce, 4096, 2, false, 0, nullptr, true).seconds,
                   pj::collective_cost(m, pj::Coll::AllReduce, 4096, 2, false, 0, nullptr, false).seconds);
  // The machine file keeps them.
  const pj::Machine again = pj::parse_machine(pj::machine_json(m).dump(), "again");
  EXPECT_EQ(again.intra_node.at("all_reduce").at("ring").at_ranks.at(2).late_points, ab.at_ranks[2].late_points);
  EXPECT_EQ(again.intra_node.at("all_reduce").at("ring").at_ranks.at(2).points, ab.at_ranks[2].points);
  EXPECT_EQ(again.intra_node.at("all_reduce").at("ring").in_groups.at(pairs).points, ab.in_groups[pairs].points);
  json j = pj::machine_json(m);
  j["links"]["intra_node"]["all_reduce"]["ring"]["ranks"]["2"]["points"] = {{1024, 5e-6}, {64, 4e-6}};
  expect_usage_error([&] { pj::parse_machine(j.dump(), "m.json"); },
                     {"m.json", "links.intra_node.all_reduce.ring.ranks.2.points[1]", "bytes above the previous pair's 1024"});
  j["links"]["intra_node"]["all_reduce"]["ring"]["ranks"]["2"]["points"] = {{64, 0}};
  expect_usage_error([&] { pj::parse_machine(j.dump(), "m.json"); }, {"ranks.2.points[0]", "[bytes, seconds] of finite numbers > 0"});
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
  const pj::Machine again = pj::parse_machine(pj::machine_json(m).dump(), "again");
  EXPECT_EQ(again.worker_overhead_at_s, m.worker_overhead_at_s);
  json j = fixture_json("machine.json");
  j["worker_overhead_at_s"] = {{"1", 1e-6}};
  expect_usage_error([&] { pj::parse_machine(j.dump(), "m.json"); }, {"m.json", "worker_overhead_at_s.1", "worker count of 2 or more"});
  j["worker_overhead_at_s"] = {{"2", -1e-6}};
  expect_usage_error([&] { pj::parse_machine(j.dump(), "m.json"); }, {"worker_overhead_at_s.2", ">= 0"});
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
  const pj::Machine again = pj::parse_machine(pj::machine_json(m).dump(), "again");
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
  EXPECT_DOUBLE_EQ(pj::parse_machine(pj::machine_json(m).dump(), "again").sender_trails_s, 0.5e-6);
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
  EXPECT_NEAR(pj::collective_cost(m, pj::Coll::AllGather, 64, 2, false, 4).seconds, 50e-6 + 64 * 0.5 / 1e12, 1e-12);
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
  const pj::Machine again = pj::parse_machine(pj::machine_json(m).dump(), "again");
  EXPECT_EQ(again.intra_node.at("all_reduce").at("ring").in_groups.size(), 2u);
  EXPECT_DOUBLE_EQ(again.intra_node.at("all_reduce").at("ring").in_groups.at({2, 4, 2}).alpha_s, 30e-6);
  for (const char* bad : {"2 of 4", "1 of 4 stride 1", "2 of 2 stride 1", "2 of 4 stride 4", "2 of 4 stride 1 ", "02 of 4 stride 1", "2 of 99999999999999999999 stride 1", "-2 of 4 stride 1"}) {
    json j = pj::machine_json(m);
    j["links"]["intra_node"]["all_reduce"]["ring"]["groups"][bad] = {{"alpha_s", 1e-6}, {"bus_bytes_per_s", 1e9}};
    expect_usage_error([&] { pj::parse_machine(j.dump(), "m.json"); },
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
      s.push_back({r, b, 7e-6 * pj::latency_steps(pj::Coll::AllReduce, "ring", r) + b * pj::bus_factor(pj::Coll::AllReduce, r) / 3e9});
  const pj::AlphaBeta ab = pj::fit_alpha_beta(pj::Coll::AllReduce, "ring", s);
  EXPECT_NEAR(ab.alpha_s, 7e-6, 1e-10);
  EXPECT_NEAR(ab.bus_bytes_per_s, 3e9, 3e9 * 1e-6);
}

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
  c.bucket_bytes = 148 * 4;  // one bucket per layer
  const double ar = pj::collective_cost(m, pj::Coll::AllReduce, 148 * 4, 2, false).seconds;
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
  auto cost = [&](pj::Coll c, double bytes, int n) { return pj::collective_cost(m, c, bytes, n, false).seconds; };
  const double P = 4 * 148 * 4.0, sample = 4 * 8 * 8 * 4.0;
  // broadcast, scatter, forward, gather, send back output gradients, backward, reduce.
  const double want = cost(pj::Coll::Broadcast, P, 2) + cost(pj::Coll::SendRecv, 2 * sample, 2) + 4 * 0.002 +
                      cost(pj::Coll::SendRecv, 2 * sample, 2) + cost(pj::Coll::SendRecv, 2 * sample, 2) + 4 * 0.002 +
                      cost(pj::Coll::Reduce, P, 2);
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
  const double ag = pj::collective_cost(m, pj::Coll::AllGather, 148 * 4, 4, false).seconds;
  const double rs = pj::collective_cost(m, pj::Coll::ReduceScatter, 148 * 4, 4, false).seconds;
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
  const double want = regular / 4 + 4 * pj::collective_cost(m, pj::Coll::AllGather, act, 4, false).seconds +
                      3 * pj::collective_cost(m, pj::Coll::AllReduce, act, 4, false).seconds;
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
  EXPECT_EQ(pj::hybrid_shape("dp2xpp4"), std::make_optional(std::make_pair(2, 4)));
  EXPECT_EQ(pj::dptp_shape("dp2xtp4"), std::make_optional(std::make_pair(2, 4)));
  for (const char* bad : {"dp_pp", "dp2xpp", "dp02xpp2", "dp2xpp2x", "pipeline", "dp-1xpp2", "dp2xpp2-1f1b", "dp2xtp2"})
    EXPECT_FALSE(pj::hybrid_shape(bad)) << bad;
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
  EXPECT_NEAR(h.step_s - tp, pj::collective_cost(m, pj::Coll::AllReduce, slices, 2, false).seconds, 1e-9);
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
  EXPECT_NE(r.reason.find("4 layers"), std::string::npos) << r.reason;
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

class ProjectCli : public test::CliTest {
 protected:
  ProjectCli() : CliTest("parbench_project_") {}

  // The example net run with `run_flags`, calibrated at 2 workers, and validated timing its own
  // profile once (--profile-reps `reps`), written as v.json and prof-*.json; returns the validation.
  test::Result validate_example(const std::string& run_flags, int reps) {
    test::Result r = parbench("run --workload " + example_net() + " " + run_flags + " --batch 2 --iterations 2 --warmup 1 --out " + path("run"));
    if (r.code != 0) return r;
    r = parbench("calibrate --ranks 2 --sizes 4,64 --reps 1 --pools 1 --out " + path("cpu.json"));
    if (r.code != 0) return r;
    return parbench("project --validate " + path("run/results.json") + " --machine " + path("cpu.json") +
                    fmt::format(" --profile-reps {} --profile-rounds 1 --out ", reps) + path("v") + " --save-profile " + path("prof"));
  }
  static std::string example_net() { return (test::source_dir() / "workloads" / "examples" / "mixed_stride_pad.json").string(); }
};

TEST_F(ProjectCli, ProjectsEveryStrategyAndMarksItProjected) {
  const test::Result r = parbench("project --profile " + fixture("uniform.json") + " --machine " + fixture("machine.json") +
                                  " --from-profile-peak 0.5 --devices 1,2,4 --batch 4 --out " + path("p"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("Projected, not measured"), std::string::npos);
  EXPECT_NE(r.out.find("projected on test machine"), std::string::npos);
  EXPECT_NE(r.out.find("Best strategy per device count"), std::string::npos);
  const json doc = json::parse(read_file(path("p.json")));
  EXPECT_TRUE(doc["projected"].get<bool>());
  std::set<std::string> seen;
  for (const json& g : doc["groups"])
    for (const json& row : g["rows"])
      if (row["feasible"].get<bool>()) {
        seen.insert(row["strategy"].get<std::string>());
        const double parts = row["compute_s"].get<double>() + row["exposed_comm_s"].get<double>() + row["idle_s"].get<double>();
        EXPECT_NEAR(parts, row["step_s"].get<double>(), 1e-9 * row["step_s"].get<double>()) << row.dump();
      }
  for (const char* s : {"regular", "dp", "ddp", "mp", "pipeline", "fsdp", "zero2", "tp", "dp2xpp2"}) EXPECT_TRUE(seen.count(s)) << s;
}

// What `parbench profile` writes is what `project` reads: the profiler's own extra fields too.
TEST_F(ProjectCli, ReadsTheProfilersOwnOutput) {
  test::Result r = parbench("profile --workload great_net --image 8 --width 0.125 --batch 1,2 --reps 2 --warmup 1 "
                            "--device-kind cpu --out " + path("prof.json"));
  ASSERT_EQ(r.code, 0) << r.err;
  r = parbench("project --profile " + path("prof.json") + " --machine " + fixture("machine.json") +
               " --from-profile-peak 0.5 --devices 1,2 --batch 2 --out " + path("p"));
  ASSERT_EQ(r.code, 0) << r.err;
  const json doc = json::parse(read_file(path("p.json")));
  std::size_t feasible = 0;
  for (const json& g : doc["groups"])
    for (const json& row : g["rows"]) feasible += row["feasible"].get<bool>() && row["step_s"].get<double>() > 0;
  EXPECT_GT(feasible, 0u);
  // A per-batch workspace list of the wrong length is named.
  json prof = json::parse(read_file(path("prof.json")));
  prof["layers"][0]["workspace_bytes_per_batch"] = json::array({1});
  write_file_atomic(path("bad_prof.json"), prof.dump());
  r = parbench("project --profile " + path("bad_prof.json") + " --machine " + fixture("machine.json"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("layers[0].workspace_bytes_per_batch"), std::string::npos) << r.err;
}

TEST_F(ProjectCli, BadInputExitsTwoNamingIt) {
  json m = fixture_json("machine.json");
  m["overlap"] = "yes";
  write_file_atomic(path("m.json"), m.dump());
  test::Result r = parbench("project --profile " + fixture("uniform.json") + " --machine " + path("m.json"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("m.json: overlap: expected true or false"), std::string::npos) << r.err;
  r = parbench("project --profile " + fixture("uniform.json") + " --machine " + fixture("machine.json") + " --strategies sp");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--strategies"), std::string::npos) << r.err;
  r = parbench("project --profile " + path("missing.json") + " --machine " + fixture("machine.json"));
  EXPECT_EQ(r.code, 2) << r.err;
}

TEST_F(ProjectCli, ValidateTimesPipelinesStageByStage) {
  // mp and pipeline run each stage as a Sequential of its own: validate times them so, once per
  // stage count, and keeps that profile with --save-profile.
  const test::Result r = validate_example("--strategies mp,pipeline --devices 2 --threads 1", 1);
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string said = "timing stage by stage (2 stages, 2 worker(s) at once)";
  const std::size_t first = r.err.find(said);
  ASSERT_NE(first, std::string::npos) << r.err;
  EXPECT_EQ(r.err.find(said, first + 1), std::string::npos) << "timed once for both strategies: " << r.err;
  const json v = json::parse(read_file(path("v.json")));
  ASSERT_EQ(v["rows"].size(), 2u) << v.dump();
  for (const json& row : v["rows"]) EXPECT_GT(row["predicted_s"].get<double>(), 0) << row.dump();
  const pj::Profile whole = pj::load_profile(path("prof-threads1-workers2.json"));
  const pj::Profile staged = pj::load_profile(path("prof-stages2-threads1-workers2.json"));
  EXPECT_EQ(staged.context.at("stages").get<int>(), 2);
  ASSERT_EQ(staged.layers.size(), whole.layers.size());
  EXPECT_EQ(staged.batches, whole.batches);
  // The net's first layer computes no input gradient; the second stage's first layer does, as
  // that stage's backward sends it to the first.
  const NetPlan plan = plan_net(load_net_json(example_net()));
  const auto ranges = split_stages(plan, 2, {}, "mp");
  ASSERT_EQ(ranges.size(), 2u);
  for (std::size_t b = 0; b < staged.batches.size(); ++b) {
    EXPECT_EQ(staged.layers[0].backward_data_s[b], 0.0);
    EXPECT_GT(staged.layers[static_cast<std::size_t>(ranges[1].first)].backward_data_s[b], 0.0);
    for (const pj::LayerProfile& l : staged.layers) EXPECT_GE(l.forward_s[b], 0.0);
  }
}

TEST_F(ProjectCli, ValidateTimesTpsOwnReluApartFromTheConvolution) {
  // tp runs every ReLU on its own, where the whole net's Sequential may run it inside the
  // convolution before it (oneDNN fuses the two) and time it as nothing: tp's layer-by-layer
  // profile gives each ReLU that feeds a split layer its own time; fsdp's keeps the whole net's.
  const test::Result r = validate_example("--strategies tp,fsdp --devices 1", 3);
  ASSERT_EQ(r.code, 0) << r.err;
  const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const pj::Profile whole = pj::load_profile(path(fmt::format("prof-threads{}-workers1.json", threads)));
  const pj::Profile tp = pj::load_profile(path(fmt::format("prof-tp1-threads{}-workers1.json", threads)));
  const pj::Profile fsdp = pj::load_profile(path(fmt::format("prof-layers1-threads{}-workers1.json", threads)));
  EXPECT_TRUE(tp.context.at("tp_relu_and_copies").get<bool>());
  EXPECT_FALSE(fsdp.context.at("tp_relu_and_copies").get<bool>());
  ASSERT_EQ(tp.layers.size(), whole.layers.size());
  int fed = 0;
  for (std::size_t i = 0; i + 1 < tp.layers.size(); ++i) {
    if (tp.layers[i].type != "relu") continue;
    for (std::size_t b = 0; b < tp.batches.size(); ++b) {
      EXPECT_EQ(fsdp.layers[i].forward_s[b], whole.layers[i].forward_s[b]) << "layer " << i;
      const std::string next = tp.layers[i + 1].type;
      if (next == "conv2d" || next == "linear") {
        EXPECT_GT(tp.layers[i].forward_s[b], 0.0) << "layer " << i;
        ++fed;
      } else {
        EXPECT_EQ(tp.layers[i].forward_s[b], whole.layers[i].forward_s[b]) << "layer " << i;  // before the flatten
      }
    }
  }
  EXPECT_EQ(fed, 3 * static_cast<int>(tp.batches.size()));  // the ReLUs before conv 2, conv 3 and the last linear
}

TEST_F(ProjectCli, ValidateTimesAtMostAsManyWorkersSideBySideAsCores) {
  // Four one-thread workers: timed side by side by as many as the cores run at once (the
  // simulator shares the cores beyond); two workers, by two where there are two cores.
  test::Result r = parbench("run --workload linear --strategies ddp --devices 2,4 --batch 2 --iterations 3 --warmup 1 --out " +
                            path("run"));
  ASSERT_EQ(r.code, 0) << r.err;
  r = parbench("project --validate " + path("run/results.json") + " --machine " +
               (test::source_dir() / "machines/this_cpu.json").string() +
               " --profile-reps 1 --profile-rounds 1 --out " + path("v") + " --save-profile " + path("prof"));
  ASSERT_EQ(r.code, 0) << r.err;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (const int n : {2, 4}) {
    const int t = std::max(1, cores / n), k = std::min(n, std::max(1, cores / t));  // run's threads per worker
    EXPECT_TRUE(std::filesystem::exists(path(fmt::format("prof-threads{}-workers{}.json", t, k)))) << n << " on " << cores;
    if (k < n) {
      EXPECT_FALSE(std::filesystem::exists(path(fmt::format("prof-threads{}-workers{}.json", t, n)))) << n << " on " << cores;
    }
  }
  const json v = json::parse(read_file(path("v.json")));
  EXPECT_EQ(v["rows"].size(), 2u);
  // The saved profiles predict the run again without timing anything: the same predictions.
  r = parbench("project --validate " + path("run/results.json") + " --machine " +
               (test::source_dir() / "machines/this_cpu.json").string() + " --load-profile " + path("prof") + " --out " + path("again"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err.find("timing"), std::string::npos) << r.err;
  const json again = json::parse(read_file(path("again.json")));
  ASSERT_EQ(again["rows"].size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) EXPECT_EQ(again["rows"][i]["predicted_s"], v["rows"][i]["predicted_s"]) << i;
  const std::string validate = "project --validate " + path("run/results.json") + " --machine " +
                               (test::source_dir() / "machines/this_cpu.json").string();
  r = parbench(validate + " --load-profile " + path("nothing"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--load-profile"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("nothing-threadsT-workersK.json"), std::string::npos) << r.err;
  r = parbench(validate + " --load-profile " + path("prof") + " --profile " + path("prof-threads1-workers2.json"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--profile does not apply"), std::string::npos) << r.err;
}

TEST_F(ProjectCli, ValidateComparesEveryMeasuredConfiguration) {
  test::Result r = parbench("run --workload linear --strategies regular,dp,ddp,mp,pipeline,tp --devices 1,2 --all-at-one-device --batch 2 --iterations 3 --warmup 1 --out " +
                                path("run"));
  ASSERT_EQ(r.code, 0) << r.err;
  r = parbench("calibrate --ranks 2,4 --sizes 64B,4 --reps 2 --pools 2 --out " + path("cpu.json"));
  ASSERT_EQ(r.code, 0) << r.err;
  const pj::Machine cpu = pj::load_machine(path("cpu.json"));
  for (const char* c : {"all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "send_recv"})
    EXPECT_TRUE(cpu.intra_node.count(c)) << c;
  // Each collective fitted at 2 and at 4 workers alone besides over both, and those times kept to be read
  // off (64 B and 4 KiB, made non-decreasing); send/recv is timed at 2 only.
  for (const char* c : {"all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "send_recv"}) {
    const auto& at = cpu.intra_node.at(c).begin()->second.at_ranks;
    EXPECT_EQ(at.size(), std::string(c) == "send_recv" ? 1u : 2u) << c;
    for (const auto& [n, f] : at) {
      std::vector<pj::Sample> timed;
      for (const json& s : cpu.calibration.at(c))
        if (s.at("ranks").get<int>() == n) timed.push_back({n, s.at("bytes").get<double>(), s.at("seconds").get<double>()});
      ASSERT_EQ(timed.size(), 2u) << c << " x" << n;
      EXPECT_EQ(f.points, pj::monotone_points(timed)) << c << " x" << n;
      ASSERT_EQ(f.points.size(), 2u) << c << " x" << n;
      EXPECT_EQ(f.points[0].first, 64.0);
      EXPECT_EQ(f.points[1].first, 4096.0);
      EXPECT_LE(f.points[0].second, f.points[1].second) << c << " x" << n;
      // Small messages timed with the last worker late as well (not send/recv's pairs).
      EXPECT_EQ(f.late_points.size(), std::string(c) == "send_recv" ? 0u : 2u) << c << " x" << n;
    }
  }
  // Microseconds below, not a scheduler tick: where calibrate found the machine quiet, as it records.
  const double steal = cpu.calibration.value("steal_fraction", 0.0), others = cpu.calibration.value("others_fraction", 0.0);
  const bool quiet = steal <= pb::kStealWarning && others <= pb::kOthersWarning;
  if (!quiet)
    std::cerr << "note: calibrate recorded steal " << steal << " and other processes " << others
              << " of the CPUs' time: its lags are not bounded here\n";
  // The other workers' start after worker 0, per count, within the dispatch that holds it.
  ASSERT_EQ(cpu.worker_start_at_s.size(), 2u);
  for (const auto& [n, lag] : cpu.worker_start_at_s) {
    EXPECT_GT(lag, 0) << n;
    if (quiet) {
      EXPECT_LT(lag, 1e-3) << n;
    }
  }
  EXPECT_TRUE(cpu.intra_node.at("send_recv").at("direct").at_ranks.count(2));
  // How long after its receiver a blocking send's sender goes on.
  EXPECT_GT(cpu.sender_trails_s, 0);
  if (quiet) {
    EXPECT_LT(cpu.sender_trails_s, 1e-3);
  }
  // Where 4 one-thread workers outnumber the cores, their pairs meeting at once were timed too,
  // consecutive and 2 apart, and fitted; on 4 or more cores there is no such layout.
  const bool outnumbered = std::thread::hardware_concurrency() < 4;
  for (const char* c : {"all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "send_recv"}) {
    const auto& groups = cpu.intra_node.at(c).begin()->second.in_groups;
    EXPECT_EQ(groups.size(), outnumbered ? 2u : 0u) << c;
    if (!outnumbered) continue;
    for (const int stride : {1, 2}) {
      ASSERT_TRUE(groups.count({2, 4, stride})) << c << " " << stride;
      EXPECT_GT(groups.at({2, 4, stride}).bus_bytes_per_s, 0) << c;
      EXPECT_EQ(cpu.calibration.at("groups").at(c).at(fmt::format("2 of 4 stride {}", stride)).size(), 2u) << c;  // --sizes 64B,4
      EXPECT_EQ(groups.at({2, 4, stride}).points.size(), 2u) << c;
    }
  }
  // The workers arrived together at every timed call (the default), as recorded; and what share of
  // the machine's time other processes took meanwhile.
  EXPECT_DOUBLE_EQ(cpu.calibration.at("skew_s").get<double>(), 0.0);
  if (std::filesystem::exists("/proc/stat")) {
    const double others = cpu.calibration.at("others_fraction").get<double>();
    EXPECT_GE(others, 0.0);
    EXPECT_LE(others, 1.0);
  }
  // The step overhead: the median of the recorded rounds (each the step less its predicted work), never negative.
  std::vector<double> rounds = cpu.calibration.at("step_overhead_rounds_s").get<std::vector<double>>();
  ASSERT_EQ(rounds.size(), 5u);
  std::sort(rounds.begin(), rounds.end());
  EXPECT_DOUBLE_EQ(cpu.step_overhead_s, std::max(0.0, rounds[2]));
  // fsdp's and zero2's bookkeeping per unit likewise: the median of their rounds, never negative.
  for (const char* s : {"fsdp", "zero2"}) {
    rounds = cpu.calibration.at("unit_overhead_rounds_s").at(s).get<std::vector<double>>();
    ASSERT_EQ(rounds.size(), 5u) << s;
    std::sort(rounds.begin(), rounds.end());
    ASSERT_TRUE(cpu.unit_overhead_s.count(s)) << s;
    EXPECT_DOUBLE_EQ(cpu.unit_overhead_s.at(s), std::max(0.0, rounds[2])) << s;
  }
  // Each further worker count's overhead makes ddp's predicted step of the MLP meet its measured
  // one, round by round as recorded: their differences' median about 0, or below it where the
  // overhead stopped at 0.
  ASSERT_EQ(cpu.worker_overhead_at_s.size(), 2u);
  for (const int k : {2, 4}) {
    const auto measured = cpu.calibration.at("ddp_step_rounds_s").at(std::to_string(k)).get<std::vector<double>>();
    const auto predicted = cpu.calibration.at("ddp_predicted_rounds_s").at(std::to_string(k)).get<std::vector<double>>();
    ASSERT_EQ(measured.size(), 5u) << k;
    ASSERT_EQ(predicted.size(), 5u) << k;
    std::vector<double> diff;
    for (std::size_t i = 0; i < measured.size(); ++i) diff.push_back(measured[i] - predicted[i]);
    const double med = pb::reports::median(diff), step = pb::reports::median(measured);
    EXPECT_GE(cpu.worker_overhead_at_s.at(k), 0) << k;
    if (cpu.worker_overhead_at_s.at(k) > 0) EXPECT_LT(std::abs(med), 0.05 * step) << k;
    else EXPECT_LE(med, 0.05 * step) << k;
  }
  for (const std::string bad : {"--skew-us -5", "--pools 0", "--sizes 64B,1,64b", "--sizes 4", "--sizes 1,2x", "--sizes 8B,1"}) {
    r = parbench("calibrate " + bad + " --out " + path("never.json"));
    EXPECT_EQ(r.code, 2) << bad;
    EXPECT_NE(r.err.find(bad.substr(0, bad.find(' '))), std::string::npos) << r.err;
    EXPECT_FALSE(std::filesystem::exists(path("never.json")));
  }
  r = parbench("calibrate --sizes 8B,1 --out " + path("never.json"));  // 2 floats: no piece for 4 ranks
  EXPECT_NE(r.err.find("at least one per rank (4 ranks: 16 B or more"), std::string::npos) << r.err;
  r = parbench("project --validate " + path("run/results.json") + " --machine " + path("cpu.json") +
               " --profile-reps 1 --profile-rounds 1 --out " + path("v") + " --save-profile " + path("prof"));
  ASSERT_EQ(r.code, 0) << r.err;
  // Workers timed side by side go at the slowest one's pace, a factor >= 1 per batch; one alone at its own.
  for (const int k : {1, 2}) {
    const pj::Profile p = pj::load_profile(path(fmt::format("prof-threads1-workers{}.json", k)));
    ASSERT_EQ(p.concurrent, k);
    const std::vector<double> f = p.context.at("slowest_worker_factor").get<std::vector<double>>();
    ASSERT_EQ(f.size(), p.batches.size());
    for (double x : f) {
      if (k == 1) EXPECT_DOUBLE_EQ(x, 1.0);
      else EXPECT_GE(x, 1.0);
    }
  }
  const json v = json::parse(read_file(path("v.json")));
  // Every strategy at 1, dp, ddp and tp at 2: mp and pipeline cannot split the one-layer net over 2 workers (the
  // run reports those as errors, and validate leaves them out). tp at 2 is predicted from its timed channel slices.
  ASSERT_EQ(v["rows"].size(), 9u);
  EXPECT_NE(r.err.find("timing layer by layer (2 channel slice(s)"), std::string::npos) << r.err;
  double mean = 0, worst = 0;
  for (const json& row : v["rows"]) {
    const double e = (row["predicted_s"].get<double>() - row["measured_s"].get<double>()) / row["measured_s"].get<double>();
    EXPECT_NEAR(row["error"].get<double>(), e, 1e-12);
    mean += std::abs(e) / v["rows"].size();
    worst = std::max(worst, std::abs(e));
  }
  EXPECT_NEAR(v["mean_abs_error"].get<double>(), mean, 1e-12);
  EXPECT_NEAR(v["worst_abs_error"].get<double>(), worst, 1e-12);
  {
    // The one-device regular, dp, ddp and mp rows: their measured spread, as printed.
    double lo = 1e9, hi = 0;
    for (const json& row : v["rows"]) {
      const std::string n = row["name"];
      for (const char* s : {"linear/regular/devices:1/", "linear/dp/devices:1/", "linear/ddp/devices:1/", "linear/mp/devices:1/"})
        if (n.find(s) == 0) lo = std::min(lo, row["measured_s"].get<double>()), hi = std::max(hi, row["measured_s"].get<double>());
    }
    EXPECT_NEAR(v["one_device_spread"].get<double>(), hi / lo - 1, 1e-9);
    if (hi > lo) {
      EXPECT_NE(r.out.find("Repeatability: regular, dp, ddp and mp on one device"), std::string::npos) << r.out;
    }
  }
  // Rows of the dp x pp hybrid are matched by their run names (dp<D>xpp<P>): ddp's rows renamed
  // to dp2xpp2 on 4 devices, predicted from a 4-layer profile.
  {
    std::string text = read_file(path("run/results.json"));
    for (std::size_t at; (at = text.find("linear/ddp/devices:2/")) != std::string::npos;)
      text.replace(at, 21, "linear/dp2xpp2/devices:4/");
    write_file_atomic(path("hybrid.json"), text);
    r = parbench("project --validate " + path("hybrid.json") + " --machine " + path("cpu.json") + " --profile " +
                 fixture("uniform.json") + " --out " + path("h"));
    ASSERT_EQ(r.code, 0) << r.err;
    const json h = json::parse(read_file(path("h.json")));
    int hybrid_rows = 0;
    for (const json& row : h["rows"])
      if (row["name"].get<std::string>().find("/dp2xpp2/devices:4/") != std::string::npos) {
        ++hybrid_rows;
        EXPECT_GT(row["predicted_s"].get<double>(), 0);
      }
    EXPECT_EQ(hybrid_rows, 1) << h.dump();
  }
  // A count in the run's context that an int cannot hold, or not whole: bad input naming the key.
  for (const char* bad : {"1e300", "2.5"}) {
    json run = json::parse(read_file(path("run/results.json")));
    run["context"]["world_size"] = bad;
    write_file_atomic(path("bad_world.json"), run.dump());
    r = parbench("project --validate " + path("bad_world.json") + " --machine " + path("cpu.json") + " --profile " +
                 fixture("uniform.json") + " --out " + path("never"));
    EXPECT_EQ(r.code, 2) << bad;
    EXPECT_NE(r.err.find("context \"world_size\" is \"" + std::string(bad) + "\", expected a whole number"), std::string::npos) << r.err;
    EXPECT_FALSE(std::filesystem::exists(path("never.json")));
  }
  // --anchor: every prediction x (regular on one device: measured / predicted), that row left out.
  {
    const std::string common = "project --validate " + path("run/results.json") + " --machine " + path("cpu.json") +
                               " --profile " + fixture("uniform.json");
    ASSERT_EQ(parbench(common + " --out " + path("plain")).code, 0);
    r = parbench(common + " --anchor --out " + path("anchored"));
    ASSERT_EQ(r.code, 0) << r.err;
    const json plain = json::parse(read_file(path("plain.json"))), anchored = json::parse(read_file(path("anchored.json")));
    std::map<std::string, double> predicted;
    double scale = 0;
    for (const json& row : plain["rows"]) {
      predicted[row["name"]] = row["predicted_s"];
      if (row["name"].get<std::string>().find("linear/regular/devices:1/") == 0)
        scale = row["measured_s"].get<double>() / row["predicted_s"].get<double>();
    }
    ASSERT_GT(scale, 0);
    EXPECT_NEAR(anchored["anchor_scale"].get<double>(), scale, 1e-9 * scale);
    ASSERT_EQ(anchored["rows"].size(), plain["rows"].size() - 1);
    for (const json& row : anchored["rows"]) {
      EXPECT_EQ(row["name"].get<std::string>().find("linear/regular/devices:1/"), std::string::npos);
      EXPECT_NEAR(row["predicted_s"].get<double>(), predicted.at(row["name"]) * scale, 1e-9 * predicted.at(row["name"]));
    }
    EXPECT_NE(read_file(path("anchored.md")).find("| anchor |"), std::string::npos);
    // Nothing to anchor to: bad input naming the flag.
    std::string text = read_file(path("run/results.json"));
    for (std::size_t at; (at = text.find("linear/regular/")) != std::string::npos;) text.replace(at, 15, "linear/fsdp/");
    write_file_atomic(path("no_regular.json"), text);
    r = parbench("project --validate " + path("no_regular.json") + " --machine " + path("cpu.json") + " --profile " +
                 fixture("uniform.json") + " --anchor");
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.err.find("--anchor"), std::string::npos) << r.err;
  }
  // Every row carries the run's timed iterations; their median is the measured time.
  for (const json& row : v["rows"]) {
    std::vector<double> t = row["measured_times_s"].get<std::vector<double>>();
    ASSERT_EQ(t.size(), 3u) << row.dump();  // 3 iterations, 1 repetition
    EXPECT_NEAR(reports::median(t), row["measured_s"].get<double>(), 1e-12);
  }
  // --combine pools validations as pairs: measured = the median of the rounds' measured times,
  // predicted = that x the median of the rounds' predicted / measured; a configuration in one
  // round only is pooled from that one.
  {
    json other = v;  // a second round: the same rows, but the one below
    const std::string once = other["rows"][0]["name"];  // in one round only
    other["rows"].erase(other["rows"].begin());
    for (json& row : other["rows"]) {  // measured 1.5x slower, predicted 1.2x
      for (json& t : row["measured_times_s"]) t = t.get<double>() * 1.5;
      row["measured_s"] = row["measured_s"].get<double>() * 1.5;
      row["predicted_s"] = row["predicted_s"].get<double>() * 1.2;
    }
    write_file_atomic(path("other.json"), other.dump());
    r = parbench("project --combine " + path("v.json") + "," + path("other.json") + " --out " + path("pooled"));
    ASSERT_EQ(r.code, 0) << r.err;
    const json pooled = json::parse(read_file(path("pooled.json")));
    EXPECT_EQ(pooled["rounds"].get<int>(), 2);
    std::map<std::string, std::vector<const json*>> by_name;
    for (const json* f : std::initializer_list<const json*>{&v, &other})
      for (const json& row : (*f)["rows"]) by_name[row["name"]].push_back(&row);
    ASSERT_EQ(pooled["rows"].size(), by_name.size());
    double mean = 0;
    for (const json& row : pooled["rows"]) {
      std::vector<double> measured, ratio;
      for (const json* src : by_name.at(row["name"])) {
        measured.push_back((*src)["measured_s"]);
        ratio.push_back((*src)["predicted_s"].get<double>() / (*src)["measured_s"].get<double>());
      }
      const double m = reports::median(measured);
      EXPECT_NEAR(row["measured_s"].get<double>(), m, 1e-12 * m) << row.dump();
      EXPECT_NEAR(row["predicted_s"].get<double>(), m * reports::median(ratio), 1e-12 * m) << row.dump();
      if (measured.size() == 2) {  // (1 + 1.2 / 1.5) / 2 of the first round's ratio, at 1.25x its measured time
        EXPECT_NEAR(row["error"].get<double>() + 1, 0.9 * ratio[0], 1e-9) << row.dump();
        EXPECT_NEAR(row["measured_s"].get<double>(), 1.25 * measured[0], 1e-12 * m) << row.dump();
      }
      const double e = row["predicted_s"].get<double>() / row["measured_s"].get<double>() - 1;
      EXPECT_NEAR(row["error"].get<double>(), e, 1e-12);
      mean += std::abs(e) / pooled["rows"].size();
    }
    EXPECT_NEAR(pooled["mean_abs_error"].get<double>(), mean, 1e-12);
    EXPECT_NE(r.out.find("Not in every round"), std::string::npos) << r.out;
    ASSERT_EQ(by_name.at(once).size(), 1u);
    EXPECT_NE(r.out.find(once + " (1 of 2)"), std::string::npos) << r.out;
    // Bad input: one file, a flag that does not apply, a row without its prediction.
    r = parbench("project --combine " + path("v.json"));
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.err.find("--combine"), std::string::npos) << r.err;
    r = parbench("project --combine " + path("v.json") + "," + path("other.json") + " --machine " + path("cpu.json"));
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.err.find("--machine"), std::string::npos) << r.err;
    other["rows"][0].erase("predicted_s");
    write_file_atomic(path("broken.json"), other.dump());
    r = parbench("project --combine " + path("v.json") + "," + path("broken.json") + " --out " + path("never"));
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.err.find("broken.json: rows[0].predicted_s"), std::string::npos) << r.err;
    EXPECT_FALSE(std::filesystem::exists(path("never.json")));
  }
  // A run whose context cannot be read is bad input naming the key.
  json run = json::parse(read_file(path("run/results.json")));
  run["context"]["bucket_mb"] = "lots";
  write_file_atomic(path("bad.json"), run.dump());
  r = parbench("project --validate " + path("bad.json") + " --machine " + path("cpu.json"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("\"bucket_mb\" is \"lots\""), std::string::npos) << r.err;
}

}  // namespace
}  // namespace pb
