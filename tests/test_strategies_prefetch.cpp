// fsdp-prefetch and zero2-prefetch (FSDP2's forward and backward prefetch): the same function as
// regular, and fsdp's and zero2's arithmetic bit for bit; each unit's all-gather started before the
// previous unit's compute and waited for after it; fsdp-prefetch one unit's parameters above fsdp
// in memory, zero2-prefetch level with zero2, measured and estimated; exposed communication
// measured; the projection prices the same plan and hides the gathers behind compute.
#include "tests/test_strategies_support.h"

#include "plan/memory.h"
#include "plan/check.h"
#include "scenarios/predict.h"
#include "strategies/breakdown.h"
#include "strategies/plan_gen.h"
#include "strategies/rules.h"
#include "tests/plan_cases.h"
#include "tests/test_projection_support.h"

namespace pb {
namespace {

using namespace pb::strategies_test;

const std::pair<const char*, const char*> kVariants[] = {{"fsdp", "fsdp-prefetch"}, {"zero2", "zero2-prefetch"}};

TEST(Strategies, FsdpPrefetchMatchesRegular) {
  // As FsdpMatchesRegular: 1-4 workers, uneven shards and chunks, fewer chunks than workers.
  for (const auto& [base, s] : kVariants) {
    check_equivalence(s, options(1), {7});
    check_equivalence(s, options(1), {2}, false);
  }
}

TEST(Strategies, FsdpPrefetchMovesTheGathersNotTheArithmetic) {
  // The same losses and parameters as the variant without prefetch, bit for bit, and the same
  // communication per kind: only the order of the calls differs.
  for (int n : {2, 3, 4}) {
    for (const auto& [base, s] : kVariants) {
      SCOPED_TRACE(fmt::format("{} over {} workers", s, n));
      const Trained a = train(base, options(n), small_great_net(), {7}, 3), b = train(s, options(n), small_great_net(), {7}, 3);
      EXPECT_EQ(a.losses, b.losses);
      EXPECT_TRUE(a.params == b.params) << "parameters differ";
      for (int w = 0; w < n; ++w)
        for (int k = 0; k < kCollKinds; ++k) {
          EXPECT_EQ(a.stats.workers[w].kinds[k].bytes, b.stats.workers[w].kinds[k].bytes) << coll_kind_name(CollKind(k));
          EXPECT_EQ(a.stats.workers[w].kinds[k].calls, b.stats.workers[w].kinds[k].calls) << coll_kind_name(CollKind(k));
        }
    }
  }
}

// Where in worker w's list: the first action of `kind` over unit u's layers after `from`.
int find(const Plan& p, int w, ActionKind kind, const FsdpUnit& u, int from = 0, CollKind coll = CollKind::Other) {
  const auto& list = p.actions[w];
  for (int i = from; i < static_cast<int>(list.size()); ++i)
    if (list[i].kind == kind && list[i].layer_begin == u.begin && (kind != ActionKind::Collective || list[i].coll == coll))
      return i;
  return -1;
}
int wait_for(const Plan& p, int w, int id) {
  for (const Action& a : p.actions[w])
    if (a.kind == ActionKind::Wait && std::find(a.waits.begin(), a.waits.end(), id) != a.waits.end()) return a.id;
  return -1;
}

TEST(FsdpPrefetch, EachGatherStartsBeforeThePreviousUnitsComputeAndIsWaitedAfterIt) {
  const NetPlan net = test::plan_test_net();
  for (int n : {2, 3}) {
    const std::vector<FsdpUnit> units = fsdp_units(net, n);
    const int nu = static_cast<int>(units.size());
    ASSERT_GE(nu, 3);
    for (const auto& [base, s] : kVariants) {
      SCOPED_TRACE(fmt::format("{} at {} workers", s, n));
      const bool reshard = std::string(s) == "fsdp-prefetch";
      const Plan p = make_plan(s, net, test::plan_options({s, n, 1}), test::kPlanBatch);
      const Plan q = make_plan(base, net, test::plan_options({base, n, 1}), test::kPlanBatch);
      EXPECT_EQ(issues_text(validate_plan(p)), "");
      for (int w = 0; w < n; ++w) {
        int gathers = 0, base_gathers = 0;
        for (const Action& a : p.actions[w]) gathers += a.kind == ActionKind::Collective && a.coll == CollKind::AllGather;
        for (const Action& a : q.actions[w]) base_gathers += a.kind == ActionKind::Collective && a.coll == CollKind::AllGather;
        EXPECT_EQ(gathers, base_gathers);
        EXPECT_EQ(gathers, (reshard ? 2 : 1) * nu);
        if (p.replica[w] < 0) continue;  // without a chunk: no compute to overlap
        for (int u = 1; u < nu; ++u) {  // forward: unit u's gather under unit u-1's forward
          const int g = find(p, w, ActionKind::Collective, units[u], 0, CollKind::AllGather);
          const int prev = find(p, w, ActionKind::Forward, units[u - 1]), mine = find(p, w, ActionKind::Forward, units[u]);
          ASSERT_GE(g, 0);
          EXPECT_TRUE(p.actions[w][g].async);
          EXPECT_EQ(p.actions[w][g].lane, PlanLane::Coll);
          EXPECT_LT(g, prev) << "unit " << u;
          const int wt = wait_for(p, w, g);
          EXPECT_GT(wt, prev) << "unit " << u;
          EXPECT_LT(wt, mine) << "unit " << u;
        }
        if (!reshard) continue;
        const int loss = [&] {
          for (const Action& a : p.actions[w])
            if (a.kind == ActionKind::Loss) return a.id;
          return -1;
        }();
        for (int u = nu - 1; u >= 0; --u) {  // backward: unit u's gather under unit u+1's backward (or the loss)
          const int first = find(p, w, ActionKind::Collective, units[u], 0, CollKind::AllGather);
          const int g = find(p, w, ActionKind::Collective, units[u], first + 1, CollKind::AllGather);
          ASSERT_GE(g, 0) << "unit " << u;
          const int before = u == nu - 1 ? loss : find(p, w, ActionKind::BackwardWeights, units[u + 1]);
          EXPECT_LT(g, before) << "unit " << u;
          EXPECT_GT(wait_for(p, w, g), before) << "unit " << u;
          EXPECT_LT(wait_for(p, w, g), find(p, w, ActionKind::BackwardWeights, units[u])) << "unit " << u;
        }
      }
    }
  }
}

// Linear 512 -> 256 -> 256 -> 256 -> 512 with ReLUs: four units whose parameters outweigh the
// activations, so one unit more or less shows in the peak.
NetSpec wide_linear() {
  NetSpec net = linear_net();
  net.input = {512};
  net.layers.clear();
  for (int64_t out : {256, 256, 256, 512}) {
    LayerSpec l{LayerType::Linear};
    l.out_features = out;
    net.layers.push_back(l);
    if (out != 512) net.layers.push_back(LayerSpec{LayerType::ReLU});
  }
  net.target = Target::Input;
  return net;
}

TEST(FsdpPrefetch, HoldsOneUnitsParametersMoreThanFsdpAndAsMuchAsZero2Does) {
  const NetSpec net = wide_linear();
  const NetPlan plan = plan_net(net);
  for (int n : {2, 4}) {
    SCOPED_TRACE(fmt::format("{} workers", n));
    int64_t largest = 0;  // the largest unit's whole parameters, padded to n shards
    for (const FsdpUnit& u : fsdp_units(plan, n)) largest = std::max(largest, n * u.shard);
    const double unit = static_cast<double>(largest) * sizeof(float);
    std::map<std::string, Trained> t;
    std::map<std::string, MemoryEstimate> e;
    for (const char* s : {"fsdp", "fsdp-prefetch", "zero2", "zero2-prefetch"}) {
      t[s] = train(s, options(n), net, {8}, 1);
      e[s] = plan_memory(make_plan(s, plan, options(n), 8), plan);
    }
    for (int r = 0; r < n; ++r) {
      auto peak = [&](const char* s) { return static_cast<double>(t[s].stats.workers[r].peak_bytes); };
      std::printf("worker %d of %d: peak fsdp %.0f, fsdp-prefetch %.0f, zero2 %.0f, zero2-prefetch %.0f KiB; a unit %.0f KiB\n",
                  r, n, peak("fsdp") / 1024, peak("fsdp-prefetch") / 1024, peak("zero2") / 1024, peak("zero2-prefetch") / 1024,
                  unit / 1024);
      // The second gather buffer, made at setup: exactly the largest unit (the allocator rounds to 64 B).
      EXPECT_NEAR(peak("fsdp-prefetch") - peak("fsdp"), unit, 64) << "worker " << r;
      EXPECT_NEAR(e["fsdp-prefetch"].per_worker[r] - e["fsdp"].per_worker[r], unit, 1) << "worker " << r;
      // zero2 already holds every unit's parameters from forward to backward: prefetch adds nothing.
      EXPECT_NEAR(peak("zero2-prefetch"), peak("zero2"), 64) << "worker " << r;
      EXPECT_DOUBLE_EQ(e["zero2-prefetch"].per_worker[r], e["zero2"].per_worker[r]);
      EXPECT_LT(peak("fsdp-prefetch"), peak("zero2")) << "two of four units against all four";
    }
  }
}

TEST(FsdpPrefetch, ExposedCommunicationIsMeasured) {
  // In-process collectives complete inside their call, so on CPU threads the prefetched gathers
  // cannot run beside compute: exposed communication is measured, within the transfer, for both.
  // (NCCL and MPI complete a started gather at its wait: there the prefetch hides it.)
  const NetSpec net = great_net(16, 0.25);
  for (int n : {2, 4}) {
    for (const auto& [base, s] : kVariants) {
      for (const char* v : {base, s}) {
        const Trained r = train(v, options(n), net, {static_cast<int64_t>(4 * n)}, 3);
        const StepBreakdown b = breakdown(r.stats);
        double transfer = 0, exposed = 0;
        for (const WorkerStats& w : r.stats.workers) {
          EXPECT_LE(w.exposed_transfer_s, w.transfer_s + 1e-9) << v << " x" << n;
          transfer += w.transfer_s, exposed += w.exposed_transfer_s;
        }
        EXPECT_GT(b.exposed_comm_s, 0.0) << v << " x" << n;
        EXPECT_GT(r.stats.workers[0].kinds[static_cast<int>(CollKind::AllGather)].calls, 0) << v;
        std::printf("%-15s x%d: step %.2f ms, transfer %.2f ms, exposed %.2f ms (critical worker %.2f ms)\n", v, n,
                    r.stats.step_s * 1e3, transfer / n * 1e3, exposed / n * 1e3, b.exposed_comm_s * 1e3);
      }
    }
  }
}

TEST(FsdpPrefetch, ProjectionHidesTheGathersBehindCompute) {
  using namespace projection_test;
  // The uniform profile: four conv units; chunk 2 per worker, 0.002 s a unit's forward and as much
  // its backward, far above a gather. With overlap each gather but the first of a pass hides
  // behind the previous unit's compute (the backward's first behind the loss, free here).
  pj::Machine m = machine();
  m.overlap = true;
  const double ag = pj::collective_cost(m, CollKind::AllGather, 148 * 4, 4, false).seconds;
  const pj::Prediction f = pj::predict(uniform(), m, config("fsdp", 4, 8)), fp = pj::predict(uniform(), m, config("fsdp-prefetch", 4, 8));
  const pj::Prediction z = pj::predict(uniform(), m, config("zero2", 4, 8)), zp = pj::predict(uniform(), m, config("zero2-prefetch", 4, 8));
  ASSERT_TRUE(f.feasible && fp.feasible && z.feasible && zp.feasible) << fp.reason << zp.reason;
  ASSERT_LT(ag, 0.002);
  EXPECT_NEAR(f.step_s - fp.step_s, 6 * ag, 1e-9);  // 8 gathers, 2 exposed
  EXPECT_NEAR(z.step_s - zp.step_s, 3 * ag, 1e-9);  // 4 gathers, 1 exposed
  EXPECT_LT(fp.exposed_comm_s, f.exposed_comm_s);
  EXPECT_EQ(fp.comm_bytes, f.comm_bytes);
  EXPECT_GT(fp.peak_bytes, f.peak_bytes);  // the second gathered unit
  // Without overlap the gathers wait on the compute queue as before.
  m.overlap = false;
  EXPECT_NEAR(pj::predict(uniform(), m, config("fsdp-prefetch", 4, 8)).step_s, pj::predict(uniform(), m, config("fsdp", 4, 8)).step_s, 1e-9);
}

}  // namespace
}  // namespace pb
