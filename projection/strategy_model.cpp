// The strategy model (projection/strategy_model.h): names, configurations, timing needs, and the
// dispatch of a configuration to its family's step program (projection/program_*.cpp).
#include "projection/strategy_model.h"

#include <algorithm>

#include <fmt/ranges.h>

#include "engine/check.h"
#include "projection/programs.h"
#include "projection/step_builder.h"
#include "strategies/batch.h"
#include "strategies/registry.h"
#include "strategies/stages.h"
#include "strategies/strategy.h"

namespace pb::projection {

std::optional<std::pair<int, int>> hybrid_shape(const std::string& s) {
  int d = 0, pp = 0;
  Schedule schedule = Schedule::GPipe;
  bool recompute = false;
  if (!parse_hybrid_name(s, &d, &pp, &schedule, &recompute) || schedule != Schedule::GPipe || recompute)
    return std::nullopt;
  return std::make_pair(d, pp);
}

std::optional<std::pair<int, int>> dptp_shape(const std::string& s) {
  int d = 0, t = 0;
  if (!parse_dptp_name(s, &d, &t)) return std::nullopt;
  return std::make_pair(d, t);
}

std::string Config::label() const {
  if (strategy == "pipeline")
    return fmt::format("pipeline (M={}{}{})", micro_batches, schedule == "1f1b" ? ", 1f1b" : "", recompute ? ", recompute" : "");
  if (hybrid_shape(strategy)) return fmt::format("{} (M={})", strategy, micro_batches);
  if (strategy == "ddp") return fmt::format("ddp ({:g} MiB buckets)", bucket_bytes / (1 << 20));
  return strategy;
}

std::vector<std::string> Config::options() const {
  std::vector<std::string> o;
  if (strategy == "pipeline" || hybrid_shape(strategy)) {
    o.push_back(fmt::format("micro_batches:{}", micro_batches));
    if (schedule != "gpipe") o.push_back("schedule:" + schedule);
    if (recompute) o.push_back("recompute:1");
  }
  if (strategy == "ddp") o.push_back(fmt::format("bucket_mb:{:g}", bucket_bytes / (1 << 20)));
  return o;
}

const std::vector<std::string>& modelled_strategies() {
  static const std::vector<std::string> v = {"regular", "dp",   "ddp", "mp",          "pipeline",
                                             "fsdp",    "zero2", "tp", kHybridFamily, kDpTpFamily};
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
  return std::find(v.begin(), v.end(), s) != v.end() || hybrid_shape(s) || dptp_shape(s) || pipeline_variant(s, &schedule, &recompute);
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
  if (s != "pipeline" && pipeline_variant(s, &variant_schedule, &variant_recompute)) {
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
    // GPipe only; micro-batches per replica.
    for (const auto& [d, pp] : hybrid_factorizations(n)) {
      const std::string name = hybrid_name(d, pp, Schedule::GPipe, false);
      if (s != kHybridFamily && s != name) continue;
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
  else if (s == kHybridFamily || s == kDpTpFamily) why = fmt::format("{} needs a device count D x P with both at least 2 (4, 6, 8, ...)", s);
  else if (s == "regular") why = "regular runs on one device";
  else why = "no configuration of it is possible there";
  return fmt::format("--strategies {}: nothing to project at --devices {}: {}", s, fmt::join(devices, ","), why);
}

std::vector<int64_t> batch_pieces(const Config& c) {
  std::vector<int64_t> v;
  for (int64_t x : chunk_sizes(c.global_batch, c.devices)) v.push_back(x);
  for (int64_t x : chunk_sizes(c.global_batch, c.micro_batches)) v.push_back(x);
  if (const auto h = hybrid_shape(c.strategy))  // each replica's chunk in micro-batches
    for (int64_t r : chunk_sizes(c.global_batch, h->first))
      for (int64_t x : chunk_sizes(r, c.micro_batches)) v.push_back(x);
  if (const auto h = dptp_shape(c.strategy))  // each replica's chunk, whole
    for (int64_t r : chunk_sizes(c.global_batch, h->first)) v.push_back(r);
  v.push_back(c.global_batch);
  return v;
}

Timing timing_of(const Config& c) {
  // tp (and dp x tp) runs every layer as its own slice; fsdp and zero2 every layer with its ReLU
  // as its own Sequential: activations leave the library's blocked layout between layers, which
  // the profile's one Sequential avoids. mp, pipeline and dp x pp run each stage as its own
  // Sequential.
  Timing t;
  const auto dptp = dptp_shape(c.strategy);
  const auto dppp = hybrid_shape(c.strategy);
  if (c.strategy == "tp" || dptp || c.strategy == "fsdp" || c.strategy == "zero2") {
    t.kind = Timing::Layers;
    t.slices = c.strategy == "tp" ? c.devices : dptp ? dptp->second : 1;
    t.tp = c.strategy == "tp" || dptp;
  } else if (c.strategy == "mp" || c.strategy.rfind("pipeline", 0) == 0 || dppp) {
    t.kind = Timing::Stages;
    t.stages = dppp ? dppp->second : c.devices;
  }
  return t;
}

std::vector<std::pair<int, int>> stage_ranges(const NetPlan& plan, const Config& c) {
  return split_stages(plan, timing_of(c).stages, {}, c.strategy);
}

StepProgram step_program(const Profile& p, const Machine& m, const Config& named, const Options& o, int threads) {
  StepProgram out;
  Config& c = out.priced;
  c = named;  // the registered pipeline variants: pipeline with their schedule and recompute
  if (!is_modelled(c.strategy) || c.strategy == kHybridFamily || c.strategy == kDpTpFamily) {
    out.refused = fmt::format("no projection model for strategy {}", c.strategy);
    return out;
  }
  if (c.strategy != "pipeline" && pipeline_variant(c.strategy, &c.schedule, &c.recompute)) c.strategy = "pipeline";
  const int N = c.devices;
  auto refuse = [&](std::string why) {
    out.refused = std::move(why);
    return out;
  };
  if (N < 1 || c.global_batch < 1) return refuse("needs at least one device and one sample");
  // dp<D>xpp<P>: the pipeline program, D replicas of P stages (GPipe).
  const std::optional<std::pair<int, int>> hybrid = hybrid_shape(c.strategy);
  if (hybrid && hybrid->first * hybrid->second != N)
    return refuse(fmt::format("{} needs {} devices", c.strategy, hybrid->first * hybrid->second));
  if (hybrid) c.schedule = "gpipe", c.recompute = false;
  const std::optional<std::pair<int, int>> dptp = dptp_shape(c.strategy);
  if (dptp && dptp->first * dptp->second != N)
    return refuse(fmt::format("{} needs {} devices", c.strategy, dptp->first * dptp->second));
  if (N > m.total_devices()) return refuse(fmt::format("{} has {} device(s)", m.name, m.total_devices()));
  if (c.strategy == "regular" && N != 1) return refuse("runs on one device");
  if (c.strategy == "dp" && N > m.devices_per_node) return refuse("dp runs in one process: one node's devices at most");
  StepBuilder bl(p, m, c, o, threads);
  out.workers = N;
  std::string why;
  if (c.strategy == "regular") why = regular_program(p, c, bl, out);
  else if (c.strategy == "dp") why = dp_program(p, c, bl, out);
  else if (c.strategy == "ddp") why = ddp_program(p, m, c, bl, out);
  else if (c.strategy == "mp" || c.strategy == "pipeline" || hybrid) why = pipeline_program(p, c, bl, out);
  else if (c.strategy == "fsdp" || c.strategy == "zero2") why = fsdp_program(p, m, c, bl, out);
  else if (c.strategy == "tp" || dptp) why = tp_program(p, c, bl, out);
  else why = fmt::format("no projection model for strategy {}", c.strategy);
  if (!why.empty()) return refuse(why);
  out.comm_bytes = bl.comm_bytes;
  return out;
}

}  // namespace pb::projection
