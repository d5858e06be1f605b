// calibrate's timings of what a step costs beyond its layers and collectives (start lags, the
// sender's trail, dispatch, per-worker and per-unit overheads) and of the CPU's compute rates.
#include <algorithm>
#include <memory>
#include <thread>

#include "bench/calibrate.h"
#include "bench/project.h"
#include "engine/bf16.h"
#include "engine/check.h"
#include "engine/comm.h"
#include "engine/memory_estimate.h"
#include "engine/process.h"
#include "reports/stats.h"
#include "strategies/plan_gen.h"
#include "strategies/pool.h"
#include "strategies/strategy.h"
#include "workloads/workload.h"

namespace pb::calibration {

using reports::median;

double time_start_lag(int workers, int reps) {
  WorkerPool pool(workers, WorkerPool::cores_for(workers, 1));
  std::vector<clk::time_point> start(workers);
  std::vector<double> lag;
  for (int k = 0; k <= reps; ++k) {
    const auto t0 = clk::now();
    pool.run(workers, [&](int i) { start[i] = clk::now(); });
    double sum = 0;
    for (int i = 1; i < workers; ++i) sum += std::chrono::duration<double>(start[i] - t0).count();
    if (k > 0) lag.push_back(sum / (workers - 1));
  }
  return median(lag);
}

double time_sender_trail(int reps) {
  WorkerPool pool(2, WorkerPool::cores_for(2, 1));
  std::vector<std::unique_ptr<Backend>> backends(2);
  BackendOptions bo;
  bo.threads = 1;
  pool.run(2, [&](int i) { backends[i] = make_backend(cpu(i), bo); });
  const std::unique_ptr<Communicator> comm = make_communicator({backends[0].get(), backends[1].get()});
  std::vector<std::vector<float>> bufs(2, std::vector<float>(16, 1.0f));
  std::vector<std::vector<clk::time_point>> out(2, std::vector<clk::time_point>(reps + 1));
  pool.run(2, [&](int i) {
    for (int k = 0; k <= reps; ++k) {  // k = 0: untimed
      busy_work();
      if (i == 0) comm->send(0, bufs[0].data(), 16, 1);
      else comm->recv(1, bufs[1].data(), 16, 0);
      out[i][k] = clk::now();
    }
  });
  std::vector<double> trail;
  for (int k = 1; k <= reps; ++k) trail.push_back(std::chrono::duration<double>(out[0][k] - out[1][k]).count());
  return std::max(0.0, median(trail));
}

double time_dispatch(int workers, int reps) {
  WorkerPool pool(workers, WorkerPool::cores_for(workers, 1));
  std::vector<double> t;
  for (int k = 0; k <= reps; ++k) {
    const auto t0 = clk::now();
    pool.run(workers, [](int) {});
    const double dt = world_max(since(t0));
    if (k > 0) t.push_back(dt);
  }
  return median(t);
}

Overheads time_overheads(int threads, int rounds, const pj::Machine& m, nlohmann::json* record) {
  NetSpec net;  // not a built-in workload: the overhead is the engine's, and validated on those
  net.name = "calibrate-mlp";
  net.input = {16};
  for (int64_t out : {8, 4}) {
    LayerSpec fc;
    fc.type = LayerType::Linear;
    fc.out_features = out;
    net.layers.push_back(fc);
    if (out == 8) {
      LayerSpec relu;
      relu.type = LayerType::ReLU;
      net.layers.push_back(relu);
    }
  }
  net.target = Target::Random;
  const int units = 2;  // fsdp's: each linear layer with the ReLU after it
  const NetPlan plan = plan_net(net);
  const int64_t batch = 2;
  StrategyOptions so;
  so.backend.threads = threads;
  const std::vector<std::string> names = {"regular", "fsdp", "zero2"};
  pj::Machine bare;
  bare.kind = "cpu";
  bare.shared_cores = threads;
  bare.devices_per_node = 1024;  // as calibrate's machine: any number of workers share the cores
  pj::Config c;
  c.strategy = "regular";
  c.global_batch = batch;
  pj::Options o;
  o.threads_per_worker = threads;
  std::vector<double> reg, pred0, unit_steps[2], act;
  const std::vector<int> counts = {2, 4};
  // Per worker count: its threads per worker, and per round ddp's measured step and the profiles
  // to predict it from.
  struct Timed {
    int threads = 1;
    std::vector<double> measured;
    std::vector<std::vector<pj::Profile>> profiles;
  };
  std::map<int, Timed> ddp;
  auto timed_step = [&](const std::string& name, const StrategyOptions& opts, int64_t per_worker) {
    // Set up afresh every round, as the profile is: after some hundreds of steps Adam's first
    // moments of the units the ReLU leaves dead decay into denormals, whose arithmetic is slow
    // (docs/projection.md, the step overhead).
    const std::unique_ptr<Strategy> s = make_strategy(name, opts);
    const int64_t b = per_worker * opts.devices;
    s->setup(plan, init_params(plan, 0), net.adam);
    s->load_batch(synthetic_values(b * numel_of(plan.input), 1), synthetic_values(b * numel_of(plan.output), 2), b);
    for (int k = 0; k < 50; ++k) s->step();  // untimed: allocations, primitives
    std::vector<double> t;
    for (int k = 0; k < 400; ++k) {
      const auto t0 = clk::now();
      s->step();
      t.push_back(since(t0));
    }
    return median(t);
  };
  // ddp at one device, a bucket per layer: regular's arithmetic and actions, and a collective
  // started and waited for per bucket (at one worker, nothing to move): the per-action cost.
  StrategyOptions one = so;
  one.bucket_bytes = one.first_bucket_bytes = 1;
  auto actions = [&](const std::string& name, const StrategyOptions& opts) {
    return static_cast<double>(make_plan(name, plan, opts, batch).actions.at(0).size());
  };
  const double regular_actions = actions("regular", so), extra_ddp = actions("ddp", one) - regular_actions;
  double extra[2];
  for (int i = 0; i < 2; ++i) extra[i] = actions(names[i + 1], so) - regular_actions;
  PB_CHECK(extra_ddp > 0, "calibrate: ddp's plan has no more actions than regular's");
  for (int r = 0; r < rounds; ++r) {
    double med[3];
    for (std::size_t i = 0; i < names.size(); ++i) med[i] = timed_step(names[i], so, batch);
    act.push_back((timed_step("ddp", one, batch) - med[0]) / extra_ddp);
    // This round's profiles by (threads, workers at once): [0] one worker alone, [1] the workers
    // side by side where more than one; worker counts with the same shape share them.
    std::map<std::pair<int, int>, std::vector<pj::Profile>> profiled;
    auto profiles = [&](int t, int together) -> const std::vector<pj::Profile>& {
      std::vector<pj::Profile>& ps = profiled[{t, together}];
      if (ps.empty()) {
        ps.push_back(engine_profile(plan, net.name, {batch}, t, 400));
        if (together > 1) ps.push_back(engine_profile(plan, net.name, {batch}, t, 400, together));
      }
      return ps;
    };
    for (int w : counts) {
      Timed& d = ddp[w];
      d.threads = bare.threads_per_worker(w, 0);
      StrategyOptions dso = so;
      dso.devices = w;
      dso.backend.threads = d.threads;
      d.measured.push_back(timed_step("ddp", dso, batch));
      d.profiles.push_back(profiles(d.threads, std::min(w, std::max(1, threads / d.threads))));
    }
    reg.push_back(med[0]);
    pred0.push_back(pj::predict(profiles(threads, 1).front(), bare, c, o).step_s);  // no overheads
    for (int i = 0; i < 2; ++i) unit_steps[i].push_back(med[i + 1] - med[0]);
  }
  Overheads out;
  out.action_s = std::max(0.0, median(act));
  (*record)["action_overhead_rounds_s"] = act;
  // What regular's and the sharded strategies' steps cost beyond their actions' dispatch.
  std::vector<double> step, unit[2];
  for (int r = 0; r < rounds; ++r) {
    step.push_back(reg[r] - pred0[r] - regular_actions * out.action_s);
    for (int i = 0; i < 2; ++i) unit[i].push_back((unit_steps[i][r] - extra[i] * out.action_s) / units);
  }
  out.step_s = std::max(0.0, median(step));
  (*record)["step_overhead_rounds_s"] = step;
  for (int i = 0; i < 2; ++i) {
    out.unit_s[names[i + 1]] = std::max(0.0, median(unit[i]));
    (*record)["unit_overhead_rounds_s"][names[i + 1]] = unit[i];
  }
  // The worker overhead that makes the prediction meet the measured step: the start lag the
  // simulator puts in is min(start lag, worker overhead), found below.
  pj::Machine mw = m;
  mw.step_overhead_s = out.step_s;
  mw.action_overhead_s = out.action_s;
  mw.worker_overhead_at_s.clear();
  for (int w : counts) {
    Timed& d = ddp.at(w);
    pj::Config dc;
    dc.strategy = "ddp";
    dc.devices = w;
    dc.global_batch = batch * w;
    pj::Options dopt;
    dopt.threads_per_worker = d.threads;
    auto predicted = [&](double over) {
      mw.worker_overhead_at_s[w] = over;
      std::vector<double> steps;
      for (const std::vector<pj::Profile>& ps : d.profiles) {
        dopt.busy_seconds = busy_curve(ps, dopt.threads_per_worker);
        steps.push_back(pj::predict(ps.back(), mw, dc, dopt).step_s);
      }
      return steps;
    };
    // The residual's median falls as the overhead grows, but not linearly (the start lag is capped
    // by it): bisected, where a fixed-point step can overshoot to 0 and stay short of the step.
    auto residual_at = [&](double over) {
      const std::vector<double> steps = predicted(over);
      std::vector<double> residual;
      for (std::size_t r = 0; r < steps.size(); ++r) residual.push_back(d.measured[r] - steps[r]);
      return median(residual);
    };
    double over = 0;
    if (residual_at(0) > 0) {
      double lo = 0, hi = std::max(1e-9, median(d.measured));
      for (int i = 0; i < 40 && residual_at(hi) > 0; ++i) hi *= 2;
      for (int i = 0; i < 40; ++i) {
        const double mid = 0.5 * (lo + hi);
        (residual_at(mid) > 0 ? lo : hi) = mid;
      }
      over = hi;
    }
    out.workers_s[w] = over;
    (*record)["ddp_step_rounds_s"][std::to_string(w)] = d.measured;
    (*record)["ddp_predicted_rounds_s"][std::to_string(w)] = predicted(over);
  }
  (*record)["overhead_note"] =
      "an MLP 16-8-ReLU-4, batch 2, all cores, one device, steps timed as run times them: per action, ddp's at one device "
      "(a bucket per layer) less regular's, over the actions ddp's plan adds; regular's less project's prediction from its "
      "profile without overhead and less its actions'; fsdp's and zero2's less regular's and their added actions', over its 2 "
      "units; ddp's on 2 and 4 workers (batch 2 each, cores shared as run shares them) less its prediction with no worker "
      "overhead; medians of the rounds";
  return out;
}

double conv_flops(int threads, Precision precision) {
  BackendOptions bo;
  bo.threads = threads;
  bo.precision = precision;
  auto be = make_backend(cpu(0), bo);
  ConvGeom g;
  g.n = 8, g.c = 64, g.h = 32, g.w = 32, g.k = 64, g.r = 3, g.s = 3, g.pad_h = 1, g.pad_w = 1;
  const double flops = 2.0 * g.n * g.k * g.p() * g.q() * g.c * g.r * g.s;
  std::vector<float> x = synthetic_values(g.n * g.c * g.h * g.w, 1), w = synthetic_values(g.k * g.c * 9, 2), b(g.k, 0.f),
                     y(g.n * g.k * g.p() * g.q());
  // bf16: the convolution autocast runs, on bf16 copies.
  const bool half = precision == Precision::Bf16;
  auto narrow = [](const std::vector<float>& v) {
    std::vector<Bf16> out(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) out[i] = to_bf16(v[i]);
    return out;
  };
  const std::vector<Bf16> x16 = half ? narrow(x) : std::vector<Bf16>(), w16 = half ? narrow(w) : std::vector<Bf16>(),
                          b16 = half ? narrow(b) : std::vector<Bf16>();
  std::vector<Bf16> y16(half ? y.size() : 0);
  double best = 0;
  for (int k = 0; k < 6; ++k) {
    const auto t0 = clk::now();
    if (half) be->conv2d_forward_bf16(g, x16.data(), w16.data(), b16.data(), y16.data());
    else be->conv2d_forward(g, x.data(), w.data(), b.data(), y.data());
    be->synchronize();
    best = std::max(best, flops / since(t0));
  }
  return best;
}

double parallel_threads(int cores) {
  ConvGeom g;
  g.n = 1, g.c = 32, g.h = 32, g.w = 32, g.k = 32, g.r = 3, g.s = 3, g.pad_h = 1, g.pad_w = 1;
  const std::vector<float> x = synthetic_values(g.c * g.h * g.w, 1), w = synthetic_values(g.k * g.c * 9, 2), b(g.k, 0.f);
  auto work = [&] {
    BackendOptions bo;
    bo.threads = 1;
    auto be = make_backend(cpu(0), bo);
    std::vector<float> y(g.k * g.p() * g.q());
    for (int i = 0; i < 60; ++i) be->conv2d_forward(g, x.data(), w.data(), b.data(), y.data());
    be->synchronize();
  };
  auto rate = [&](int k) {
    std::vector<std::thread> ts;
    const auto t0 = clk::now();
    for (int i = 0; i < k; ++i) ts.emplace_back(work);
    for (auto& t : ts) t.join();
    return k / since(t0);
  };
  rate(1);  // untimed: plans and caches
  double one = 0;
  for (int r = 0; r < 3; ++r) one = std::max(one, rate(1));
  double best = 1;
  for (int k = 2; k <= 2 * cores; k *= 2) {
    double rk = 0;
    for (int r = 0; r < 3; ++r) rk = std::max(rk, rate(k));
    best = std::max(best, rk / one);
  }
  return std::min<double>(best, cores);
}

}  // namespace pb::calibration
