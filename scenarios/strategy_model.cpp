// The strategy model (scenarios/strategy_model.h): the registry's configurations of each
// strategy (strategies/sweep.h), what they need timed, and their plans priced.
#include "scenarios/strategy_model.h"

#include <algorithm>

#include <fmt/ranges.h>

#include "engine/check.h"
#include "projection/plan_price.h"
#include "projection/step_builder.h"
#include "strategies/plan_gen.h"
#include "strategies/registry.h"
#include "strategies/sweep.h"

namespace pb::projection {

namespace {
// A setting's strategy and options into a configuration.
void apply(Config& c, const Setting& s) {
  c.strategy = s.strategy;
  c.micro_batches = s.micro_batches;
  c.schedule = schedule_name(s.schedule);
  c.recompute = s.recompute;
  c.bucket_bytes = s.bucket_bytes;
}
}  // namespace

const std::vector<std::string>& modelled_strategies() {
  static const std::vector<std::string> v = swept_strategies();
  return v;
}

bool is_modelled(const std::string& s) { return is_swept(s); }

std::vector<Config> configurations(const std::string& s, int n, int64_t global, const Sweep& sweep) {
  SweepAxes axes{sweep.micro_batches, {}, sweep.bucket_bytes, sweep.recompute};
  for (const std::string& name : sweep.schedules) {
    Schedule sc = Schedule::GPipe;
    parse_schedule(name, &sc);
    axes.schedules.push_back(sc);
  }
  std::vector<Config> out;
  for (const Setting& set : sweep_settings(s, n, global, axes)) {
    Config c;
    apply(c, set);
    c.devices = n;
    c.global_batch = global;
    out.push_back(c);
  }
  return out;
}

std::string no_configuration(const std::string& s, const std::vector<int64_t>& devices, const std::vector<int64_t>& micro) {
  return no_setting(s, devices, micro);
}

std::vector<int64_t> batch_pieces(const NetPlan& net, const Config& c) {
  std::vector<int64_t> v = {c.global_batch};
  try {  // every batch a compute action of its plan runs at
    Config flops = c;
    flops.balance_by = "flops";  // the split does not change the pieces
    const Plan plan = c.plan ? *c.plan : make_plan(run_name(flops), net, options_of(flops, nullptr), c.global_batch);
    for (const auto& list : plan.actions)
      for (const Action& a : list)
        if (a.samples > 0) v.push_back(a.samples);
  } catch (const UsageError&) {  // a configuration the run refuses: its prediction says why
  }
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

Timing timing_of(const NetPlan& net, const Config& c) {
  // Read off the plan: workers of one replica holding different layers are stages, each run as
  // its own Sequential; a worker computing the net layer by layer (fsdp's and zero2's units, tp's
  // slices) runs each layer apart, where activations leave the library's blocked layout between
  // layers, which the profile's one Sequential avoids; tp's slices (a part of a layer's work) are
  // timed as the worker's slice with its ReLUs and layout copies, over the workers a layer's
  // output is gathered from.
  Timing t;
  Plan plan;
  try {
    Config flops = c;
    flops.balance_by = "flops";  // the split does not change how it is timed
    plan = c.plan ? *c.plan : make_plan(run_name(flops), net, options_of(flops, nullptr), c.global_batch);
  } catch (const UsageError&) {  // a configuration the run refuses: its prediction says why
    return t;
  }
  const int layers = static_cast<int>(net.layers.size());
  int first_replica = 0;
  for (int w = 0; w < plan.workers; ++w) first_replica += plan.replica[w] == 0;
  if (first_replica > 1) {
    t.kind = Timing::Stages;
    t.stages = first_replica;
    return t;
  }
  for (const Action& a : plan.actions.at(0)) {
    if (a.kind == ActionKind::Forward && (a.layer_begin > 0 || a.layer_end < layers)) t.kind = Timing::Layers;
    if (a.kind == ActionKind::Forward && a.part < 1) t.tp = true;
    if (a.kind == ActionKind::Collective && a.coll == CollKind::AllGather && a.layer_begin >= 0 && t.slices == 1)
      t.slices = static_cast<int>(plan.groups.at(a.group).members.size());
  }
  if (t.tp) t.kind = Timing::Layers;  // a slice of even a one-layer net
  else t.slices = 1;
  return t;
}

std::vector<std::pair<int, int>> stage_ranges(const NetPlan& net, const Config& c, const Profile* p) {
  const Plan plan = c.plan ? *c.plan : make_plan(run_name(c), net, options_of(c, p), c.global_batch);
  std::vector<std::pair<int, int>> out;
  for (int w = 0; w < plan.workers; ++w) {
    if (plan.replica[w] != 0) continue;
    int b = -1, e = -1;
    for (const Action& a : plan.actions[w])
      if (a.kind == ActionKind::Forward) b = b < 0 ? a.layer_begin : std::min(b, a.layer_begin), e = std::max(e, a.layer_end);
    out.push_back({b, e});
  }
  return out;
}

StepProgram step_program(const Profile& p, const Machine& m, const Config& named, const Options& o, int threads) {
  StepProgram out;
  Config& c = out.priced;
  c = named;  // a registered variant: its base strategy with the variant's options
  auto refuse = [&](std::string why) {
    out.refused = std::move(why);
    return out;
  };
  if (!c.plan) {
    if (!is_modelled(c.strategy) || is_family(c.strategy))
      return refuse(fmt::format("no projection model for strategy {}", c.strategy));
    apply(c, as_swept(setting_of(c)));
  }
  const int N = c.devices;
  if (N < 1 || c.global_batch < 1) return refuse("needs at least one device and one sample");
  if (N > m.total_devices()) return refuse(fmt::format("{} has {} device(s)", m.name, m.total_devices()));
  // The plan the run would run (or the one given), refused where the run refuses it.
  Plan plan;
  try {
    plan = plan_for(p, c);
  } catch (const UsageError& e) {
    return refuse(e.what());
  }
  if (plan.workers != N) return refuse(fmt::format("the plan has {} workers, not {}", plan.workers, N));
  if (c.plan && !plan.layer_params.empty()) {  // a plan file: of the profile's net
    if (plan.layer_params.size() != p.layers.size())
      return refuse(fmt::format("the plan's net has {} layers, the profile's {}", plan.layer_params.size(), p.layers.size()));
    for (std::size_t i = 0; i < p.layers.size(); ++i)
      if (plan.layer_params[i] != p.layers[i].params)
        return refuse(fmt::format("the plan's layer {} has {} parameters, the profile's {}", i, plan.layer_params[i], p.layers[i].params));
  }
  out.name = c.plan ? plan.strategy : run_name(c);
  // A strategy that cannot run as a process per worker (dp: one process scatters and gathers)
  // stays within a node, as the registry says.
  if (!strategy_info(out.name).multi_process && N > m.devices_per_node)
    return refuse(fmt::format("{} runs in one process: one node's devices at most", out.name));
  out.micro_batches = plan.micro_batches;
  StepBuilder bl(p, m, N, o, threads);
  PricedPlan priced = price_plan(plan, p, m, bl);
  out.actors = std::move(priced.actors);
  out.workers = N;
  // Calibrated per strategy, or for its class as the registry gives it (fsdp, zero2).
  const std::string unit_key = m.unit_overhead_s.count(out.name) ? out.name : unit_class_of(out.name);
  if (const auto it = m.unit_overhead_s.find(unit_key); it != m.unit_overhead_s.end())
    out.bookkeeping_s = priced.freed_units * it->second;
  out.comm_bytes = priced.comm_bytes;
  out.plan = std::move(plan);
  return out;
}

}  // namespace pb::projection
