// project --validate: a measured run's configurations predicted from profiles of its workload
// (given, loaded, or timed here as each strategy runs its layers) and set against the run.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <thread>
#include <tuple>

#include <fmt/ranges.h>

#include "bench/cli.h"
#include "bench/project.h"
#include "engine/check.h"
#include "engine/fsutil.h"
#include "projection/plan_price.h"
#include "reports/gbjson.h"
#include "reports/schema.h"
#include "reports/stats.h"
#include "reports/table.h"
#include "strategies/registry.h"
#include "workloads/workload.h"

namespace pb {

namespace pj = projection;
using nlohmann::json;

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

struct Measured {
  std::string name, strategy;
  int devices = 0;
  int64_t global = 0;
  double seconds = 0;
  std::vector<double> times;  // every timed iteration (else every repetition), seconds
};

int64_t context_int(const reports::RunFile& f, const reports::schema::Key& k) {
  const std::string v = f.context_value(k.name);
  try {
    std::size_t used = 0;
    const int64_t x = std::stoll(v, &used);
    if (used == v.size()) return x;
  } catch (const std::exception&) {
  }
  throw UsageError(fmt::format("{}: context \"{}\" is \"{}\", expected an integer", f.source, k.name, v));
}


// What the run recorded of how it ran, read from its context; a malformed value is bad input
// naming the key.
struct RunSetup {
  std::string scaling, balance, precision, reduce_dtype, param_dtype;
  int fixed_micro = 0;    // --micro-batches as run; 0: its default, min(4, global batch)
  int fixed_threads = 0;  // --threads as run; 0: auto
  int world = 1, cores = 0, virtual_stages = 2;
  double bucket_mb = 25, first_bucket_mb = 1;
};

RunSetup run_setup(const reports::RunFile& run) {
  namespace ctx = reports::schema::context;
  RunSetup r;
  r.scaling = run.context_value(ctx::scaling.name, "weak");
  context_int(run, ctx::batch);  // a run that did not record its batch is not one we can read
  auto number = [&](const reports::schema::Key& k, const std::string& fallback) {
    const std::string v = run.context_value(k.name, fallback);
    try {
      std::size_t used = 0;
      const double x = std::stod(v, &used);
      if (used == v.size() && std::isfinite(x) && x >= 0) return x;
    } catch (const std::exception&) {
    }
    throw UsageError(fmt::format("{}: context \"{}\" is \"{}\", expected a number", run.source, k.name, v));
  };
  auto count = [&](const reports::schema::Key& k, const std::string& fallback) {
    const double x = number(k, fallback);
    if (x != std::floor(x) || x > (1 << 20))
      throw UsageError(fmt::format("{}: context \"{}\" is \"{}\", expected a whole number up to {}", run.source, k.name,
                                   run.context_value(k.name, fallback), 1 << 20));
    return static_cast<int>(x);
  };
  const std::string micro_ctx = run.context_value(ctx::micro_batches.name, "min(4, global batch)");
  r.fixed_micro = micro_ctx.rfind("min(", 0) == 0 ? 0 : count(ctx::micro_batches, "");
  r.bucket_mb = number(ctx::bucket_mb, "25");
  r.first_bucket_mb = number(ctx::first_bucket_mb, "1");
  r.balance = run.context_value(ctx::balance.name, "");
  const std::string threads_ctx = run.context_value(ctx::threads_per_worker.name, "auto");
  r.fixed_threads = threads_ctx == "auto" ? 0 : count(ctx::threads_per_worker, "");
  r.world = count(ctx::world_size, "1");
  // What the run computed in and sent its gradients and gathered parameters in (absent: fp32).
  r.precision = run.context_value(ctx::precision.name, "fp32");
  r.reduce_dtype = run.context_value(ctx::reduce_dtype.name, "fp32");
  r.param_dtype = run.context_value(ctx::param_dtype.name, "fp32");
  try {
    parse_precision(r.precision);
  } catch (const UsageError&) {
    throw UsageError(fmt::format("{}: context \"precision\" is \"{}\", expected fp32, tf32 or bf16", run.source, r.precision));
  }
  for (const auto& [key, v] : {std::pair{ctx::reduce_dtype.name, r.reduce_dtype}, std::pair{ctx::param_dtype.name, r.param_dtype}})
    if (v != "fp32" && v != "bf16")
      throw UsageError(fmt::format("{}: context \"{}\" is \"{}\", expected fp32 or bf16", run.source, key, v));
  r.cores = count(ctx::cpu_threads, "0");
  r.virtual_stages = std::max(1, count(ctx::virtual_stages, "2"));
  return r;
}

// Profiles timed apart from the whole net's: layer by layer, keyed (slices, threads, concurrent,
// tp), and stage by stage, keyed (stages, threads, concurrent).
struct PartProfiles {
  std::map<std::tuple<int, int, int, bool>, pj::Profile> layerwise;
  std::map<std::tuple<int, int, int>, pj::Profile> stagewise;
};

// --load-profile PREFIX: the files --save-profile wrote, so that the run is predicted again from
// the same profiles (a model changed since, say) without timing anything.
void load_saved_profiles(const std::string& prefix_flag, std::vector<pj::Profile>& profiles, PartProfiles& parts) {
  const std::filesystem::path prefix(prefix_flag);
  const std::filesystem::path dir = prefix.has_parent_path() ? prefix.parent_path() : ".";
  const std::string base = prefix.filename().string();
  const std::regex name("(?:(tp|layers|stages)([0-9]+)-)?threads([0-9]+)-workers([0-9]+)\\.json");
  std::error_code ec;
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const std::filesystem::path& file : files) {
    const std::string fn = file.filename().string();
    std::smatch mt;
    if (fn.rfind(base + "-", 0) != 0) continue;
    const std::string rest = fn.substr(base.size() + 1);
    if (!std::regex_match(rest, mt, name)) continue;
    pj::Profile p = pj::load_profile(file.string());
    const int n = mt[2].matched ? std::stoi(mt[2].str()) : 0, t = std::stoi(mt[3].str()), k = std::stoi(mt[4].str());
    if (!mt[1].matched) profiles.push_back(std::move(p));
    else if (mt[1] == "stages") parts.stagewise.emplace(std::make_tuple(n, t, k), std::move(p));
    else parts.layerwise.emplace(std::make_tuple(n, t, k, mt[1] == "tp"), std::move(p));
  }
  if (profiles.empty())
    throw UsageError(fmt::format("--load-profile {}: no {}-threadsT-workersK.json in {} (files that --save-profile writes)",
                                 prefix_flag, base, dir.string()));
}

// The run's measured configurations: each benchmark's median and its timed iterations.
std::vector<Measured> measured_of(const reports::RunFile& run, const std::string& scaling) {
  std::vector<Measured> meas;
  for (const reports::Benchmark& b : reports::collect_benchmarks(run)) {
    const auto n = reports::parse_bench_name(b.name);
    const auto med = b.median_s();
    if (!n || b.error || !med) continue;
    std::vector<double> times = b.samples_s();
    if (times.empty()) times = {*med};
    meas.push_back({b.name, n->strategy, n->devices, scaling == "weak" ? n->batch * n->devices : n->batch, *med, std::move(times)});
  }
  if (meas.empty()) throw UsageError(fmt::format("--validate {}: no measured benchmark in the run", run.source));
  return meas;
}

// One configuration predicted: the measurement, the threads a worker had, the prediction, the
// configuration priced and the profile it was priced from.
struct Row {
  const Measured* x;
  int threads;
  pj::Prediction r;
  pj::Config c;
  const pj::Profile* use;
};

// A run and the profiles it is predicted from: how each configuration ran (threads, workers at
// once, micro-batches, options), the profiles timed or loaded, and each configuration's prediction.
class Validation {
 public:
  Validation(const Flags& f, const pj::Machine& m, std::vector<pj::Profile> profiles)
      : f_(f), m_(m), run_(reports::load_run_json(f.str("validate"))), rs_(run_setup(run_)), profiles_(std::move(profiles)),
        reps_(static_cast<int>(f.integer("reps"))), rounds_(static_cast<int>(f.integer("profile-rounds"))) {
    namespace ctx = reports::schema::context;
    if (run_.context_value(ctx::device_kind.name) != m.kind)
      throw UsageError(fmt::format("--validate {}: the run is on {} but --machine {} describes {}", run_.source,
                                   run_.context_value(ctx::device_kind.name), m.source, m.kind));
    if (m.shared_cores > 0 && rs_.cores > 0 && rs_.cores != m.shared_cores)
      fmt::print(stderr, "parbench project: warning: the run's machine has {} cores, {} says {}\n", rs_.cores, m.source,
                 m.shared_cores);
    meas_ = measured_of(run_, rs_.scaling);
    if (f.has("load-profile")) load_saved_profiles(f.str("load-profile"), profiles_, parts_);
    if (profiles_.empty()) time_workload();
    for (const pj::Profile& p : profiles_)  // a profile of another precision would price other kernels
      if (p.precision != rs_.precision)
        throw UsageError(fmt::format("--validate {}: the run computed in {}, but profile {} was timed in {}", run_.source,
                                     rs_.precision, p.source.empty() ? std::string("(timed here)") : p.source, p.precision));
  }

  const reports::RunFile& run() const { return run_; }
  const std::vector<Measured>& measured() const { return meas_; }

  // Its prediction, priced from the profile that times it as the run ran it: layer by layer or
  // stage by stage where the run runs them apart (projection::timing_of says which), timed here
  // the first time a kind is needed.
  Row predict(const Measured& x) {
    const pj::Config c = config_of(x);
    const int t = threads_of(x.devices);
    pj::Options o;
    o.threads_per_worker = t;
    o.busy_seconds = busy_curve(profiles_, t);
    const pj::Profile& base = profile_for(profiles_, t, concurrent_of(x.devices));
    const pj::Timing timing = pj::timing_of(timed_plan_ ? *timed_plan_ : pj::net_of(base), c);
    const pj::Profile* layers = timing.kind == pj::Timing::Layers ? layerwise(timing, t, base) : nullptr;
    const pj::Profile* stages = timing.kind == pj::Timing::Stages ? stagewise(timing, c, t, base) : nullptr;
    const bool missing = (timing.kind == pj::Timing::Layers && !layers) ||
                         (timing.kind == pj::Timing::Stages && timing.stages > 1 && !stages);
    if (f_.has("load-profile") && missing)
      fmt::print(stderr, "parbench project: warning: --load-profile {} has no {} profile for {}; predicted from the whole-net profile\n",
                 f_.str("load-profile"), timing.kind == pj::Timing::Layers ? "layer-by-layer" : "stage-by-stage", x.name);
    const pj::Profile& use = layers ? *layers : stages ? *stages : base;
    return {&x, t, pj::predict(use, m_, c, o), c, &use};
  }

 private:
  int threads_of(int devices) const {
    if (rs_.world > 1) return std::max(1, (rs_.fixed_threads > 0 ? rs_.fixed_threads : std::max(1, rs_.cores / rs_.world)));
    return m_.threads_per_worker(devices, rs_.fixed_threads);
  }
  // Workers computing side by side on this machine: the run's workers (in-process or MPI ranks),
  // at most as many as the cores run at once. Beyond that the simulator shares the cores among
  // the busy workers in proportion: timed side by side, more workers than cores take turns
  // between calls, and a layer call shorter than a time slice then measures at full speed.
  int concurrent_of(int devices) const {
    if (rs_.world > 1) return rs_.world;
    const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    return std::max(1, std::min({devices, m_.devices_per_node, std::max(1, hw / threads_of(devices))}));
  }
  pj::Config config_of(const Measured& x) const {
    pj::Config c;
    c.strategy = x.strategy;
    c.devices = x.devices;
    c.global_batch = x.global;
    c.micro_batches = rs_.fixed_micro > 0 ? rs_.fixed_micro : static_cast<int>(std::min<int64_t>(4, x.global));
    c.bucket_bytes = rs_.bucket_mb * kMiB;
    c.first_bucket_bytes = rs_.first_bucket_mb * kMiB;
    c.cap_micro_batches = rs_.fixed_micro == 0;  // the run's default: min(4, batch), capped per replica
    c.virtual_stages = rs_.virtual_stages;
    if (takes_reduce_dtype(x.strategy)) c.reduce_dtype = rs_.reduce_dtype;
    if (takes_param_dtype(x.strategy)) c.param_dtype = rs_.param_dtype;
    pj::set_balance(c, rs_.balance, run_.source + ": context \"balance\"");
    return c;
  }
  // --save-profile: PREFIX-<what>threadsT-workersK.json
  void save_profile(const std::string& what, const pj::Profile& p, int threads, int concurrent) const {
    if (!f_.has("save-profile")) return;
    const std::string file = fmt::format("{}-{}threads{}-workers{}.json", f_.str("save-profile"), what, threads, concurrent);
    write_file_atomic(file, pj::profile_json(p).dump(1) + "\n");
    fmt::print(stderr, "parbench project: wrote {}\n", file);
  }

  // Times the run's own workload here, at every thread count and batch piece its configurations
  // need, with the numbers of workers that compute at once -- each, and one worker alone, for the
  // slowdown curve (busy_seconds). Batch by batch, the worker counts in turn, all of it `rounds`
  // times: a load that drifts meanwhile touches each alike, and a slow spell only one round.
  void time_workload() {
    namespace ctx = reports::schema::context;
    WorkloadOptions wo;
    const std::string params = run_.context_value(ctx::workload_params.name);
    if (!params.empty() && std::sscanf(params.c_str(), "image %ld, width %lf", &wo.image, &wo.width) != 2)
      throw UsageError(fmt::format("{}: context \"workload_params\" is \"{}\", expected \"image N, width W\"", run_.source, params));
    const NetSpec net = resolve_workload(run_.context_value(ctx::workload_source.name, run_.context_value(ctx::workload.name)), wo);
    const NetPlan plan = plan_net(net);
    timed_plan_ = plan;
    std::map<int, std::vector<int64_t>> need;
    std::map<int, std::set<int>> together;
    for (const Measured& x : meas_) {
      const int t = threads_of(x.devices);
      together[t].insert({1, concurrent_of(x.devices)});
      for (int64_t c : pj::batch_pieces(plan, config_of(x))) need[t].push_back(c);
    }
    for (auto& [t, v] : need) {
      std::sort(v.begin(), v.end());
      v.erase(std::unique(v.begin(), v.end()), v.end());
      fmt::print(stderr, "parbench project: timing {}'s layers with {} thread(s), {} worker(s) at once, at batch {}\n", net.name,
                 t, fmt::join(together[t], " / "), fmt::join(v, ","));
      std::map<std::pair<int, int64_t>, std::vector<pj::Profile>> timed;
      for (int round = 0; round < rounds_; ++round)
        for (int64_t b : v)
          for (int k : together[t])
            timed[{k, b}].push_back(engine_profile(plan, net.name, {b}, t, reps_, k, parse_precision(rs_.precision)));
      std::map<int, pj::Profile> by_k;
      for (int64_t b : v)
        for (int k : together[t]) {
          const pj::Profile one = median_of(timed[{k, b}]);
          auto [it, fresh] = by_k.emplace(k, one);
          if (!fresh) append_batch(it->second, one);
        }
      for (auto& [k, p] : by_k) {
        p.context["workload_params"] = params;
        profiles_.push_back(std::move(p));
      }
    }
    for (const pj::Profile& p : profiles_) save_profile("", p, p.threads, p.concurrent);
  }

  // The layer-by-layer profile (slices, tp's ReLUs and copies) of this timing, timed the first
  // time where the workload is timed here; null where there is none.
  const pj::Profile* layerwise(const pj::Timing& timing, int t, const pj::Profile& base) {
    const std::tuple<int, int, int, bool> key{timing.slices, t, base.concurrent, timing.tp};
    if (timed_plan_ && !parts_.layerwise.count(key)) {
      fmt::print(stderr, "parbench project: timing layer by layer ({} channel slice(s){}, {} worker(s) at once)\n", timing.slices,
                 timing.tp ? ", ReLUs and layout copies as tp runs them" : "", base.concurrent);
      const pj::Profile& lp =
          parts_.layerwise.emplace(key, layerwise_profile(base, *timed_plan_, timing.slices, reps_, rounds_, timing.tp)).first->second;
      save_profile(fmt::format("{}{}-", timing.tp ? "tp" : "layers", timing.slices), lp, t, base.concurrent);
    }
    const auto it = parts_.layerwise.find(key);
    return it == parts_.layerwise.end() ? nullptr : &it->second;
  }
  // The stage-by-stage profile of this timing, likewise (timed for more than one stage).
  const pj::Profile* stagewise(const pj::Timing& timing, const pj::Config& c, int t, const pj::Profile& base) {
    const std::tuple<int, int, int> key{timing.stages, t, base.concurrent};
    if (timing.stages > 1 && timed_plan_ && !parts_.stagewise.count(key)) {
      std::vector<std::pair<int, int>> ranges;
      try {
        ranges = pj::stage_ranges(*timed_plan_, c, &base);
      } catch (const UsageError&) {  // more stages than layers: the prediction says so
      }
      if (!ranges.empty()) {
        fmt::print(stderr, "parbench project: timing stage by stage ({} stages, {} worker(s) at once)\n", timing.stages,
                   base.concurrent);
        const pj::Profile& sp =
            parts_.stagewise.emplace(key, stagewise_profile(base, *timed_plan_, ranges, reps_, rounds_)).first->second;
        save_profile(fmt::format("stages{}-", timing.stages), sp, t, base.concurrent);
      }
    }
    const auto it = parts_.stagewise.find(key);
    return it == parts_.stagewise.end() ? nullptr : &it->second;
  }

  const Flags& f_;
  const pj::Machine& m_;
  const reports::RunFile run_;
  const RunSetup rs_;
  std::vector<pj::Profile> profiles_;
  const int reps_, rounds_;
  std::vector<Measured> meas_;
  std::optional<NetPlan> timed_plan_;  // the workload, where this command times it itself
  PartProfiles parts_;
};

// --anchor: the machine's speed while the run was measured against while the profile was timed,
// from the one-device regular run's measured time over its prediction; that row is left out.
double anchor_scale(const std::vector<Row>& got, const std::string& source, const Row** anchor) {
  for (const Row& g : got)
    if (g.x->strategy == "regular" && g.x->devices == 1 && g.r.feasible) *anchor = &g;
  if (!*anchor) throw UsageError(fmt::format("--anchor: {} has no regular run on one device to anchor to", source));
  return (*anchor)->x->seconds / (*anchor)->r.step_s;
}

std::vector<Checked> checked_rows(const std::vector<Row>& got, double scale, const Row* anchor) {
  std::vector<Checked> checked;
  for (const Row& g : got) {
    Checked k;
    k.name = g.x->name;
    k.threads = g.threads;
    k.measured_s = g.x->seconds;
    k.times = g.x->times;
    k.feasible = g.r.feasible;
    k.reason = g.r.reason;
    k.predicted_s = g.r.step_s * scale;
    k.compute_s = g.r.compute_s * scale;
    k.exposed_comm_s = g.r.exposed_comm_s * scale;
    k.idle_s = g.r.idle_s * scale;
    k.anchor = &g == anchor;
    checked.push_back(std::move(k));
  }
  return checked;
}

}  // namespace

int project_validate(const Flags& f, const pj::Machine& m, std::vector<pj::Profile> profiles) {
  Validation v(f, m, std::move(profiles));
  const reports::RunFile& run = v.run();
  std::vector<Row> got;
  for (const Measured& x : v.measured()) got.push_back(v.predict(x));
  double scale = 1;
  const Row* anchor = nullptr;
  if (f.has("anchor")) scale = anchor_scale(got, run.source, &anchor);
  const std::vector<Checked> checked = checked_rows(got, scale, anchor);
  const std::string tail =
      anchor ? fmt::format("Anchored: every prediction x {:.3f}, the one-device regular run's measured time over its prediction "
                           "(the machine's speed while the run was measured against while the profile was timed); that row is "
                           "not counted.\n", scale)
             : "";
  // Action by action where the run traced a step (run --trace).
  std::vector<ActionCheck> actions;
  for (const Row& g : got)
    if (g.r.feasible && !g.r.actions.empty()) actions.push_back({g.x->name, pj::plan_for(*g.use, g.c), g.r.actions, scale});
  json per_action = json::array();
  const std::filesystem::path run_dir = std::filesystem::path(f.str("validate")).parent_path();
  const std::string by_action = per_action_report(run_dir.empty() ? "." : run_dir.string(), actions, &per_action);
  const std::string out = fmt::format(
      "## Validation: {} against {} (projected on {})\n\n"
      "| configuration | threads/worker | measured ms | predicted ms | error | compute ms | exposed comm ms | idle ms |\n"
      "|---|--:|--:|--:|--:|--:|--:|--:|\n",
      run.source, m.source, m.name);
  json extra = {{"run", run.source}, {"machine", m.source}, {"anchor_scale", scale}};
  if (!per_action.empty()) extra["per_action"] = per_action;
  report_validation(f, out, checked, "measured = the run's median ms/iteration", tail + by_action, extra);
  return 0;
}

}  // namespace pb
