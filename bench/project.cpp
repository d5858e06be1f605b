// parbench project: every strategy projected to device counts and machines one does not have,
// from a per-layer profile and a machine description; --validate predicts a measured run's
// configurations and prints the errors. The model is reports/projection.*.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <thread>

#include <fmt/ranges.h>

#include "bench/cli.h"
#include "bench/project.h"
#include "engine/check.h"
#include "engine/fsutil.h"
#include "reports/gbjson.h"
#include "reports/projection_table.h"
#include "reports/schema.h"
#include "reports/stats.h"
#include "reports/table.h"
#include "strategies/batch.h"
#include "strategies/stages.h"
#include "workloads/workload.h"

namespace pb {

// How the same work's time grows with the workers computing at once, from the profiles with
// `threads` threads timed by 1, 2, ... concurrent workers at the same batches: [b - 1] = their
// total seconds with b at once, linear between the counts timed. Empty without a profile of one
// worker alone and one of more (the simulator then uses the machine's parallel_threads).
std::vector<double> busy_curve(const std::vector<projection::Profile>& ps, int threads) {
  std::map<int, double> at;  // concurrent workers -> seconds of every layer at every batch
  const projection::Profile* first = nullptr;
  for (const projection::Profile& p : ps) {
    if (p.threads != threads) continue;
    if (first && p.batches != first->batches) return {};
    first = first ? first : &p;
    double sum = 0;
    for (std::size_t l = 0; l < p.layers.size(); ++l)
      for (std::size_t b = 0; b < p.batches.size(); ++b)
        sum += p.layers[l].forward_s[b] + p.layers[l].backward_data_s[b] + p.layers[l].backward_weights_s[b];
    at[p.concurrent] = sum;
  }
  if (at.size() < 2 || !at.count(1)) return {};
  std::vector<double> out;
  for (int b = 1; b <= at.rbegin()->first; ++b) {
    const auto hi = at.lower_bound(b);
    if (hi->first == b) {
      out.push_back(hi->second);
    } else {
      const auto lo = std::prev(hi);
      out.push_back(lo->second + (hi->second - lo->second) * (b - lo->first) / (hi->first - lo->first));
    }
  }
  return out;
}

int cpu_threads_for(const projection::Machine& m, int devices, int fixed) {
  if (m.shared_cores <= 0) return 1;
  return fixed > 0 ? fixed : std::max(1, m.shared_cores / std::max(1, std::min(devices, m.devices_per_node)));
}

namespace {

namespace pj = projection;
using nlohmann::json;
using pj::Projected;
constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kGiB = kMiB * 1024.0;

// dpxpp: every dp<D>xpp<P> hybrid whose D x P is the device count (D, P >= 2).
const std::vector<std::string> kModelled = {"regular", "dp", "ddp", "mp", "pipeline", "fsdp", "zero2", "tp", kHybridFamily, kDpTpFamily};

std::vector<std::string> split_list(const std::string& s) { return reports::split_commas(s); }

std::vector<int64_t> int_items(const std::string& flag, const std::string& s, int64_t lo) {
  std::vector<int64_t> out;
  for (const std::string& item : split_list(s)) {
    std::size_t used = 0;
    int64_t v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || used == 0 || v < lo)
      throw UsageError(fmt::format("flag --{} expects a comma-separated list of integers >= {}, got '{}'", flag, lo, s));
    check_int_flag(flag, v, s);
    out.push_back(v);
  }
  return out;
}

// The profile for a thread count: the one measured with it, else the only one given.
// The profile timed with `threads` threads per worker, by `concurrent` workers at once when there
// is one, else by any number (the simulator scales from its own).
const pj::Profile& profile_for(const std::vector<pj::Profile>& ps, int threads, int concurrent = 1) {
  for (const pj::Profile& p : ps)
    if (p.threads == threads && p.concurrent == concurrent) return p;
  for (const pj::Profile& p : ps)
    if (p.threads == threads) return p;
  if (ps.size() == 1) return ps.front();
  std::vector<int> have;
  for (const pj::Profile& p : ps) have.push_back(p.threads);
  throw UsageError(fmt::format("--profile: no profile measured with {} thread(s) per worker (the profiles have {})",
                               threads, fmt::join(have, ", ")));
}

// `more`'s one batch (above `p`'s) added to p; Adam's time per parameter: their mean.
void append_batch(pj::Profile& p, const pj::Profile& more) {
  const double n = static_cast<double>(p.batches.size());
  p.batches.push_back(more.batches.front());
  for (std::size_t l = 0; l < p.layers.size(); ++l) {
    p.layers[l].forward_s.push_back(more.layers[l].forward_s.front());
    p.layers[l].backward_data_s.push_back(more.layers[l].backward_data_s.front());
    p.layers[l].backward_weights_s.push_back(more.layers[l].backward_weights_s.front());
  }
  p.loss_s.push_back(more.loss_s.front());
  p.optimizer_s_per_param = (p.optimizer_s_per_param * n + more.optimizer_s_per_param) / (n + 1);
  const json f = more.context.value("slowest_worker_factor", json::array());
  if (p.context.contains("slowest_worker_factor") && !f.empty()) p.context["slowest_worker_factor"].push_back(f.front());
}

// Per layer, pass and batch, the median of profiles of the same net timed in turn: a slow spell
// of the machine (another tenant, a frequency change) that lasts seconds touches one of them.
pj::Profile median_of(const std::vector<pj::Profile>& v) {
  PB_CHECK(!v.empty(), "profile: nothing timed");
  auto med = [&](auto get) {
    std::vector<double> x;
    for (const pj::Profile& p : v) x.push_back(get(p));
    return reports::median(std::move(x));
  };
  pj::Profile out = v.front();
  for (std::size_t l = 0; l < out.layers.size(); ++l)
    for (std::size_t b = 0; b < out.batches.size(); ++b) {
      out.layers[l].forward_s[b] = med([&](const pj::Profile& p) { return p.layers[l].forward_s[b]; });
      out.layers[l].backward_data_s[b] = med([&](const pj::Profile& p) { return p.layers[l].backward_data_s[b]; });
      out.layers[l].backward_weights_s[b] = med([&](const pj::Profile& p) { return p.layers[l].backward_weights_s[b]; });
    }
  for (std::size_t b = 0; b < out.batches.size(); ++b) out.loss_s[b] = med([&](const pj::Profile& p) { return p.loss_s[b]; });
  out.optimizer_s_per_param = med([](const pj::Profile& p) { return p.optimizer_s_per_param; });
  out.context["rounds"] = v.size();
  auto factor = [](const pj::Profile& p, std::size_t b) {  // at_slowest_pace's, 1 where not recorded
    const json f = p.context.value("slowest_worker_factor", json::array());
    return b < f.size() && f[b].is_number() ? f[b].get<double>() : 1.0;
  };
  if (out.context.contains("slowest_worker_factor")) {
    json f = json::array();
    for (std::size_t b = 0; b < out.batches.size(); ++b) f.push_back(med([&](const pj::Profile& p) { return factor(p, b); }));
    out.context["slowest_worker_factor"] = f;
  }
  return out;
}

// Seconds worker 0 of an n-way tp spends on a split layer's per-sample layout copies at batch b
// (strategies/tp.cpp): in forward, every worker's gathered piece into the activation, sample by
// sample (a whole activation); in backward, its own channels of the output gradient (b copies).
// The median of `reps` timings, after one untimed.
std::pair<double, double> tp_copy_seconds(int64_t K, int64_t per_sample, int n, int64_t b, int reps) {
  std::vector<int64_t> k(n), lo(n, 0);
  for (int r = 0; r < n; ++r) k[r] = K / n + (r < K % n ? 1 : 0), lo[r] = r == 0 ? 0 : lo[r - 1] + k[r - 1];
  const int64_t piece = b * ((K + n - 1) / n) * per_sample;
  std::vector<float> gathered(static_cast<std::size_t>(n * piece), 1.0f), y(static_cast<std::size_t>(b * K * per_sample), 0.0f),
      gout = y, mine(static_cast<std::size_t>(b * k[0] * per_sample), 0.0f);
  const auto bytes = [](int64_t v) { return static_cast<std::size_t>(v) * sizeof(float); };
  std::vector<double> fwd, bwd;
  for (int rep = 0; rep <= reps; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    for (int q = 0; q < n; ++q)
      for (int64_t j = 0; j < b; ++j)
        copy_bytes(cpu(), y.data() + (j * K + lo[q]) * per_sample, cpu(), gathered.data() + q * piece + j * k[q] * per_sample,
                   bytes(k[q] * per_sample));
    auto t1 = std::chrono::steady_clock::now();
    for (int64_t j = 0; j < b; ++j)
      copy_bytes(cpu(), mine.data() + j * k[0] * per_sample, cpu(), gout.data() + (j * K + lo[0]) * per_sample, bytes(k[0] * per_sample));
    auto t2 = std::chrono::steady_clock::now();
    if (rep == 0) continue;
    fwd.push_back(std::chrono::duration<double>(t1 - t0).count());
    bwd.push_back(std::chrono::duration<double>(t2 - t1).count());
  }
  return {reports::median(std::move(fwd)), reports::median(std::move(bwd))};
}

// The profile of a strategy that runs the net layer by layer: every conv / linear layer with n or
// more output channels timed alone as worker 0 of an n-way tp runs it -- ceil(K / n) output
// channels on the whole input, after a ReLU so that its input gradient is computed too -- and
// entered as that time x K / k, since the model charges a worker k / K of the layer's time (n = 1:
// the whole layer alone, as fsdp, zero2 and tp on one device run it). Timed as `p` was:
// `p.threads` threads, `p.concurrent` workers at once, `rounds` times in turn (the median).
// tp (and dp x tp) also runs what the profile's one Sequential does not: each ReLU on its own
// (the Sequential runs it inside the convolution before it, where oneDNN fuses the two, and times
// it as nothing), entered as the slice net's ReLU on the same activation, and the per-sample
// copies above, added to the layer's forward and backward-weights times.
pj::Profile layerwise_profile(const pj::Profile& p, const NetPlan& plan, int n, int reps, int rounds, bool tp) {
  pj::Profile q = p;
  std::map<std::size_t, std::vector<pj::Profile>> timed;  // layer -> its slice net, once per round
  std::map<std::size_t, std::vector<std::vector<double>>> copy_fwd, copy_bwd;  // layer -> per batch: each round's seconds
  for (int round = 0; round < rounds; ++round)
    for (std::size_t i = 0; i < plan.layers.size(); ++i) {
      const LayerPlan& l = plan.layers[i];
      const bool conv = l.spec.type == LayerType::Conv2d, lin = l.spec.type == LayerType::Linear;
      if (!conv && !lin) continue;
      const int64_t K = l.out[0];
      if (K < n) continue;
      NetSpec one;
      one.name = fmt::format("tp slice of layer {}", i);
      one.input = l.in;
      one.target = Target::Random;
      one.layers.push_back(LayerSpec{});  // ReLU
      LayerSpec s = l.spec;
      if (conv) s.out_channels = (K + n - 1) / n;
      else s.out_features = (K + n - 1) / n;
      s.in_channels = -1, s.in_features = -1;
      one.layers.push_back(s);
      timed[i].push_back(engine_profile(plan_net(one), one.name, p.batches, p.threads, reps, p.concurrent));
      if (!tp) continue;
      copy_fwd[i].resize(p.batches.size()), copy_bwd[i].resize(p.batches.size());
      for (std::size_t b = 0; b < p.batches.size(); ++b) {
        const auto [fwd, bwd] = tp_copy_seconds(K, numel_of(l.out) / K, n, p.batches[b], reps);
        copy_fwd[i][b].push_back(fwd), copy_bwd[i][b].push_back(bwd);
      }
    }
  for (const auto& [i, v] : timed) {
    const int64_t K = plan.layers[i].out[0], k = (K + n - 1) / n;
    const pj::Profile t = median_of(v);
    const double up = static_cast<double>(K) / static_cast<double>(k);
    const bool relu_before = tp && i > 0 && plan.layers[i - 1].spec.type == LayerType::ReLU;
    for (std::size_t b = 0; b < p.batches.size(); ++b) {
      const double cf = tp ? reports::median(copy_fwd.at(i)[b]) : 0, cb = tp ? reports::median(copy_bwd.at(i)[b]) : 0;
      q.layers[i].forward_s[b] = (t.layers[1].forward_s[b] + cf) * up;
      q.layers[i].backward_data_s[b] = i == 0 ? 0 : t.layers[1].backward_data_s[b] * up;
      q.layers[i].backward_weights_s[b] = (t.layers[1].backward_weights_s[b] + cb) * up;
      if (relu_before) q.layers[i - 1].forward_s[b] = t.layers[0].forward_s[b];
    }
  }
  q.context["tp_slices"] = n;
  q.context["tp_relu_and_copies"] = tp;
  return q;
}

// The profile of a pipeline's stages (mp, pipeline, dp x pp): each stage [b, e) of `ranges` runs
// as a Sequential of its own, so the activations leave the library's blocked layout where a stage
// ends and the next begins (the profile's one Sequential keeps them blocked throughout). Each
// stage timed alone -- after a ReLU when it has a predecessor, so that its first layer's input
// gradient is computed, as the stage's is -- and its layers' times entered for those layers.
// Timed as `p` was: `p.threads` threads, `p.concurrent` workers at once, `rounds` times (median).
pj::Profile stagewise_profile(const pj::Profile& p, const NetPlan& plan, const std::vector<std::pair<int, int>>& ranges, int reps,
                              int rounds) {
  pj::Profile q = p;
  if (ranges.size() < 2) return q;
  std::vector<std::vector<pj::Profile>> timed(ranges.size());
  for (int round = 0; round < rounds; ++round)
    for (std::size_t s = 0; s < ranges.size(); ++s) {
      NetSpec one;
      one.name = fmt::format("stage {} (layers {}-{})", s, ranges[s].first, ranges[s].second - 1);
      one.input = plan.layers[ranges[s].first].in;
      one.target = Target::Random;
      if (s > 0) one.layers.push_back(LayerSpec{});  // ReLU
      for (int i = ranges[s].first; i < ranges[s].second; ++i) {
        LayerSpec l = plan.layers[i].spec;
        l.in_channels = -1, l.in_features = -1;
        one.layers.push_back(l);
      }
      timed[s].push_back(engine_profile(plan_net(one), one.name, p.batches, p.threads, reps, p.concurrent));
    }
  for (std::size_t s = 0; s < ranges.size(); ++s) {
    const pj::Profile t = median_of(timed[s]);
    const int off = s > 0 ? 1 : 0;
    for (int i = ranges[s].first; i < ranges[s].second; ++i) {
      const pj::LayerProfile& from = t.layers[static_cast<std::size_t>(i - ranges[s].first + off)];
      pj::LayerProfile& to = q.layers[static_cast<std::size_t>(i)];
      to.forward_s = from.forward_s;
      to.backward_data_s = from.backward_data_s;
      to.backward_weights_s = from.backward_weights_s;
      if (i == 0) std::fill(to.backward_data_s.begin(), to.backward_data_s.end(), 0.0);
    }
  }
  q.context["stages"] = ranges.size();
  return q;
}


// Every configuration `project` considers at one device count.
std::vector<pj::Config> configs_at(int n, int64_t global, const std::vector<std::string>& strategies,
                                   const std::vector<int64_t>& micro, const std::vector<std::string>& schedules,
                                   const std::vector<double>& buckets, bool recompute) {
  std::vector<pj::Config> out;
  auto base = [&](const std::string& s) {
    pj::Config c;
    c.strategy = s;
    c.devices = n;
    c.global_batch = global;
    return c;
  };
  for (const std::string& s : strategies) {
    if (s == "regular" && n != 1) continue;
    if (s == "ddp") {
      for (double b : buckets) {
        pj::Config c = base(s);
        c.bucket_bytes = b;
        out.push_back(c);
      }
    } else if (s == "pipeline") {
      for (int64_t m : micro)
        for (const std::string& sch : schedules) {
          if (m > global) continue;  // more micro-batches than samples
          pj::Config c = base(s);
          c.micro_batches = static_cast<int>(m);
          c.schedule = sch;
          out.push_back(c);
          if (recompute) {
            c.recompute = true;
            out.push_back(c);
          }
        }
    } else if (s == kHybridFamily || pj::hybrid_shape(s)) {
      // GPipe only; micro-batches per replica.
      for (const auto& [d, pp] : hybrid_factorizations(n)) {
        const std::string name = hybrid_name(d, pp, Schedule::GPipe, false);
        if (s != kHybridFamily && s != name) continue;
        for (int64_t m : micro) {
          if (m > global / d) continue;  // more micro-batches than a replica has samples
          pj::Config c = base(name);
          c.micro_batches = static_cast<int>(m);
          out.push_back(c);
        }
      }
    } else if (s == kDpTpFamily || pj::dptp_shape(s)) {
      for (const auto& [d, t] : hybrid_factorizations(n))
        if (s == kDpTpFamily || s == dptp_name(d, t)) out.push_back(base(dptp_name(d, t)));
    } else {
      out.push_back(base(s));
    }
  }
  return out;
}

// Why --strategies' `s` has no configuration at any of the device counts.
std::string no_configuration(const std::string& s, const std::vector<int64_t>& devices, const std::string& micro) {
  const auto h = pj::hybrid_shape(s);
  const auto t = h ? h : pj::dptp_shape(s);
  const bool has = t && std::find(devices.begin(), devices.end(), t->first * t->second) != devices.end();
  std::string why;
  if (t && !has) why = fmt::format("{} runs on {} x {} = {} devices", s, t->first, t->second, t->first * t->second);
  else if (h || s == "pipeline") why = fmt::format("every --micro-batches count ({}) is above the samples of a replica", micro);
  else if (s == kHybridFamily || s == kDpTpFamily) why = fmt::format("{} needs a device count D x P with both at least 2 (4, 6, 8, ...)", s);
  else if (s == "regular") why = "regular runs on one device";
  else why = "no configuration of it is possible there";
  return fmt::format("--strategies {}: nothing to project at --devices {}: {}", s, fmt::join(devices, ","), why);
}

// --- --validate ------------------------------------------------------------------------------

struct Measured {
  std::string name, strategy;
  int devices = 0;
  int64_t global = 0;
  double seconds = 0;
  std::vector<double> times;  // every timed iteration (else every repetition), seconds
};

// One configuration predicted against measured, as printed and written.
struct Checked {
  std::string name;
  int threads = 0;
  double measured_s = 0;
  std::vector<double> times;
  bool feasible = true;
  std::string reason;
  double predicted_s = 0, compute_s = 0, exposed_comm_s = 0, idle_s = 0;
  bool anchor = false;  // --anchor's row: shown, not counted
};

// The table, the mean and worst error, the one-device spread; --out PREFIX.md/.json. `json_extra`
// joins the JSON's top level.
void report_validation(const Flags& f, std::string out, const std::vector<Checked>& got, const std::string& measured_note,
                       const std::string& tail, json json_extra) {
  std::vector<double> errs;
  json rows = json::array();
  double lo = 0, hi = 0;
  for (const Checked& g : got) {
    // The run's own repeatability: on one device regular, dp, ddp and mp do the same arithmetic.
    if (const auto n = reports::parse_bench_name(g.name);
        n && n->devices == 1 && (n->strategy == "regular" || n->strategy == "dp" || n->strategy == "ddp" || n->strategy == "mp")) {
      lo = lo > 0 ? std::min(lo, g.measured_s) : g.measured_s;
      hi = std::max(hi, g.measured_s);
    }
    if (!g.feasible) {
      out += fmt::format("| {} | {} | {:.4g} | not modelled: {} | | | | |\n", g.name, g.threads, g.measured_s * 1e3, g.reason);
      continue;
    }
    const double err = (g.predicted_s - g.measured_s) / g.measured_s;
    out += fmt::format("| {} | {} | {:.4g} | {:.4g} | {} | {:.4g} | {:.4g} | {:.4g} |\n", g.name, g.threads, g.measured_s * 1e3,
                       g.predicted_s * 1e3, g.anchor ? std::string("anchor") : fmt::format("{:+.1f}%", err * 100),
                       g.compute_s * 1e3, g.exposed_comm_s * 1e3, g.idle_s * 1e3);
    if (g.anchor) continue;
    errs.push_back(std::abs(err));
    rows.push_back({{"name", g.name}, {"threads", g.threads}, {"measured_s", g.measured_s}, {"measured_times_s", g.times},
                    {"predicted_s", g.predicted_s}, {"error", err}, {"compute_s", g.compute_s},
                    {"exposed_comm_s", g.exposed_comm_s}, {"idle_s", g.idle_s}});
  }
  double mean = 0, worst = 0;
  for (double e : errs) mean += e / errs.size(), worst = std::max(worst, e);
  out += fmt::format("\nMean absolute error {:.1f}%, worst {:.1f}% over {} configuration(s). "
                     "Error = (predicted - measured) / measured; {}.\n",
                     mean * 100, worst * 100, errs.size(), measured_note);
  const double spread = lo > 0 ? hi / lo - 1 : 0;
  if (spread > 0)
    out += fmt::format("Repeatability: regular, dp, ddp and mp on one device (the same arithmetic) measured {:.4g} to {:.4g} ms, "
                       "{:.1f}% apart; errors of that size are within the measurement's own spread.\n",
                       lo * 1e3, hi * 1e3, spread * 100);
  out += tail;
  std::fputs(out.c_str(), stdout);
  if (f.has("out")) {
    const std::string prefix = f.str("out");
    make_dirs(std::filesystem::path(prefix).parent_path().string());
    json doc = {{"parbench_validation", 1}};
    doc.update(json_extra);
    doc.update({{"mean_abs_error", mean}, {"worst_abs_error", worst}, {"one_device_spread", spread}, {"rows", rows}});
    write_file_atomic(prefix + ".md", out);
    write_file_atomic(prefix + ".json", doc.dump(2) + "\n");
    fmt::print(stderr, "parbench project: wrote {0}.md, {0}.json\n", prefix);
  }
}

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

int validate(const Flags& f, const pj::Machine& m, std::vector<pj::Profile> profiles) {
  namespace ctx = reports::schema::context;
  const reports::RunFile run = reports::load_run_json(f.str("validate"));
  const std::string scaling = run.context_value(ctx::scaling.name, "weak");
  context_int(run, ctx::batch);  // a run that did not record its batch is not one we can read
  // Context values as numbers; a malformed one is bad input naming the key.
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
  const int fixed_micro = micro_ctx.rfind("min(", 0) == 0 ? 0 : count(ctx::micro_batches, "");
  const double bucket_mb = number(ctx::bucket_mb, "25");
  const std::string threads_ctx = run.context_value(ctx::threads_per_worker.name, "auto");
  const int fixed_threads = threads_ctx == "auto" ? 0 : count(ctx::threads_per_worker, "");
  const int world = count(ctx::world_size, "1");
  const int cores = count(ctx::cpu_threads, "0");
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
    return cpu_threads_for(m, devices, fixed_threads);
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
  // Layers are timed alone (or as slices) only when this command times the workload itself.
  std::optional<NetPlan> timed_plan;
  std::map<std::tuple<int, int, int, bool>, pj::Profile> layerwise_profiles;  // (slices, threads, concurrent, tp) -> layer by layer
  std::map<std::tuple<int, int, int>, pj::Profile> stagewise_profiles;  // (stages, threads, concurrent) -> stage by stage
  const int reps = static_cast<int>(f.integer("profile-reps")), rounds = static_cast<int>(f.integer("profile-rounds"));
  // --save-profile: PREFIX-<what>threadsT-workersK.json
  auto save_profile = [&](const std::string& what, const pj::Profile& p, int threads, int concurrent) {
    if (!f.has("save-profile")) return;
    const std::string file = fmt::format("{}-{}threads{}-workers{}.json", f.str("save-profile"), what, threads, concurrent);
    write_file_atomic(file, pj::profile_json(p).dump(1) + "\n");
    fmt::print(stderr, "parbench project: wrote {}\n", file);
  };
  if (f.has("load-profile")) {
    // The files --save-profile wrote: the run predicted again from the same profiles (a model
    // changed since, say) without timing anything.
    const std::filesystem::path prefix(f.str("load-profile"));
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
      else if (mt[1] == "stages") stagewise_profiles.emplace(std::make_tuple(n, t, k), std::move(p));
      else layerwise_profiles.emplace(std::make_tuple(n, t, k, mt[1] == "tp"), std::move(p));
    }
    if (profiles.empty())
      throw UsageError(fmt::format("--load-profile {}: no {}-threadsT-workersK.json in {} (files that --save-profile writes)",
                                   f.str("load-profile"), base, dir.string()));
  }
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
      for (int64_t c : chunk_sizes(x.global, x.devices)) v.push_back(c);
      for (int64_t c : chunk_sizes(x.global, micro_of(x.global))) v.push_back(c);
      if (const auto h = pj::hybrid_shape(x.strategy))  // each replica's chunk in micro-batches
        for (int64_t r : chunk_sizes(x.global, h->first))
          for (int64_t c : chunk_sizes(r, micro_of(x.global))) v.push_back(c);
      if (const auto h = pj::dptp_shape(x.strategy))  // each replica's chunk, whole
        for (int64_t r : chunk_sizes(x.global, h->first)) v.push_back(r);
      v.push_back(x.global);
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
          for (int k : together[t]) timed[{k, b}].push_back(engine_profile(plan, net.name, {b}, t, reps, k));
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
  std::string out = fmt::format(
      "## Validation: {} against {} (projected on {})\n\n"
      "| configuration | threads/worker | measured ms | predicted ms | error | compute ms | exposed comm ms | idle ms |\n"
      "|---|--:|--:|--:|--:|--:|--:|--:|\n",
      run.source, m.source, m.name);
  struct Row {
    const Measured* x;
    int threads;
    pj::Prediction r;
  };
  std::vector<Row> got;
  for (const Measured& x : meas) {
    pj::Config c;
    c.strategy = x.strategy;
    c.devices = x.devices;
    c.global_batch = x.global;
    c.micro_batches = micro_of(x.global);
    c.bucket_bytes = bucket_mb * kMiB;
    const int t = threads_of(x.devices);
    pj::Options o;
    o.threads_per_worker = t;
    o.busy_seconds = busy_curve(profiles, t);
    const pj::Profile& base = profile_for(profiles, t, concurrent_of(x.devices));
    // tp (and dp x tp) runs every layer as its own slice; fsdp and zero2 every layer with its ReLU
    // as its own Sequential: activations leave the library's blocked layout between layers, which
    // the profile's one Sequential avoids. Those are timed layer by layer (tp: worker 0's slices).
    const auto dptp = pj::dptp_shape(x.strategy);
    const bool layerwise = x.strategy == "tp" || dptp || x.strategy == "fsdp" || x.strategy == "zero2";
    const int slices = x.strategy == "tp" ? x.devices : dptp ? dptp->second : 1;
    const bool tp = x.strategy == "tp" || dptp;
    const std::tuple<int, int, int, bool> key{slices, t, base.concurrent, tp};
    if (layerwise && timed_plan && !layerwise_profiles.count(key)) {
      fmt::print(stderr, "parbench project: timing layer by layer ({} channel slice(s){}, {} worker(s) at once)\n", slices,
                 tp ? ", ReLUs and layout copies as tp runs them" : "", base.concurrent);
      const pj::Profile& lp = layerwise_profiles.emplace(key, layerwise_profile(base, *timed_plan, slices, reps, rounds, tp)).first->second;
      save_profile(fmt::format("{}{}-", tp ? "tp" : "layers", slices), lp, t, base.concurrent);
    }
    const auto lw_it = layerwise_profiles.find(key);
    // mp, pipeline and dp x pp run each stage as its own Sequential: timed stage by stage.
    const auto dppp = pj::hybrid_shape(x.strategy);
    const bool staged = x.strategy == "mp" || x.strategy.rfind("pipeline", 0) == 0 || dppp;
    const int stages = dppp ? dppp->second : x.devices;
    const std::tuple<int, int, int> skey{stages, t, base.concurrent};
    if (staged && stages > 1 && timed_plan && !stagewise_profiles.count(skey)) {
      std::vector<std::pair<int, int>> ranges;
      try {
        ranges = split_stages(*timed_plan, stages, {}, x.strategy);
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
    got.push_back({&x, t, pj::predict(use, m, c, o)});
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
  report_validation(f, out, checked, "measured = the run's median ms/iteration", tail,
                    {{"run", run.source}, {"machine", m.source}, {"anchor_scale", scale}});
  return 0;
}

// --combine: several validations, each a run and the profile timed right after it, pooled. A
// machine whose speed wanders touches each round's run and profile alike; pooling averages the
// wandering out of both. Each round is a pair, and the error is the median of the pairs':
// predicted = measured x the median over the rounds of predicted / measured, measured = the median
// of the rounds' measured times. A round whose run and profile fell in different speed states of
// the machine (seconds to minutes long) is off either way, and the median leaves it out, where
// pooling runs and profiles apart would set one spell's run against another's profile.
int combine(const Flags& f) {
  const std::vector<std::string> paths = split_list(f.str("combine"));
  if (paths.size() < 2) throw UsageError(fmt::format("--combine expects two or more validation JSON files (written by --validate --out), got '{}'", f.str("combine")));
  std::vector<pj::Validation> vs;
  for (const std::string& p : paths) vs.push_back(pj::load_validation(p));
  std::vector<std::string> order;
  std::map<std::string, std::vector<const pj::ValidationRow*>> by_name;
  for (const pj::Validation& v : vs) {
    std::set<std::string> seen;
    for (const pj::ValidationRow& r : v.rows) {
      if (!seen.insert(r.name).second) throw UsageError(fmt::format("{}: configuration \"{}\" appears twice", v.source, r.name));
      if (by_name[r.name].empty()) order.push_back(r.name);
      by_name[r.name].push_back(&r);
    }
  }
  std::vector<Checked> checked;
  std::vector<std::string> partial;
  for (const std::string& name : order) {
    const auto& rs = by_name.at(name);
    if (rs.size() < vs.size()) partial.push_back(fmt::format("{} ({} of {})", name, rs.size(), vs.size()));
    Checked k;
    k.name = name;
    k.threads = rs.front()->threads;
    std::vector<double> measured;
    for (const pj::ValidationRow* r : rs) {
      k.times.insert(k.times.end(), r->measured_times_s.begin(), r->measured_times_s.end());
      measured.push_back(r->measured_s);
    }
    k.measured_s = reports::median(measured);
    // The pooled measured time x the median over the rounds of each one's `part` / measured.
    auto paired = [&](double pj::ValidationRow::*part) {
      std::vector<double> ratio;
      for (const pj::ValidationRow* r : rs) ratio.push_back(r->*part / r->measured_s);
      return k.measured_s * reports::median(std::move(ratio));
    };
    k.predicted_s = paired(&pj::ValidationRow::predicted_s);
    k.compute_s = paired(&pj::ValidationRow::compute_s);
    k.exposed_comm_s = paired(&pj::ValidationRow::exposed_comm_s);
    k.idle_s = paired(&pj::ValidationRow::idle_s);
    checked.push_back(std::move(k));
  }
  std::string out = fmt::format(
      "## Validation pooled from {} rounds (each a run and the profile timed right after it)\n\n{}\n\n"
      "| configuration | threads/worker | measured ms | predicted ms | error | compute ms | exposed comm ms | idle ms |\n"
      "|---|--:|--:|--:|--:|--:|--:|--:|\n",
      vs.size(), fmt::join(paths, ", "));
  const std::string tail =
      partial.empty() ? "" : fmt::format("Not in every round (pooled from those it is in): {}.\n", fmt::join(partial, "; "));
  report_validation(f, out, checked,
                    "measured = the median of the rounds' measured times, predicted = measured x the median of the "
                    "rounds' predicted / measured (each round a run and the profile timed beside it; parts likewise)",
                    tail, {{"combined", paths}, {"rounds", vs.size()}});
  return 0;
}

}  // namespace

int cmd_project(const std::vector<std::string>& args) {
  Flags f("parbench project",
          "Projects every strategy to device counts and machines you do not have, from a per-layer profile\n"
          "(profile.json) and a machine description (machines/*.json): per strategy and device count the\n"
          "step time and its parts (compute, exposed communication, idle/bubble), peak memory per device and\n"
          "whether it fits, throughput and scaling efficiency, weak and strong scaling, and the best strategy\n"
          "per device count. Every figure is a projection, marked as such. Model: docs/projection.md.\n"
          "--validate RUN/results.json predicts a measured run's configurations instead and prints predicted\n"
          "against measured with the mean and worst absolute error (without --profile it times the run's\n"
          "workload here, layer by layer). --combine pools several such validations, each a run measured\n"
          "and validated in turn, so that a machine whose speed wanders touches runs and profiles alike.\n"
          "usage: parbench project --profile P.json --machine M.json [flags]\n"
          "       parbench project --validate RUN/results.json --machine M.json [--profile P.json]\n"
          "       parbench project --combine V1.json,V2.json,...",
          {
              {"profile", "FILE[,FILE]", "profile.json file(s); several: one per CPU thread count", ""},
              {"machine", "FILE", "machine description (machines/*.json)", ""},
              {"from-machine", "FILE", "the machine the profile was measured on: compute times scale by its peak FLOP/s over --machine's (this or --from-profile-peak is needed when the profile's device kind is not --machine's)", ""},
              {"scale-image", "FROM:TO", "project the net at TO-pixel images from a profile at FROM (times x (TO/FROM)^2; conv nets)", ""},
              {"from-profile-peak", "FRACTION", "scale compute times so that the profile's fastest layer runs at FRACTION of --machine's peak (a profile from another device)", ""},
              {"devices", "LIST", "device counts (default: 1,2,4,8,64,1024 up to the machine's devices)", ""},
              {"batch", "LIST", "batch per device (weak scaling) or global batch (strong scaling); several: a table each", "1"},
              {"scaling", "MODE", "weak, strong or both", "both"},
              {"strategies", "LIST", "strategies to project, or all (regular,dp,ddp,mp,pipeline,fsdp,zero2,tp,dpxpp,dpxtp; dpxpp / dpxtp: every dp<D>xpp<P> / dp<D>xtp<T> with D x P = N, both >= 2; or one such name)", "all"},
              {"micro-batches", "LIST", "pipeline and dp<D>xpp<P> (per replica) micro-batch counts (those above the batch are left out)", "2,4,8,16"},
              {"schedules", "LIST", "pipeline schedules: gpipe, 1f1b", "gpipe,1f1b"},
              {"bucket-mb", "LIST", "ddp bucket sizes in MiB", "1,25"},
              {"recompute", "", "also the pipeline variants that recompute stage activations in backward", ""},
              {"threads", "N", "CPU threads per worker (0: the cores shared among the workers, as run does)", "0"},
              {"format", "FMT", "what to print: markdown or json", "markdown"},
              {"out", "PREFIX", "write PREFIX.md, PREFIX.json and PREFIX.png (chart)", ""},
              {"validate", "RUN.json", "a run's results.json: predict its configurations and print the errors", ""},
              {"save-profile", "PREFIX", "--validate without --profile: also write the timed profiles to PREFIX-threadsT-workersK.json (pipelines' stage by stage: PREFIX-stagesS-threadsT-workersK.json; fsdp's and zero2's layer by layer: PREFIX-layers1-threadsT-workersK.json; tp's and dp x tp's with N channel slices: PREFIX-tpN-threadsT-workersK.json)", ""},
              {"load-profile", "PREFIX", "--validate: the profiles an earlier --save-profile PREFIX wrote, instead of timing them (a measurement predicted again)", ""},
              {"combine", "V1,V2,...", "pool validations written by --validate --out (each a run and its profile, timed in turn): measured = the median of their measured times, predicted = measured x the median of their predicted / measured", ""},
              {"anchor", "", "--validate: scale every prediction by the one-device regular run's measured over predicted time (the machine's speed drifting between the run and the profile) and leave that row out of the errors", ""},
              {"profile-reps", "N", "--validate without --profile: timed repetitions per batch size (median; with workers side by side their mean, at the slowest one's pace)", "3"},
              {"profile-rounds", "N", "--validate without --profile: time everything N times in turn and take each layer's median", "3"},
          });
  if (!f.parse(args)) return 0;
  if (!f.positional().empty()) throw UsageError(fmt::format("unexpected argument '{}'", f.positional()[0]));
  if (f.has("combine")) {
    for (const char* other : {"validate", "profile", "machine", "anchor"})
      if (f.has(other)) throw UsageError(fmt::format("--combine pools validation files already written; --{} does not apply", other));
    return combine(f);
  }
  if (!f.has("machine")) throw UsageError("--machine FILE is required (machines/*.json, or one written by parbench calibrate)");
  const pj::Machine m = pj::load_machine(f.str("machine"));
  std::vector<pj::Profile> profiles;
  for (const std::string& path : split_list(f.str("profile"))) profiles.push_back(pj::load_profile(path));
  if (f.integer("profile-reps") < 1) throw UsageError("--profile-reps must be at least 1");
  if (f.integer("profile-rounds") < 1) throw UsageError("--profile-rounds must be at least 1");
  if (f.has("load-profile")) {
    if (!f.has("validate")) throw UsageError("--load-profile goes with --validate (the profiles a validation saved)");
    for (const char* other : {"profile", "save-profile"})
      if (f.has(other)) throw UsageError(fmt::format("--load-profile reads the profiles to use; --{} does not apply", other));
  }
  if (f.has("validate")) return validate(f, m, profiles);
  if (profiles.empty()) throw UsageError("--profile FILE is required (a profile.json; see parbench project --help)");
  std::string image_note;
  if (f.has("scale-image")) {
    long from = 0, to = 0;
    char tail = 0;
    if (std::sscanf(f.str("scale-image").c_str(), "%ld:%ld%c", &from, &to, &tail) != 2 || from < 1 || to < 1)
      throw UsageError(fmt::format("--scale-image expects FROM:TO, two image sizes in pixels, got '{}'", f.str("scale-image")));
    for (pj::Profile& p : profiles) p = pj::scale_image(p, from, to);
    image_note = fmt::format(" Layer times scaled from {0}x{0} to {1}x{1} images (x{2:g}, proportional to pixels).", from, to,
                             static_cast<double>(to) * to / (static_cast<double>(from) * from));
  }

  pj::Options o;
  o.threads_per_worker = static_cast<int>(f.integer("threads"));
  if (o.threads_per_worker < 0) throw UsageError("--threads must be >= 0");
  std::string scale_note, scaled, unscaled;
  if (f.has("from-machine") && f.has("from-profile-peak"))
    throw UsageError("--from-machine and --from-profile-peak both scale compute times: give one");
  if (f.has("from-machine")) {
    const pj::Machine from = pj::load_machine(f.str("from-machine"));
    o.compute_scale = from.peak_flops / m.peak_flops;
    scale_note = fmt::format("Compute times scaled from {} ({:.3g} TFLOP/s) to {} ({:.3g} TFLOP/s): x{:.3g}.", from.name,
                             from.peak_flops / 1e12, m.name, m.peak_flops / 1e12, o.compute_scale);
    scaled = fmt::format("compute x{:.3g} from {} (--from-machine)", o.compute_scale, from.name);
  } else if (f.has("from-profile-peak")) {
    const double frac = f.number("from-profile-peak");
    if (!(frac > 0 && frac <= 1)) throw UsageError(fmt::format("--from-profile-peak expects a fraction in (0, 1], got {}", frac));
    const double best = profiles.front().best_forward_flops_per_s();
    if (!(best > 0)) throw UsageError(fmt::format("--from-profile-peak: {} has no layer with FLOPs and time", profiles.front().source));
    o.compute_scale = best / (frac * m.peak_flops);
    scale_note = fmt::format("Compute times scaled so that the profile's fastest layer ({:.3g} GFLOP/s forward on {}) runs at {:g}% of "
                             "{}'s peak ({:.3g} TFLOP/s); every other layer keeps its speed relative to it: x{:.3g}.",
                             best / 1e9, profiles.front().device_kind.empty() ? "its device" : profiles.front().device_kind,
                             frac * 100, m.name, m.peak_flops / 1e12, o.compute_scale);
    scaled = fmt::format("compute x{:.3g}, fastest layer at {:g}% of peak (--from-profile-peak)", o.compute_scale, frac * 100);
  } else if (const std::string& pk = profiles.front().device_kind; pk.substr(0, pk.find(':')) != m.kind) {
    // Times measured on one kind of device say nothing of another's speed: unscaled, a CPU
    // profile "on H200" runs at the CPU's pace. Refused once the other flags are checked.
    unscaled = fmt::format(
        "--profile {} was measured on {} and --machine {} describes {} devices: give --from-machine FILE (the machine "
        "the profile was measured on) or --from-profile-peak FRACTION to scale its compute times",
        profiles.front().source, profiles.front().device_kind.empty() ? "a device it does not record" : profiles.front().device_kind,
        m.source, m.kind);
  } else {
    scaled = fmt::format("compute at the profile's measured {} speed", m.kind);
  }
  const std::vector<int64_t> batches = int_items("batch", f.str("batch"), 1);
  if (batches.empty()) throw UsageError("--batch needs at least one batch size");
  std::vector<int64_t> devices;
  if (f.has("devices")) {
    devices = int_items("devices", f.str("devices"), 1);
  } else {
    for (int64_t d : {1, 2, 4, 8, 64, 1024})
      if (d <= m.total_devices()) devices.push_back(d);
    if (devices.back() != m.total_devices()) devices.push_back(m.total_devices());
  }
  std::vector<std::string> strategies = f.str("strategies") == "all" ? kModelled : split_list(f.str("strategies"));
  for (const std::string& s : strategies)
    if (std::find(kModelled.begin(), kModelled.end(), s) == kModelled.end() && !pj::hybrid_shape(s) && !pj::dptp_shape(s))
      throw UsageError(fmt::format("--strategies: no projection model for '{}': expected all or some of {}", s,
                                   fmt::join(kModelled, ", ")));
  const std::vector<int64_t> micro = int_items("micro-batches", f.str("micro-batches"), 1);
  std::vector<std::string> schedules = split_list(f.str("schedules"));
  for (const std::string& s : schedules)
    if (s != "gpipe" && s != "1f1b") throw UsageError(fmt::format("--schedules: expected gpipe and/or 1f1b, got '{}'", s));
  std::vector<double> buckets;
  for (const std::string& s : split_list(f.str("bucket-mb"))) {
    double v = 0;
    try {
      v = std::stod(s);
    } catch (const std::exception&) {
      v = -1;
    }
    if (!(v > 0) || !std::isfinite(v)) throw UsageError(fmt::format("--bucket-mb expects sizes in MiB > 0, got '{}'", s));
    buckets.push_back(v * kMiB);
  }
  const std::string scaling = f.str("scaling");
  if (scaling != "weak" && scaling != "strong" && scaling != "both")
    throw UsageError(fmt::format("--scaling expects weak, strong or both, got '{}'", scaling));
  const std::string format = f.str("format");
  if (format != "markdown" && format != "json") throw UsageError(fmt::format("--format expects markdown or json, got '{}'", format));
  if (!unscaled.empty()) throw UsageError(unscaled);

  std::vector<Projected> all;
  std::map<std::string, int> made;  // configurations per --strategies entry
  for (const int64_t batch : batches) {
    for (const std::string& mode : {std::string("weak"), std::string("strong")}) {
      if (scaling != "both" && scaling != mode) continue;
      Projected pr;
      pr.scaling = mode;
      pr.batch = batch;
      for (int64_t d : devices) {
        const int64_t global = mode == "weak" ? batch * d : batch;
        for (const std::string& s : strategies)
          for (const pj::Config& c : configs_at(static_cast<int>(d), global, {s}, micro, schedules, buckets, f.on("recompute"))) {
            const int t = cpu_threads_for(m, c.devices, o.threads_per_worker);
            pj::Options oc = o;
            oc.threads_per_worker = t;
            pr.rows.push_back(pj::predict(profile_for(profiles, m.shared_cores > 0 ? t : profiles.front().threads), m, c, oc));
            ++made[s];
          }
      }
      all.push_back(std::move(pr));
    }
  }
  // A strategy asked for by name that no device count or batch can run: say why, not an empty table.
  if (f.str("strategies") != "all")
    for (const std::string& s : strategies)
      if (!made[s]) throw UsageError(no_configuration(s, devices, f.str("micro-batches")));
  const pj::Profile& p0 = profiles.front();
  reports::Report full, chart;
  full.sources = chart.sources = {p0.source, m.source};
  for (const Projected& pr : all) {
    full.groups.push_back(pj::as_report_group(pr, p0, m, false, scaled));
    chart.groups.push_back(pj::as_report_group(pr, p0, m, true, scaled));
  }
  std::string md = fmt::format("# Projected, not measured: {} on {}\n\nProfile {} ({}); machine {}{}. {}\n\n", p0.context.value("workload", std::string("profile")),
                               m.name, p0.source, p0.device_kind.empty() ? "device not recorded" : p0.device_kind, m.source,
                               m.description.empty() ? "" : " (" + m.description + ")", scale_note + image_note);
  md += pj::projected_markdown(full);
  for (const Projected& pr : all) md += pj::parts_markdown(pr, m);
  md += pj::best_markdown(all);
  json doc = {{"parbench_projection", 1}, {"projected", true}, {"profile", p0.source}, {"machine", pj::machine_json(m)},
              {"compute_scale", o.compute_scale}, {"groups", json::array()}};
  for (const Projected& pr : all) {
    json g = {{"scaling", pr.scaling}, {"batch", pr.batch}, {"rows", json::array()}};
    for (const pj::Prediction& r : pr.rows) g["rows"].push_back(pj::prediction_json(r));
    doc["groups"].push_back(g);
  }
  doc["report"] = json::parse(reports::report_json(full));
  std::fputs((format == "json" ? doc.dump(2) + "\n" : md).c_str(), stdout);
  std::fflush(stdout);
  if (f.has("out")) {
    const std::string prefix = f.str("out");
    make_dirs(std::filesystem::path(prefix).parent_path().string());
    write_file_atomic(prefix + ".md", md);
    write_file_atomic(prefix + ".json", doc.dump(2) + "\n");
    const std::string chart_json =
        (std::filesystem::temp_directory_path() / fmt::format("parbench-project-{}.json", ::getpid())).string();
    write_file_atomic(chart_json, reports::report_json(chart));
    const bool png = render_chart(chart_json, prefix + ".png");
    std::remove(chart_json.c_str());
    fmt::print(stderr, "parbench project: wrote {0}.md, {0}.json{1}\n", prefix, png ? fmt::format(", {}.png", prefix) : "");
  }
  return 0;
}

}  // namespace pb
