// parbench calibrate: times the collectives the strategies use (all-reduce, broadcast, reduce,
// all-gather, reduce-scatter, send/recv) between CPU workers at a few sizes -- in-process threads, or MPI ranks when started
// by mpirun -- fits alpha-beta per collective, and writes a machine description for `project`.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include <fmt/ranges.h>

#include "bench/cli.h"
#include "bench/project.h"
#include "engine/check.h"
#include "engine/comm.h"
#include "engine/cpu_steal.h"
#include "engine/fsutil.h"
#include "engine/memory_estimate.h"
#include "engine/process.h"
#include "reports/stats.h"
#include "strategies/pool.h"
#include "strategies/strategy.h"
#include "workloads/workload.h"

namespace pb {

namespace {

namespace pj = projection;
using clk = std::chrono::steady_clock;

double since(clk::time_point t0) { return std::chrono::duration<double>(clk::now() - t0).count(); }

using reports::median;

// --sizes: "64B" is 64 bytes, "4" is 4 KiB; in bytes, each a whole number of floats, at least one
// float per rank (an all-gather's piece).
std::vector<int64_t> size_list(const std::string& text, int64_t max_ranks) {
  std::vector<int64_t> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const bool in_bytes = !item.empty() && (item.back() == 'B' || item.back() == 'b');
    const std::string digits = in_bytes ? item.substr(0, item.size() - 1) : item;
    int64_t v = 0;
    const bool number = !digits.empty() && digits.size() <= 12 && std::all_of(digits.begin(), digits.end(), ::isdigit) &&
                        (v = std::stoll(digits)) > 0;
    if (!number) throw UsageError(fmt::format("--sizes: expected sizes in KiB (64) or bytes (64B), comma-separated, got '{}' in '{}'", item, text));
    const int64_t bytes = in_bytes ? v : v * 1024;
    if (bytes % 4 != 0 || bytes / 4 < max_ranks)
      throw UsageError(fmt::format("--sizes: {} is not a whole number of floats, at least one per rank ({} ranks: {} B or more, a multiple of 4)",
                                   item, max_ranks, 4 * max_ranks));
    if (std::find(out.begin(), out.end(), bytes) != out.end()) throw UsageError(fmt::format("--sizes: {} is listed twice in '{}'", item, text));
    out.push_back(bytes);  // in the order given: a pass times them so
  }
  if (out.size() < 2) throw UsageError(fmt::format("--sizes needs at least two different sizes to fit latency and bandwidth, got '{}'", text));
  return out;
}

std::string size_text(double bytes) { return bytes < 1024 ? fmt::format("{:g} B", bytes) : fmt::format("{:g} KiB", bytes / 1024); }

// About 2 us of one thread's arithmetic (a small layer's worth), the same amount every call.
void busy_work(int iters = 600) {
  volatile float x = 1.0f;
  for (int i = 0; i < iters; ++i) x = x * 0.999f + 0.001f;
}

// What the last worker computes more than the others when it is to arrive late: about 1 us, beyond
// the 0.3 us after which its peers no longer contend with it for the rendezvous.
constexpr int kLateIters = 450;
constexpr int64_t kSmall = 64 * 1024;  // messages up to this size: latency, microseconds; timed more often

// One collective over `ranks` workers, `n` floats. In a multi-process job this process is one rank
// and the others are the other processes: the median over reps of the slowest rank's time. In-
// process, with skew_s = 0, each call after a little computation, as in a step (below); else rank i
// arrives skew_s x i late and the time is from the last arrival to the last rank done, the early
// ones woken from their wait.
// layout (in-process, no skew): the workers in groups of layout->size, ranks layout->stride apart
// (stride 1: {0, 1}, {2, 3}; stride 2: {0, 2}, {1, 3}), every group calling at once.
// late (in-process, no skew): the last rank of each group computes about 1 us more before each call,
// so arrives when its peers are already waiting.
double time_collective(pj::Coll c, int ranks, int64_t n, int reps, double skew_s, const pj::AlphaBeta::Layout* layout = nullptr,
                       bool late = false) {
  const bool mpi = multi_process();
  const int local = mpi ? 1 : ranks;
  std::vector<std::unique_ptr<Backend>> backends(local);
  BackendOptions bo;
  bo.threads = 1;
  std::vector<Backend*> ptrs(ranks, nullptr);
  WorkerPool pool(local, WorkerPool::cores_for(local, bo.threads));  // bound as a step's workers are
  pool.run(local, [&](int i) { backends[i] = make_backend(cpu(mpi ? process().rank : i), bo); });
  for (int i = 0; i < local; ++i) ptrs[mpi ? process().rank : i] = backends[i].get();
  // Worker i calls in as rank_of[i] of comms[comm_of[i]]: one communicator of all, or one per group.
  std::vector<std::unique_ptr<Communicator>> comms;
  std::vector<int> comm_of(local, 0), rank_of(local, 0);
  int members = ranks;
  if (layout) {
    const int g = layout->size, s = layout->stride;
    PB_CHECK(!mpi && skew_s == 0 && g >= 2 && s >= 1 && ranks % (g * s) == 0, "calibrate: no layout {} of {}",
             pj::layout_key(*layout), ranks);
    std::vector<std::vector<Backend*>> groups(ranks / g);
    for (int i = 0; i < ranks; ++i) {
      comm_of[i] = i / (g * s) * s + i % s, rank_of[i] = i % (g * s) / s;
      groups[comm_of[i]].push_back(ptrs[i]);
    }
    for (const auto& members_of : groups) comms.push_back(make_communicator(members_of));
    members = g;
  } else {
    comms.push_back(make_communicator(ptrs));
    for (int i = 0; i < local; ++i) rank_of[i] = mpi ? process().rank : i;
  }
  std::vector<std::vector<float>> bufs(local, std::vector<float>(static_cast<std::size_t>(n), 1.0f));
  const int64_t piece = n / members;  // all-gather, reduce-scatter: n is the whole (gathered) buffer
  std::vector<std::vector<float>> pieces(local, std::vector<float>(static_cast<std::size_t>(piece), 0.0f));
  const bool skewed = !mpi && skew_s > 0;
  auto call = [&](int i) {
    const int r = rank_of[i];
    Communicator* comm = comms[comm_of[i]].get();
    float* b = bufs[i].data();
    switch (c) {
      case pj::Coll::AllReduce: comm->all_reduce(r, b, n); break;
      case pj::Coll::Broadcast: comm->broadcast(r, b, n, 0); break;
      case pj::Coll::Reduce: comm->reduce(r, b, n, 0); break;
      case pj::Coll::AllGather: comm->all_gather(r, b + r * piece, b, piece); break;  // in place, as fsdp
      case pj::Coll::ReduceScatter: comm->reduce_scatter(r, b, pieces[i].data(), piece); break;
      case pj::Coll::SendRecv:
        if (r == 0) comm->send(r, b, n, 1);
        else if (r == 1) comm->recv(r, b, n, 0);
        break;
      default: break;
    }
  };
  if (!mpi && !skewed) {
    // Between calls each worker computes a little, as a step's workers do: the cost is then the
    // loop's time less the same loop's without the calls. With several workers to a core, a
    // waiting worker gives its core to one still computing, which a loop of calls alone hides.
    auto loop = [&](bool calls) {
      const auto t0 = clk::now();
      pool.run(local, [&](int i) {
        const bool last = rank_of[i] == members - 1;
        for (int k = 0; k < reps; ++k) {
          busy_work(late && last ? 600 + kLateIters : 600);
          if (calls) call(i);
        }
      });
      return since(t0);
    };
    loop(true);  // untimed
    std::vector<double> with, without;
    for (int k = 0; k < 3; ++k) with.push_back(loop(true)), without.push_back(loop(false));
    return std::max(1e-9, (median(with) - median(without)) / reps);
  }
  std::vector<std::vector<double>> t(local, std::vector<double>(reps + 1));
  std::vector<std::vector<clk::time_point>> arrive(local, std::vector<clk::time_point>(reps + 1)), done = arrive;
  pool.run(local, [&](int i) {
    for (int k = 0; k <= reps; ++k) {  // k = 0: untimed
      if (skewed)
        for (const auto s0 = clk::now(); since(s0) < skew_s * i;) {
        }
      const auto t0 = clk::now();
      arrive[i][k] = t0;
      call(i);
      t[i][k] = since(t0);
      done[i][k] = clk::now();
    }
  });
  std::vector<double> slowest;
  for (int k = 1; k <= reps; ++k) {
    double s = 0;
    if (skewed) {
      clk::time_point last = arrive[0][k], end = done[0][k];
      for (int i = 1; i < local; ++i) last = std::max(last, arrive[i][k]), end = std::max(end, done[i][k]);
      s = std::chrono::duration<double>(end - last).count();
    } else {
      for (int i = 0; i < local; ++i) s = std::max(s, t[i][k]);
    }
    slowest.push_back(world_max(s));
  }
  return median(slowest);
}

// The group layouts calibrate times: in-process, without skew, for each worker count beyond the
// cores (run binds one-thread workers round robin there), groups of every size G dividing it,
// consecutive ranks (stride 1) and ranks N / G apart; send/recv in pairs only.
std::vector<pj::AlphaBeta::Layout> group_layouts(const std::vector<int64_t>& ranks, int cores, bool pairs_only, double skew_s) {
  std::vector<pj::AlphaBeta::Layout> out;
  if (multi_process() || skew_s > 0) return out;
  for (int64_t r : ranks) {
    const int n = static_cast<int>(r);
    if (n <= cores || WorkerPool::cores_for(n, 1).empty()) continue;
    for (int g = 2; g < n; ++g) {
      if (n % g != 0 || (pairs_only && g != 2)) continue;
      out.push_back({g, n, 1});
      out.push_back({g, n, n / g});
    }
  }
  return out;
}

// How long after the caller (task 0) the other N - 1 workers of a step start, on average: the
// median over reps of their mean lag.
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

// Two workers' blocking send/recv of 64 B after a little computation each, as dp's scatter and
// gather: how long after the receiver goes on the sender does (it waits for the receiver's copy).
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

// Starting N workers for a step that does nothing: the step overhead run pays per worker count.
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

// One worker's step overhead: what run times for regular's step beyond the net's own work -- the
// step as sweep times it, on a small MLP (microseconds of arithmetic), less what project predicts
// for it from the same net's profile (layers, loss, Adam timed as profile times them) with no
// overhead. And fsdp's and zero2's bookkeeping per unit: their one-device step of the same MLP
// less regular's, over its units. In `rounds` alternations, so that a slow spell touches all
// alike; the medians of the rounds' differences, which `record` keeps.
//
// And each further worker count's: ddp's step of the same MLP, batch 2 per worker, on 2 and 4
// workers sharing the cores as run shares them, less what project predicts for it with `m` (its
// collectives, start lag and sender trail as calibrated) and no worker overhead: what starting,
// meeting and finishing that many workers costs beyond what the simulator sees (the dispatch of
// an empty step missed half of it: a worker's bookkeeping around its calls, its late start).
struct Overheads {
  double step_s = 0;
  std::map<std::string, double> unit_s;
  std::map<int, double> workers_s;  // worker count -> step overhead beyond one worker's
};
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
  std::vector<double> step, unit[2];
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
    // Set up afresh every round, as the profile is: after ~800 steps Adam's first moments of
    // the units the ReLU leaves dead decay into denormals, whose arithmetic made the step 20%
    // slower (0.6-0.8 us of a 4 us step) in the later rounds of one strategy object.
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
  for (int r = 0; r < rounds; ++r) {
    double med[3];
    for (std::size_t i = 0; i < names.size(); ++i) med[i] = timed_step(names[i], so, batch);
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
      d.threads = cpu_threads_for(bare, w, 0);
      StrategyOptions dso = so;
      dso.devices = w;
      dso.backend.threads = d.threads;
      d.measured.push_back(timed_step("ddp", dso, batch));
      d.profiles.push_back(profiles(d.threads, std::min(w, std::max(1, threads / d.threads))));
    }
    step.push_back(med[0] - pj::predict(profiles(threads, 1).front(), bare, c, o).step_s);
    for (int i = 0; i < 2; ++i) unit[i].push_back((med[i + 1] - med[0]) / units);
  }
  Overheads out;
  out.step_s = std::max(0.0, median(step));
  (*record)["step_overhead_rounds_s"] = step;
  for (int i = 0; i < 2; ++i) {
    out.unit_s[names[i + 1]] = std::max(0.0, median(unit[i]));
    (*record)["unit_overhead_rounds_s"][names[i + 1]] = unit[i];
  }
  // The worker overhead that makes the prediction meet the measured step: the start lag the
  // simulator puts in is min(start lag, worker overhead), so settled in a few passes.
  pj::Machine mw = m;
  mw.step_overhead_s = out.step_s;
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
    double over = 0;
    for (int pass = 0; pass < 4; ++pass) {
      const std::vector<double> steps = predicted(over);
      std::vector<double> residual;
      for (std::size_t r = 0; r < steps.size(); ++r) residual.push_back(d.measured[r] - steps[r]);
      over = std::max(0.0, over + median(residual));
    }
    out.workers_s[w] = over;
    (*record)["ddp_step_rounds_s"][std::to_string(w)] = d.measured;
    (*record)["ddp_predicted_rounds_s"][std::to_string(w)] = predicted(over);
  }
  (*record)["overhead_note"] =
      "an MLP 16-8-ReLU-4, batch 2, all cores, one device, steps timed as run times them: regular's less project's "
      "prediction from its profile without overhead; fsdp's and zero2's less regular's, over its 2 units; ddp's on 2 and 4 "
      "workers (batch 2 each, cores shared as run shares them) less its prediction with no worker overhead; medians of the rounds";
  return out;
}

// The engine's best effective rate (counted FLOPs / time) on all cores, a wide 3x3 convolution as
// great_net runs them: the CPU's "peak" against which `project --from-machine` scales a profile to
// another device (Winograd kernels can make it exceed a datasheet peak).
double conv_flops(int threads) {
  BackendOptions bo;
  bo.threads = threads;
  auto be = make_backend(cpu(0), bo);
  ConvGeom g;
  g.n = 8, g.c = 64, g.h = 32, g.w = 32, g.k = 64, g.r = 3, g.s = 3, g.pad_h = 1, g.pad_w = 1;
  const double flops = 2.0 * g.n * g.k * g.p() * g.q() * g.c * g.r * g.s;
  std::vector<float> x = synthetic_values(g.n * g.c * g.h * g.w, 1), w = synthetic_values(g.k * g.c * 9, 2), b(g.k, 0.f),
                     y(g.n * g.k * g.p() * g.q());
  double best = 0;
  for (int k = 0; k < 6; ++k) {
    const auto t0 = clk::now();
    be->conv2d_forward(g, x.data(), w.data(), b.data(), y.data());
    be->synchronize();
    best = std::max(best, flops / since(t0));
  }
  return best;
}

// How many busy workers run at full speed together here: k threads each running the same
// one-thread convolution through the engine, their total rate against one thread's, the best over
// k. The cores on an idle machine with a core per thread; fewer where threads share a core's
// vector units (hyper-threads) or other work takes its share.
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

}  // namespace

int cmd_calibrate(const std::vector<std::string>& args) {
  Flags f("parbench calibrate",
          "Times the collectives the strategies use between CPU workers (all-reduce, broadcast, reduce,\n"
          "all-gather, reduce-scatter, send/recv) at a few sizes and worker counts -- in-process threads,\n"
          "or MPI ranks when started by mpirun -- fits alpha (per step) and bus bandwidth per collective\n"
          "by least squares (over all worker counts, and at each alone; where a count outnumbers the\n"
          "cores, also with its workers in groups meeting at once: pairs of neighbours, pairs 2 apart;\n"
          "messages up to 64 KiB also with the last worker arriving late, its peers already waiting),\n"
          "measures the step overhead (a small MLP's step as run times it, less its predicted work;\n"
          "fsdp's and zero2's per unit; ddp's on 2 and 4 workers, per worker count) and the engine's\n"
          "best convolution rate, and writes a machine description for `parbench project` (the\n"
          "\"this CPU\" preset).",
          {
              {"out", "FILE", "machine JSON to write", "machines/this_cpu.json"},
              {"ranks", "LIST", "worker counts to time (in-process; under mpirun: the job's size)", "2,4"},
              {"sizes", "LIST", "message sizes: KiB, or bytes with a B suffix (64B); between the smallest and largest, project reads a count's or group's time off these", "64B,1,4,64,1024,8192"},
              {"reps", "N", "timed calls per size (median; 20 x N up to 64 KiB, whose microseconds need more calls to average a VM's hiccups out)", "7"},
              {"skew-us", "US", "in-process: rank i arrives at each call US x i microseconds late, its peers asleep by then; the time counts from the last arrival (0: every worker computes about 2 us between calls, as a step's do, and the calls' cost is the loop's time less the same loop without them)", "0"},
              {"pools", "N", "in-process: N passes over every size, count and group in turn, each timing with a fresh set of worker threads; a point's time is its median over the passes (where the scheduler places a set of threads lasts as long as they do, and a slow spell as long as it does: either can change a small message's time several-fold)", "5"},
              {"name", "TEXT", "the machine's name", ""},
          });
  if (!f.parse(args)) return 0;
  if (!f.positional().empty()) throw UsageError(fmt::format("unexpected argument '{}'", f.positional()[0]));
  const int reps = static_cast<int>(f.integer("reps"));
  const double skew_s = f.number("skew-us") * 1e-6;
  if (!(skew_s >= 0)) throw UsageError(fmt::format("--skew-us must be 0 or more, got {}", f.str("skew-us")));
  if (reps < 1) throw UsageError(fmt::format("--reps must be at least 1, got {}", reps));
  const int pools = multi_process() ? 1 : static_cast<int>(f.integer("pools"));
  if (pools < 1) throw UsageError(fmt::format("--pools must be at least 1, got {}", f.str("pools")));
  std::vector<int64_t> ranks = f.int_list("ranks");
  if (multi_process()) ranks = {process().size};
  for (int64_t r : ranks)
    if (r < 2) throw UsageError(fmt::format("--ranks: every count must be at least 2, got {}", r));
  const std::vector<int64_t> sizes = size_list(f.str("sizes"), *std::max_element(ranks.begin(), ranks.end()));
  const bool lead = process().rank == 0;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));

  const std::optional<CpuTimes> cpu_before = read_cpu_times();
  pj::Machine m;
  m.name = f.has("name") ? f.str("name") : (multi_process() ? "this CPU (MPI processes)" : "this CPU");
  m.kind = "cpu";
  m.model = "cpu";
  m.description = fmt::format("calibrated by parbench calibrate: {} workers as {}", fmt::join(ranks, ", "),
                              multi_process() ? "MPI processes" : "threads of one process");
  m.shared_cores = cores;
  m.devices_per_node = 1024;  // CPU workers are threads or processes: any number share the cores
  m.nodes = 1;
  m.overlap = false;  // the worker's own thread moves the data (in-process) or progresses it (MPI)
  m.memory_bytes = static_cast<double>(available_ram_bytes());
  nlohmann::json record = nlohmann::json::object();
  const std::vector<std::pair<pj::Coll, std::string>> colls = {
      {pj::Coll::AllReduce, "ring"},     {pj::Coll::Broadcast, "ring"},     {pj::Coll::Reduce, "ring"},
      {pj::Coll::AllGather, "ring"},     {pj::Coll::ReduceScatter, "ring"}, {pj::Coll::SendRecv, "direct"}};
  // Every point -- a collective at a size over some workers (or in groups), a dispatch -- is timed
  // once per pass with a fresh set of worker threads, the passes going over all points in turn, and
  // a point's time is its median over the passes. A slow spell (a VM's core taken away for a
  // second, a set of threads placed badly) so sets a pass or two of any point, not every timing of
  // a few neighbouring points. Small messages: latency alone, microseconds; more calls per timing.
  std::vector<std::function<double()>> points;
  auto collective = [&](pj::Coll c, int workers, int64_t bytes, double skew, std::optional<pj::AlphaBeta::Layout> layout, bool late = false) {
    const int calls = bytes <= kSmall ? 20 * reps : reps;
    points.push_back([=] { return time_collective(c, workers, bytes / 4, calls, skew, layout ? &*layout : nullptr, late); });
    return points.size() - 1;
  };
  using Timed = std::vector<std::pair<pj::Sample, size_t>>;  // samples (their seconds: later) and their points
  struct Planned {
    pj::Coll c;
    std::string alg;
    Timed counts, late_counts;
    struct Group {
      pj::AlphaBeta::Layout layout;
      Timed timed, late;
    };
    std::vector<Group> groups;
  };
  // Small messages in-process are timed a second way too: the last worker arriving late. Not
  // send/recv, whose pair meets as sender and receiver, not as peers.
  auto times_late = [&](pj::Coll c, int64_t bytes) {
    return !multi_process() && skew_s == 0 && c != pj::Coll::SendRecv && bytes <= kSmall;
  };
  std::vector<Planned> plan;
  for (const auto& [c, alg] : colls) {
    Planned p{c, alg, {}, {}, {}};
    for (int64_t r : ranks) {
      if (c == pj::Coll::SendRecv && r != ranks.front()) continue;
      for (int64_t bytes : sizes) {
        const int workers = static_cast<int>(c == pj::Coll::SendRecv && !multi_process() ? 2 : r);
        const pj::Sample s{static_cast<int>(c == pj::Coll::SendRecv ? 2 : r), static_cast<double>(bytes), 0};
        p.counts.push_back({s, collective(c, workers, bytes, skew_s, {})});
        if (times_late(c, bytes)) p.late_counts.push_back({s, collective(c, workers, bytes, 0, {}, true)});
      }
    }
    // Bound one-thread workers outnumbering the cores, in groups meeting at once (dp x tp's
    // pairs): neither a fraction of all the workers' meeting nor a pair's alone.
    for (const pj::AlphaBeta::Layout& l : group_layouts(ranks, cores, c == pj::Coll::SendRecv, skew_s)) {
      p.groups.push_back({l, {}, {}});
      for (int64_t bytes : sizes) {
        const pj::Sample s{l.size, static_cast<double>(bytes), 0};
        p.groups.back().timed.push_back({s, collective(c, l.workers, bytes, 0, l)});
        if (times_late(c, bytes)) p.groups.back().late.push_back({s, collective(c, l.workers, bytes, 0, l, true)});
      }
    }
    plan.push_back(std::move(p));
  }
  // In-process: how far a blocking send's receiver goes on first, and how late workers start.
  std::map<int, size_t> start_lag;
  size_t sender_trail = 0;
  if (!multi_process()) {
    points.push_back([] { return time_sender_trail(200); });
    sender_trail = points.size() - 1;
    for (int w : {2, 4}) {
      points.push_back([w] { return time_start_lag(w, 50); });
      start_lag[w] = points.size() - 1;
    }
  }
  const std::vector<double> medians = pb::reports::medians_over_passes(points, pools, [&](int pass) {
    if (lead && pools > 1) fmt::print(stderr, "parbench calibrate: pass {} of {} over {} points\n", pass + 1, pools, points.size());
  });

  // The late times of one count or group as read-off points (the measured points' own alongside).
  auto late_points = [&](const Timed& late, int ranks, const std::string& what, nlohmann::json& rec) {
    std::vector<pj::Sample> samples;
    for (const auto& [s0, k] : late) {
      if (s0.ranks != ranks) continue;
      pj::Sample s = s0;
      s.seconds = medians[k];
      samples.push_back(s);
      rec.push_back({{"ranks", s.ranks}, {"bytes", s.bytes}, {"seconds", s.seconds}});
      if (lead) fmt::print(stderr, "parbench calibrate: {}, the last arriving late, {}: {:.3g} ms\n", what, size_text(s.bytes), s.seconds * 1e3);
    }
    return samples.empty() ? std::vector<std::pair<double, double>>{} : pj::monotone_points(samples);
  };
  for (Planned& p : plan) {
    std::vector<pj::Sample> samples;
    for (auto& [s, k] : p.counts) {
      s.seconds = medians[k];
      samples.push_back(s);
      record[pj::coll_name(p.c)].push_back({{"ranks", s.ranks}, {"bytes", s.bytes}, {"seconds", s.seconds}});
      if (lead) fmt::print(stderr, "parbench calibrate: {} x{} {}: {:.3g} ms\n", pj::coll_name(p.c), s.ranks, size_text(s.bytes), s.seconds * 1e3);
    }
    pj::AlphaBeta& fit = m.intra_node[pj::coll_name(p.c)][p.alg];
    fit = pj::fit_alpha_beta(p.c, p.alg, samples);
    for (int64_t r : ranks) {  // and each worker count alone, where several were timed
      std::vector<pj::Sample> one_count;
      for (const pj::Sample& s : samples)
        if (s.ranks == r) one_count.push_back(s);
      if (one_count.size() >= 2) {
        const pj::AlphaBeta one = pj::fit_alpha_beta(p.c, p.alg, one_count);
        fit.at_ranks[static_cast<int>(r)] = {one.alpha_s, one.bus_bytes_per_s, pj::monotone_points(one_count),
                                             late_points(p.late_counts, static_cast<int>(r), fmt::format("{} x{}", pj::coll_name(p.c), r),
                                                         record["late"][pj::coll_name(p.c)])};
      }
    }
    for (auto& [l, in, late] : p.groups) {
      std::vector<pj::Sample> group;
      for (auto& [s, k] : in) {
        s.seconds = medians[k];
        group.push_back(s);
        record["groups"][pj::coll_name(p.c)][pj::layout_key(l)].push_back({{"bytes", s.bytes}, {"seconds", s.seconds}});
        if (lead) fmt::print(stderr, "parbench calibrate: {} in groups of {} {}: {:.3g} ms\n", pj::coll_name(p.c), pj::layout_key(l), size_text(s.bytes), s.seconds * 1e3);
      }
      const pj::AlphaBeta one = pj::fit_alpha_beta(p.c, p.alg, group);
      fit.in_groups[l] = {one.alpha_s, one.bus_bytes_per_s, pj::monotone_points(group),
                          late_points(late, l.size, fmt::format("{} in groups of {}", pj::coll_name(p.c), pj::layout_key(l)),
                                      record["late"]["groups"][pj::coll_name(p.c)][pj::layout_key(l)])};
    }
  }
  m.peak_flops = conv_flops(cores);
  m.parallel_threads = parallel_threads(cores);
  // Step overhead: regular's measured (a single rank's dispatch under MPI, where regular does not
  // run); each further worker's, ddp's measured beyond its prediction (in-process).
  if (multi_process()) {
    m.step_overhead_s = time_dispatch(1, 50);
  } else {
    for (const auto& [w, k] : start_lag) m.worker_start_at_s[w] = medians[k];
    m.sender_trails_s = medians[sender_trail];
    const Overheads o = time_overheads(cores, 5, m, &record);
    m.step_overhead_s = o.step_s;
    m.unit_overhead_s = o.unit_s;
    m.worker_overhead_at_s = o.workers_s;
    m.worker_overhead_s = (o.workers_s.at(2) + o.workers_s.at(4) / 3) / 2;
  }
  if (!multi_process()) {
    record["skew_s"] = skew_s;
    record["skew_note"] = "rank i arrived skew_s x i late at every timed call; times run from the last arrival to the last rank done";
  }
  record["parallel_threads_note"] = "one-thread convolutions that run at full speed together: k threads' total rate over one thread's, the best k";
  record["peak_flops_note"] = "the engine's best effective rate on all cores: 3x3 conv 64->64, 32x32, batch 8; not a datasheet peak";
  const Disturbance disturbed = disturbance_since(cpu_before);
  if (disturbed.steal) record["steal_fraction"] = *disturbed.steal;
  if (disturbed.others) record["others_fraction"] = *disturbed.others;
  m.calibration = record;
  if (!lead) return 0;
  warn_if_disturbed(disturbed, "parbench calibrate", "while it calibrated", "its timings are not this machine's own",
                    "calibrate again");
  const std::string text = pj::machine_json(m).dump(2) + "\n";
  pj::parse_machine(text, f.str("out"));  // what we write must read back
  make_dirs(std::filesystem::path(f.str("out")).parent_path().string());
  write_file_atomic(f.str("out"), text);
  fmt::print("parbench calibrate: wrote {} ({}; {:.2f} of {} cores free; conv {:.3g} GFLOP/s; all_reduce alpha {:.3g} us, bus {:.3g} GB/s)\n",
             f.str("out"), m.name, m.parallel_threads, cores, m.peak_flops / 1e9, m.intra_node["all_reduce"]["ring"].alpha_s * 1e6,
             m.intra_node["all_reduce"]["ring"].bus_bytes_per_s / 1e9);
  return 0;
}

}  // namespace pb
