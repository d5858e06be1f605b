// parbench train: a plain training run that prints each iteration's time and loss.
#include <chrono>
#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/ranges.h>

#include "bench/cli.h"
#include "bench/shapes.h"
#include "engine/check.h"
#include "engine/memory_estimate.h"
#include "engine/process.h"
#include "reports/schema.h"
#include "reports/table.h"
#include "reports/units.h"

namespace pb {

int cmd_train(const std::vector<std::string>& args) {
  std::vector<Flag> flags = training_flags();
  flags.push_back({"batch", "B", "global batch size", "2"});
  flags.push_back({"iterations", "N", "timed training iterations (with --data-size: passes over the data)", "10"});
  flags.push_back({"data-size", "N", "samples in the data, walked in batches of --batch, the last one short (as a DataLoader); default: one batch", ""});
  flags.push_back({"warmup", "N", "untimed iterations first", "2"});
  flags.push_back({"seed", "S", "seed for parameters and data", "0"});
  flags.push_back({"show-shapes", "", "per timed step and worker: the shapes of its piece of the batch", ""});
  Flags f("parbench train",
          "Trains a workload on synthetic data and prints every iteration's time and loss.", flags);
  if (!f.parse(args)) return 0;
  if (!f.positional().empty()) throw UsageError(fmt::format("unexpected argument '{}'", f.positional()[0]));
  const NetSpec net = resolve_workload(f.str("workload"), workload_options(f, device_kind(f.str("device-kind"))));
  const NetPlan plan = plan_net(net);
  const int64_t batch = f.integer("batch"), iters = f.integer("iterations"), warmup = f.integer("warmup");
  if (batch < 1) throw UsageError(fmt::format("--batch must be at least 1, got {}", batch));
  if (iters < 1) throw UsageError(fmt::format("--iterations must be at least 1, got {}", iters));
  if (warmup < 0) throw UsageError(fmt::format("--warmup must be >= 0, got {}", warmup));
  const uint64_t seed = static_cast<uint64_t>(f.integer("seed"));
  const int64_t data = f.has("data-size") ? f.integer("data-size") : batch;
  if (data < 1) throw UsageError(fmt::format("--data-size must be at least 1, got {}", data));
  // The batches one pass over the data takes: --batch samples each, the last one what is left.
  std::vector<int64_t> batches;
  for (int64_t at = 0; at < data; at += batch) batches.push_back(std::min(batch, data - at));
  // Under MPI: --devices defaults to the number of processes; rank 0 prints (loss() is collective).
  const bool lead = process().rank == 0;
  const StrategyOptions so = strategy_options(f, worker_count(f), batch);
  check_memory_fits(plan, batch, so.kind, so.devices, so.backend.memory_limit_bytes, workload_sizing(f, net));
  auto strategy = make_strategy(strategy_name(f, f.str("strategy"), true), so);

  const int64_t in = numel_of(plan.input), out = numel_of(plan.output);
  std::vector<float> x = synthetic_values(data * in, seed + 1);
  std::vector<float> t = net.target == Target::Input ? x : synthetic_values(data * out, seed + 2);
  strategy->setup(plan, init_params(plan, seed), net.adam);
  // Untimed: the k-th batch of the pass (the whole data when it is one batch).
  auto load = [&](std::size_t k) {
    if (data == batch) return strategy->load_batch(x, t, batch);
    const int64_t at = static_cast<int64_t>(k) * batch, n = batches[k];
    strategy->load_batch(std::vector<float>(x.begin() + at * in, x.begin() + (at + n) * in),
                         std::vector<float>(t.begin() + at * out, t.begin() + (at + n) * out), n);
  };
  load(0);
  if (lead)
    fmt::print("{}: input {} x {}, {} parameters, {:.3g} GFLOP per training iteration; strategy {} on {} {} device(s)\n",
             net.name, batch, shape_str(plan.input), plan.param_count, 3 * plan.forward_flops * batch / 1e9,
             strategy->name(), so.devices, so.kind == DeviceKind::Cpu ? "cpu" : "cuda");
  for (int64_t i = 0; i < warmup; ++i) strategy->step();
  const bool shapes = f.on("show-shapes");
  if (shapes && lead) fmt::print("{}", shapes_heading(strategy->name(), so.devices, so.kind));
  std::vector<double> ms;
  int64_t samples = 0;
  for (int64_t i = 0; i < iters * static_cast<int64_t>(batches.size()); ++i) {
    const std::size_t k = static_cast<std::size_t>(i) % batches.size();
    if (batches.size() > 1) load(k);
    samples += batches[k];
    const auto t0 = std::chrono::steady_clock::now();
    strategy->step();
    // An iteration lasts until the slowest rank is done.
    ms.push_back(world_max(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count()));
    const double loss = strategy->loss();
    if (!std::isfinite(loss))
      throw Error(fmt::format("training diverged: the loss is {} after iteration {} (learning rate {:g})", loss,
                              i + 1, net.adam.lr));
    if (shapes) {
      const StepStats st = strategy->stats();  // collective in an MPI job: every rank calls it
      if (lead) fmt::print("{}", shapes_of_step(plan, st, batches[k]));
    }
    if (lead) fmt::print("iteration {:4d}: {:>9}  loss {:.6g}\n", i + 1, reports::format_time(ms.back() / 1e3), loss);
  }
  const StepStats st = strategy->stats();  // collective in an MPI job
  if (!lead) return 0;
  std::vector<std::string> peaks;
  for (const WorkerStats& w : st.workers) peaks.push_back(reports::num(w.peak_bytes / reports::schema::kMiB));
  fmt::print("{}: {}\n", reports::schema::figure::allocated_worker_max.heading, fmt::join(peaks, " "));
  std::sort(ms.begin(), ms.end());
  const double median = ms.size() % 2 ? ms[ms.size() / 2] : (ms[ms.size() / 2 - 1] + ms[ms.size() / 2]) / 2;
  // A pass of unequal batches: samples/s over all of them, not the median step's.
  const double per_s = batches.size() == 1 ? batches[0] / (median / 1e3)
                                           : samples / (std::accumulate(ms.begin(), ms.end(), 0.0) / 1e3);
  fmt::print("median {}/iteration, {:.1f} samples/s, {:.3g} GFLOP/s\n", reports::format_time(median / 1e3), per_s,
             3 * plan.forward_flops * per_s / 1e9);
  return 0;
}

}  // namespace pb
