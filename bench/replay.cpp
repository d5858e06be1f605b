// parbench replay: K training steps from given parameters and data; writes every step's loss
// and the final parameters, for checking the engine against another framework.
#include <cmath>
#include <optional>

#include <nlohmann/json.hpp>

#include "bench/cli.h"
#include "bench/shapes.h"
#include "engine/check.h"
#include "engine/memory_estimate.h"
#include "engine/fsutil.h"
#include "engine/process.h"
#include "engine/npy.h"
#include "engine/state_dict.h"

namespace pb {

int cmd_replay(const std::vector<std::string>& args) {
  std::vector<Flag> flags = training_flags();
  std::vector<Flag> own = {
      {"params", "DIR", "initial parameters, <layer>.weight.npy / <layer>.bias.npy, <layer> its name or index "
                        "(default: seeded PyTorch-style init)", ""},
      {"input", "FILE", "input batch .npy [B, ...] (default: --batch seeded random samples)", ""},
      {"target", "FILE", "target .npy [B, ...output] for target \"random\" nets (default: seeded random)", ""},
      {"batch", "B", "batch size when no --input is given", "2"},
      {"steps", "K", "training steps", "5"},
      {"lr", "LR", "Adam learning rate (default: the workload's)", ""},
      {"seed", "S", "seed for default parameters and data", "0"},
      {"out", "DIR", "output folder: losses.json and params/<layer>.{weight,bias}.npy (required)", ""},
      {"show-shapes", "", "per step and worker: the shapes of its piece of the batch", ""},
  };
  flags.insert(flags.begin() + 1, own.begin(), own.end());
  Flags f("parbench replay",
          "Runs K training steps of a workload from parameters and an input batch given as .npy\n"
          "files and writes the loss of every step (OUT/losses.json) and the final parameters\n"
          "(OUT/params/*.npy, named by the PyTorch state_dict keys: a layer's \"name\", or its index in\n"
          "the equivalent nn.Sequential).",
          flags);
  if (!f.parse(args)) return 0;
  if (!f.positional().empty()) throw UsageError(fmt::format("unexpected argument '{}'", f.positional()[0]));
  if (!f.has("out")) throw UsageError("parbench replay needs --out DIR (see parbench replay --help)");

  // An unwritable --out fails now, not after the steps; outputs appear only when all are written.
  const bool lead = process().rank == 0;
  std::optional<StagingDir> staging;
  if (lead) staging.emplace(f.str("out"));

  NetSpec net = resolve_workload(f.str("workload"), workload_options(f, device_kind(f.str("device-kind"))));
  if (f.has("lr")) net.adam.lr = f.number("lr");
  if (const std::string p = adam_lr_problem(net.adam.lr); !p.empty()) throw UsageError("--lr " + p);
  const NetPlan plan = plan_net(net);
  const int64_t steps = f.integer("steps");
  if (steps < 1) throw UsageError(fmt::format("--steps must be at least 1, got {}", steps));
  const uint64_t seed = static_cast<uint64_t>(f.integer("seed"));

  int64_t batch = 0;
  std::vector<float> x;
  if (f.has("input")) {
    NpyArray a = read_npy(f.str("input"));
    check_finite(a, f.str("input"));
    Shape want = plan.input;
    if (a.shape.size() != want.size() + 1 || !std::equal(want.begin(), want.end(), a.shape.begin() + 1))
      throw UsageError(fmt::format("{}: shape {}, expected [B, {}] for workload {}", f.str("input"),
                                   shape_str(a.shape), fmt::join(want, ", "), net.name));
    batch = a.shape[0];
    if (batch < 1) throw UsageError(fmt::format("{}: shape {}: the batch is empty, expected at least 1 sample",
                                                f.str("input"), shape_str(a.shape)));
    x = std::move(a.data);
  } else {
    batch = f.integer("batch");
    if (batch < 1) throw UsageError(fmt::format("--batch must be at least 1, got {}", batch));
  }
  // Under MPI every rank computes (loss() and params() are collective); rank 0 alone prints and
  // writes. --devices defaults to the number of processes there.
  StrategyOptions so = strategy_options(f, worker_count(f), batch);
  check_memory_fits(plan, batch, so.kind, so.devices, so.backend.memory_limit_bytes, workload_sizing(f, net));
  std::vector<float> params = f.has("params") ? read_state_dict(plan, f.str("params")) : init_params(plan, seed);
  if (!f.has("input")) x = synthetic_values(batch * numel_of(plan.input), seed + 1);
  std::vector<float> t;
  if (net.target == Target::Input) {
    if (f.has("target")) throw UsageError(fmt::format("--target given, but workload {} reconstructs its input", net.name));
    t = x;
  } else if (f.has("target")) {
    Shape want = plan.output;
    want.insert(want.begin(), batch);
    NpyArray a = read_npy(f.str("target"), want);
    check_finite(a, f.str("target"));
    t = std::move(a.data);
  } else {
    t = synthetic_values(batch * numel_of(plan.output), seed + 2);
  }

  auto strategy = make_strategy(strategy_name(f, f.str("strategy"), true), so);
  strategy->setup(plan, params, net.adam);
  strategy->load_batch(x, t, batch);
  std::vector<double> losses;
  const bool shapes = f.on("show-shapes");
  if (shapes && lead) fmt::print("{}", shapes_heading(strategy->name(), so.devices, so.kind));
  for (int64_t k = 0; k < steps; ++k) {
    strategy->step();
    if (shapes) {
      const StepStats st = strategy->stats();  // collective in an MPI job: every rank calls it
      if (lead) fmt::print("{}", shapes_of_step(plan, st, batch));
    }
    losses.push_back(strategy->loss());
    if (!std::isfinite(losses.back()))
      throw Error(fmt::format("training diverged: the loss is {} after step {} (learning rate {:g}); nothing written",
                              losses.back(), k + 1, net.adam.lr));
    if (lead) fmt::print(stderr, "step {}/{}: loss {:.9g}\n", k + 1, steps, losses.back());
  }

  const std::vector<float> final_params = strategy->params();
  const StepStats st = strategy->stats();
  if (!lead) return 0;
  const std::string out = f.str("out");
  write_state_dict(plan, final_params, staging->path() + "/params");
  nlohmann::json j = {{"workload", net.name},   {"strategy", strategy->name()}, {"devices", so.devices},
                      {"batch", batch},         {"steps", steps},               {"lr", net.adam.lr},
                      {"weight_decay", net.adam.weight_decay}, {"losses", losses}};
  if (multi_process()) j["world_size"] = process().size;
  nlohmann::json chunks = nlohmann::json::array();
  for (const WorkerStats& w : st.workers) chunks.push_back(w.samples);
  j["worker_samples"] = chunks;
  write_file_atomic(staging->path() + "/losses.json", j.dump(2) + "\n");
  staging->commit({"losses.json", "params"});
  fmt::print("wrote {}/losses.json and {}/params/ ({} steps, final loss {:.9g})\n", out, out, steps, losses.back());
  return 0;
}

}  // namespace pb
