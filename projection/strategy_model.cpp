// The strategy model (projection/strategy_model.h): names, configurations, timing needs, and the
// dispatch of a configuration to its family's step program (projection/program_*.cpp).
#include "projection/strategy_model.h"

#include <algorithm>

#include <fmt/ranges.h>

#include "engine/check.h"
#include "projection/plan_price.h"
#include "projection/step_builder.h"
#include "strategies/batch.h"
#include "strategies/plan_gen.h"
#include "strategies/registry.h"
#include "strategies/stages.h"
#include "strategies/strategy.h"

namespace pb::projection {

std::optional<std::pair<int, int>> hybrid_shape(const std::string& s) {
  int d = 0, pp = 0;
  Schedule schedule = Schedule::GPipe;
  bool recompute = false;
  if (!parse_hybrid_name(s, &d, &pp, &schedule, &recompute)) return std::nullopt;
  return std::make_pair(d, pp);
}

std::optional<std::pair<int, int>> dptp_shape(const std::string& s) {
  int d = 0, t = 0;
  if (!parse_dptp_name(s, &d, &t)) return std::nullopt;
  return std::make_pair(d, t);
}

std::string Config::label() const {
  if (plan) return fmt::format("{} (plan file, M={})", strategy, micro_batches);
  if (strategy == "pipeline")
    return fmt::format("pipeline (M={}{}{})", micro_batches, schedule == "1f1b" ? ", 1f1b" : "", recompute ? ", recompute" : "");
  if (hybrid_shape(strategy) || strategy == "pipeline-zb") return fmt::format("{} (M={})", strategy, micro_batches);
  if (strategy == "ddp") return fmt::format("ddp ({:g} MiB buckets)", bucket_bytes / (1 << 20));
  return strategy;
}

std::vector<std::string> Config::options() const {
  std::vector<std::string> o;
  if (strategy == "pipeline" || strategy == "pipeline-zb" || hybrid_shape(strategy)) {
    o.push_back(fmt::format("micro_batches:{}", micro_batches));
    if (schedule != "gpipe") o.push_back("schedule:" + schedule);
    if (recompute) o.push_back("recompute:1");
  }
  if (strategy == "ddp") o.push_back(fmt::format("bucket_mb:{:g}", bucket_bytes / (1 << 20)));
  return o;
}

const std::vector<std::string>& modelled_strategies() {
  static const std::vector<std::string> v = {"regular", "dp",    "ddp",           "mp",           "pipeline",
                                             "pipeline-zb", "fsdp",    "zero2", "fsdp-prefetch", "zero2-prefetch", "tp",
                                             kHybridFamily, kDpTpFamily, kHsdpFamily};
  return v;
}

namespace {
// A registered pipeline variant by run's name for it (pipeline-1f1b, ...): its schedule, as
// Config spells it, and whether it recomputes.
bool pipeline_variant(const std::string& s, std::string* schedule, bool* recompute) {
  Schedule sc = Schedule::GPipe;
  if (!parse_pipeline_name(s, &sc, recompute)) return false;
  *schedule = sc == Schedule::OneFOneB ? "1f1b" : "gpipe";
  return true;
}
}  // namespace

bool is_modelled(const std::string& s) {
  const auto& v = modelled_strategies();
  std::string schedule;
  bool recompute = false;
  int r = 0, sh = 0;
  return std::find(v.begin(), v.end(), s) != v.end() || hybrid_shape(s) || dptp_shape(s) || parse_hsdp_name(s, &r, &sh) ||
         pipeline_variant(s, &schedule, &recompute);
}

void set_balance(Config& c, const std::string& b, const std::string& what) {
  c.balance.clear();
  c.balance_by = "flops";
  if (b.empty()) return;
  if (b == "time" || b == "seed") {
    c.balance_by = b;
    return;
  }
  std::size_t at = 0;
  while (at <= b.size()) {
    const std::size_t comma = std::min(b.find(',', at), b.size());
    const std::string item = b.substr(at, comma - at);
    if (item.empty() || item.find_first_not_of("0123456789") != std::string::npos || item.size() > 6)
      throw UsageError(fmt::format("{}: expected layers per stage (e.g. 14,14), time or seed, got '{}'", what, b));
    c.balance.push_back(std::stoi(item));
    at = comma + 1;
  }
}

std::vector<Config> configurations(const std::string& s, int n, int64_t global, const Sweep& sweep) {
  std::vector<Config> out;
  auto base = [&](const std::string& name) {
    Config c;
    c.strategy = name;
    c.devices = n;
    c.global_batch = global;
    return c;
  };
  if (s == "regular" && n != 1) return out;
  std::string variant_schedule;
  bool variant_recompute = false;
  if (s == "pipeline-zb") {  // its own schedule: the sweep's micro-batch counts
    for (int64_t m : sweep.micro_batches)
      if (m <= global) out.push_back(base(s)), out.back().micro_batches = static_cast<int>(m);
  } else if (s != "pipeline" && pipeline_variant(s, &variant_schedule, &variant_recompute)) {
    // A variant by name: its schedule and recompute, the sweep's micro-batch counts.
    for (int64_t m : sweep.micro_batches) {
      if (m > global) continue;  // more micro-batches than samples
      Config c = base("pipeline");
      c.micro_batches = static_cast<int>(m);
      c.schedule = variant_schedule;
      c.recompute = variant_recompute;
      out.push_back(c);
    }
  } else if (s == "ddp") {
    for (double b : sweep.bucket_bytes) {
      Config c = base(s);
      c.bucket_bytes = b;
      out.push_back(c);
    }
  } else if (s == "pipeline") {
    for (int64_t m : sweep.micro_batches)
      for (const std::string& sch : sweep.schedules) {
        if (m > global) continue;  // more micro-batches than samples
        Config c = base(s);
        c.micro_batches = static_cast<int>(m);
        c.schedule = sch;
        out.push_back(c);
        if (sweep.recompute) {
          c.recompute = true;
          out.push_back(c);
        }
      }
  } else if (s == kHybridFamily || hybrid_shape(s)) {
    // The family: every schedule swept (and recompute); a member by its name: that variant alone.
    // Micro-batches per replica.
    for (const auto& [d, pp] : hybrid_factorizations(n)) {
      std::vector<std::string> names;
      if (s == kHybridFamily) {
        for (const std::string& sch : sweep.schedules)
          for (bool rc : {false, true})
            if (!rc || sweep.recompute) names.push_back(hybrid_name(d, pp, sch == "1f1b" ? Schedule::OneFOneB : Schedule::GPipe, rc));
      } else if (hybrid_shape(s) == std::make_pair(d, pp)) {
        names.push_back(s);
      }
      for (const std::string& name : names)
        for (int64_t m : sweep.micro_batches) {
          if (m > global / d) continue;  // more micro-batches than a replica has samples
          Config c = base(name);
          c.micro_batches = static_cast<int>(m);
          out.push_back(c);
        }
    }
  } else if (s == kDpTpFamily || dptp_shape(s)) {
    for (const auto& [d, t] : hybrid_factorizations(n))
      if (s == kDpTpFamily || s == dptp_name(d, t)) out.push_back(base(dptp_name(d, t)));
  } else if (int r = 0, sh = 0; s == kHsdpFamily || parse_hsdp_name(s, &r, &sh)) {
    for (const auto& [d, t] : hybrid_factorizations(n))
      if (s == kHsdpFamily || s == hsdp_name(d, t)) out.push_back(base(hsdp_name(d, t)));
  } else {
    out.push_back(base(s));
  }
  return out;
}

std::string no_configuration(const std::string& s, const std::vector<int64_t>& devices, const std::string& micro) {
  const auto h = hybrid_shape(s);
  const auto t = h ? h : dptp_shape(s);
  const bool has = t && std::find(devices.begin(), devices.end(), t->first * t->second) != devices.end();
  std::string why;
  if (t && !has) why = fmt::format("{} runs on {} x {} = {} devices", s, t->first, t->second, t->first * t->second);
  else if (h || s.rfind("pipeline", 0) == 0) why = fmt::format("every --micro-batches count ({}) is above the samples of a replica", micro);
  else if (s == kHybridFamily || s == kDpTpFamily || s == kHsdpFamily) why = fmt::format("{} needs a device count D x P with both at least 2 (4, 6, 8, ...)", s);
  else if (s == "regular") why = "regular runs on one device";
  else why = "no configuration of it is possible there";
  return fmt::format("--strategies {}: nothing to project at --devices {}: {}", s, fmt::join(devices, ","), why);
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
  c = named;  // the registered pipeline variants: pipeline with their schedule and recompute
  auto refuse = [&](std::string why) {
    out.refused = std::move(why);
    return out;
  };
  if (!c.plan) {
    if (!is_modelled(c.strategy) || c.strategy == kHybridFamily || c.strategy == kDpTpFamily || c.strategy == kHsdpFamily)
      return refuse(fmt::format("no projection model for strategy {}", c.strategy));
    if (c.strategy != "pipeline" && pipeline_variant(c.strategy, &c.schedule, &c.recompute)) c.strategy = "pipeline";
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
  StepBuilder bl(p, m, c, o, threads);
  PricedPlan priced = price_plan(plan, p, m, bl);
  out.actors = std::move(priced.actors);
  out.workers = N;
  out.stages = std::move(priced.stages);
  // Calibrated per strategy; the -prefetch variants and hsdp free their units as fsdp and zero2 do.
  std::string unit_key = out.name;
  if (const auto at = unit_key.rfind("-prefetch"); at != std::string::npos && !m.unit_overhead_s.count(unit_key))
    unit_key.erase(at);
  if (unit_key.rfind(kHsdpFamily, 0) == 0 && !m.unit_overhead_s.count(unit_key)) unit_key = "fsdp";
  if (const auto it = m.unit_overhead_s.find(unit_key); it != m.unit_overhead_s.end())
    out.bookkeeping_s = priced.freed_units * it->second;
  out.comm_bytes = priced.comm_bytes;
  return out;
}

}  // namespace pb::projection
