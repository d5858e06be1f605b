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

}  // namespace

int project_validate(const Flags& f, const pj::Machine& m, std::vector<pj::Profile> profiles) {
  namespace ctx = reports::schema::context;
  const reports::RunFile run = reports::load_run_json(f.str("validate"));
  const RunSetup rs = run_setup(run);
  const std::string& scaling = rs.scaling;
  const int fixed_micro = rs.fixed_micro, fixed_threads = rs.fixed_threads, world = rs.world, cores = rs.cores;
  const std::string& precision = rs.precision;
  if (run.context_value(ctx::device_kind.name) != m.kind)
    throw UsageError(fmt::format("--validate {}: the run is on {} but --machine {} describes {}", run.source,
                                 run.context_value(ctx::device_kind.name), m.source, m.kind));
  if (m.shared_cores > 0 && cores > 0 && cores != m.shared_cores)
    fmt::print(stderr, "parbench project: warning: the run's machine has {} cores, {} says {}\n", cores, m.source, m.shared_cores);
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
  auto threads_of = [&](int devices) {
    if (world > 1) return std::max(1, (fixed_threads > 0 ? fixed_threads : std::max(1, cores / world)));
    return m.threads_per_worker(devices, fixed_threads);
  };
  // Workers computing side by side on this machine: the run's workers (in-process or MPI ranks),
  // at most as many as the cores run at once. Beyond that the simulator shares the cores among
  // the busy workers in proportion: timed side by side, more workers than cores take turns
  // between calls, and a layer call shorter than a time slice then measures at full speed
  // (linear's on 4 workers over 2 cores: predicted 17-45% too fast).
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  auto concurrent_of = [&](int devices) {
    if (world > 1) return world;
    return std::max(1, std::min({devices, m.devices_per_node, std::max(1, hw / threads_of(devices))}));
  };
  auto micro_of = [&](int64_t global) {
    return fixed_micro > 0 ? fixed_micro : static_cast<int>(std::min<int64_t>(4, global));
  };
  auto config_of = [&](const Measured& x) {
    pj::Config c;
    c.strategy = x.strategy;
    c.devices = x.devices;
    c.global_batch = x.global;
    c.micro_batches = micro_of(x.global);
    c.bucket_bytes = rs.bucket_mb * kMiB;
    c.first_bucket_bytes = rs.first_bucket_mb * kMiB;
    c.cap_micro_batches = fixed_micro == 0;  // the run's default: min(4, batch), capped per replica
    c.virtual_stages = rs.virtual_stages;
    if (takes_reduce_dtype(x.strategy)) c.reduce_dtype = rs.reduce_dtype;
    if (takes_param_dtype(x.strategy)) c.param_dtype = rs.param_dtype;
    pj::set_balance(c, rs.balance, run.source + ": context \"balance\"");
    return c;
  };
  // Layers are timed alone (or as slices) only when this command times the workload itself.
  std::optional<NetPlan> timed_plan;
  PartProfiles parts;
  auto& layerwise_profiles = parts.layerwise;
  auto& stagewise_profiles = parts.stagewise;
  const int reps = static_cast<int>(f.integer("reps")), rounds = static_cast<int>(f.integer("profile-rounds"));
  // --save-profile: PREFIX-<what>threadsT-workersK.json
  auto save_profile = [&](const std::string& what, const pj::Profile& p, int threads, int concurrent) {
    if (!f.has("save-profile")) return;
    const std::string file = fmt::format("{}-{}threads{}-workers{}.json", f.str("save-profile"), what, threads, concurrent);
    write_file_atomic(file, pj::profile_json(p).dump(1) + "\n");
    fmt::print(stderr, "parbench project: wrote {}\n", file);
  };
  if (f.has("load-profile")) load_saved_profiles(f.str("load-profile"), profiles, parts);
  if (profiles.empty()) {
    // Time the run's own workload here, at every thread count and batch piece it needs.
    WorkloadOptions wo;
    const std::string params = run.context_value(ctx::workload_params.name);
    if (!params.empty() && std::sscanf(params.c_str(), "image %ld, width %lf", &wo.image, &wo.width) != 2)
      throw UsageError(fmt::format("{}: context \"workload_params\" is \"{}\", expected \"image N, width W\"", run.source, params));
    const NetSpec net = resolve_workload(run.context_value(ctx::workload_source.name, run.context_value(ctx::workload.name)), wo);
    const NetPlan plan = plan_net(net);
    timed_plan = plan;
    // Per thread count: the batch pieces its configurations need, and the numbers of workers that
    // compute at once -- each timed, and one worker alone, for the slowdown curve (busy_seconds).
    std::map<int, std::vector<int64_t>> need;
    std::map<int, std::set<int>> together;
    for (const Measured& x : meas) {
      const int t = threads_of(x.devices);
      auto& v = need[t];
      together[t].insert({1, concurrent_of(x.devices)});
      for (int64_t c : pj::batch_pieces(plan, config_of(x))) v.push_back(c);
    }
    for (auto& [t, v] : need) {
      std::sort(v.begin(), v.end());
      v.erase(std::unique(v.begin(), v.end()), v.end());
      fmt::print(stderr, "parbench project: timing {}'s layers with {} thread(s), {} worker(s) at once, at batch {}\n", net.name,
                 t, fmt::join(together[t], " / "), fmt::join(v, ","));
      // Batch by batch, the worker counts in turn, all of it `rounds` times: a load that drifts
      // meanwhile touches each alike, and a slow spell only one round (the median of them).
      std::map<std::pair<int, int64_t>, std::vector<pj::Profile>> timed;
      for (int round = 0; round < rounds; ++round)
        for (int64_t b : v)
          for (int k : together[t]) timed[{k, b}].push_back(engine_profile(plan, net.name, {b}, t, reps, k, parse_precision(precision)));
      std::map<int, pj::Profile> by_k;
      for (int64_t b : v)
        for (int k : together[t]) {
          const pj::Profile one = median_of(timed[{k, b}]);
          auto [it, fresh] = by_k.emplace(k, one);
          if (!fresh) append_batch(it->second, one);
        }
      for (auto& [k, p] : by_k) {
        p.context["workload_params"] = params;
        profiles.push_back(std::move(p));
      }
    }
    for (const pj::Profile& p : profiles) save_profile("", p, p.threads, p.concurrent);
  }
  for (const pj::Profile& p : profiles)  // a profile of another precision would price other kernels
    if (p.precision != precision)
      throw UsageError(fmt::format("--validate {}: the run computed in {}, but profile {} was timed in {}", run.source, precision,
                                   p.source.empty() ? std::string("(timed here)") : p.source, p.precision));
  std::string out = fmt::format(
      "## Validation: {} against {} (projected on {})\n\n"
      "| configuration | threads/worker | measured ms | predicted ms | error | compute ms | exposed comm ms | idle ms |\n"
      "|---|--:|--:|--:|--:|--:|--:|--:|\n",
      run.source, m.source, m.name);
  struct Row {
    const Measured* x;
    int threads;
    pj::Prediction r;
    pj::Config c;
    const pj::Profile* use;
  };
  std::vector<Row> got;
  for (const Measured& x : meas) {
    const pj::Config c = config_of(x);
    const int t = threads_of(x.devices);
    pj::Options o;
    o.threads_per_worker = t;
    o.busy_seconds = busy_curve(profiles, t);
    const pj::Profile& base = profile_for(profiles, t, concurrent_of(x.devices));
    // Layers or stages that the run runs apart are timed apart (projection::timing_of says which).
    const pj::Timing timing = pj::timing_of(timed_plan ? *timed_plan : pj::net_of(base), c);
    const bool layerwise = timing.kind == pj::Timing::Layers;
    const int slices = timing.slices;
    const bool tp = timing.tp;
    const std::tuple<int, int, int, bool> key{slices, t, base.concurrent, tp};
    if (layerwise && timed_plan && !layerwise_profiles.count(key)) {
      fmt::print(stderr, "parbench project: timing layer by layer ({} channel slice(s){}, {} worker(s) at once)\n", slices,
                 tp ? ", ReLUs and layout copies as tp runs them" : "", base.concurrent);
      const pj::Profile& lp = layerwise_profiles.emplace(key, layerwise_profile(base, *timed_plan, slices, reps, rounds, tp)).first->second;
      save_profile(fmt::format("{}{}-", tp ? "tp" : "layers", slices), lp, t, base.concurrent);
    }
    const auto lw_it = layerwise_profiles.find(key);
    const bool staged = timing.kind == pj::Timing::Stages;
    const int stages = timing.stages;
    const std::tuple<int, int, int> skey{stages, t, base.concurrent};
    if (staged && stages > 1 && timed_plan && !stagewise_profiles.count(skey)) {
      std::vector<std::pair<int, int>> ranges;
      try {
        ranges = pj::stage_ranges(*timed_plan, c, &base);
      } catch (const UsageError&) {  // more stages than layers: the prediction says so
      }
      if (!ranges.empty()) {
        fmt::print(stderr, "parbench project: timing stage by stage ({} stages, {} worker(s) at once)\n", stages, base.concurrent);
        const pj::Profile& sp = stagewise_profiles.emplace(skey, stagewise_profile(base, *timed_plan, ranges, reps, rounds)).first->second;
        save_profile(fmt::format("stages{}-", stages), sp, t, base.concurrent);
      }
    }
    const auto sw_it = stagewise_profiles.find(skey);
    if (f.has("load-profile") && ((layerwise && lw_it == layerwise_profiles.end()) || (staged && stages > 1 && sw_it == stagewise_profiles.end())))
      fmt::print(stderr, "parbench project: warning: --load-profile {} has no {} profile for {}; predicted from the whole-net profile\n",
                 f.str("load-profile"), layerwise ? "layer-by-layer" : "stage-by-stage", x.name);
    const pj::Profile& use = layerwise && lw_it != layerwise_profiles.end() ? lw_it->second
                             : staged && sw_it != stagewise_profiles.end() ? sw_it->second
                                                                           : base;
    got.push_back({&x, t, pj::predict(use, m, c, o), c, &use});
  }
  // --anchor: the machine's speed while the run was measured against while the profile was timed,
  // from the one-device regular run; every prediction is scaled by it, and that row is left out.
  double scale = 1;
  const Row* anchor = nullptr;
  if (f.has("anchor")) {
    for (const Row& g : got)
      if (g.x->strategy == "regular" && g.x->devices == 1 && g.r.feasible) anchor = &g;
    if (!anchor) throw UsageError(fmt::format("--anchor: {} has no regular run on one device to anchor to", run.source));
    scale = anchor->x->seconds / anchor->r.step_s;
  }
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
  json extra = {{"run", run.source}, {"machine", m.source}, {"anchor_scale", scale}};
  if (!per_action.empty()) extra["per_action"] = per_action;
  report_validation(f, out, checked, "measured = the run's median ms/iteration", tail + by_action, extra);
  return 0;
}

}  // namespace pb
