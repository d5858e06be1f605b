// The profiles `project --validate` times when no --profile is given: `parbench profile`'s own
// timing (engine/layer_profile.h) at each batch size, the medians of rounds of it, and the profiles
// of layers and stages timed apart as tp, fsdp and the pipelines run them.
#include "bench/project.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <map>
#include <memory>
#include <mutex>

#include "engine/check.h"
#include "engine/layer_profile.h"
#include "engine/spin_wait.h"
#include "reports/stats.h"
#include "strategies/pool.h"

namespace pb {

using nlohmann::json;

projection::Profile engine_profile(const NetPlan& plan, const std::string& workload, std::vector<int64_t> batches,
                                   int threads, int reps, int concurrent, Precision precision) {
  std::sort(batches.begin(), batches.end());
  batches.erase(std::unique(batches.begin(), batches.end()), batches.end());
  PB_CHECK(!batches.empty() && batches.front() >= 1, "profile: no batch sizes");
  PB_CHECK(concurrent >= 1, "profile: concurrent workers must be >= 1");
  projection::Profile p;
  p.batches = batches;
  p.threads = threads;
  p.device_kind = "cpu";
  p.precision = precision_name(precision);
  p.context = {{"workload", workload}, {"device_kind", "cpu"}, {"threads", threads}, {"precision", p.precision},
               {"concurrent_workers", concurrent},
               {"source", "per-layer timing of parbench profile, run by parbench project"}};
  p.concurrent = concurrent;
  for (const LayerPlan& l : plan.layers) {
    projection::LayerProfile lp;
    lp.index = l.index;
    lp.type = layer_type_name(l.spec.type);
    lp.in = l.in;
    lp.out = l.out;
    lp.params = l.weight_numel + l.bias_numel;
    lp.forward_flops = l.forward_flops;
    lp.activation_bytes_per_sample = static_cast<double>(numel_of(l.out)) * sizeof(float);
    p.layers.push_back(std::move(lp));
  }
  std::vector<double> adam;
  // `concurrent` workers, each with its own backend and `threads` threads, time the same layers
  // at once, as that many workers of a step compute side by side; each time is their mean (with
  // more than one, of the means over the repetitions) at the slowest one's pace (at_slowest_pace).
  // A barrier before every timed layer call keeps them on the same layer at the same time, as a
  // data-parallel step's workers are: two heavy convolutions on cores that share vector units slow
  // each other more than a convolution beside a ReLU does. They run on a WorkerPool, one-thread
  // workers bound to cores as a step's are (strategies/group.cpp).
  std::vector<std::vector<NetProfile>> got(static_cast<std::size_t>(concurrent));
  std::vector<std::exception_ptr> err(static_cast<std::size_t>(concurrent));
  // It polls before it sleeps, as a step's workers meet (engine/spin_wait.h): a thread woken from
  // sleep at every layer timed its microsecond layers 2-10x slower than one that polled.
  std::mutex mu;
  SpinCondition cv;
  int waiting = 0;
  int64_t generation = 0;
  bool broken = false;  // a worker failed: nobody waits for it
  auto barrier = [&] {
    auto lk = hold_polling(mu);
    if (broken) return;
    if (++waiting == concurrent) {
      waiting = 0, ++generation;
      cv.notify_all();
      return;
    }
    const int64_t g = generation;
    cv.wait(lk, [&] { return generation != g || broken; });
  };
  auto work = [&](int w) {
    std::unique_ptr<Backend> be;
    try {
      BackendOptions bo;
      bo.threads = threads;
      bo.precision = precision;
      be = make_backend(cpu(0), bo);
      barrier();
      ProfileOptions po{0, 1, reps, 0, concurrent > 1};
      if (concurrent > 1) po.sync = barrier;
      po.workspace = concurrent == 1;  // workers side by side share the CPU's workspace count
      for (int64_t b : batches) {
        po.batch = b;
        got[static_cast<std::size_t>(w)].push_back(profile_net(plan, *be, po));
      }
    } catch (...) {
      err[static_cast<std::size_t>(w)] = std::current_exception();
      const auto lk = hold_polling(mu);
      broken = true;
      cv.notify_all();
    }
  };
  WorkerPool(concurrent, WorkerPool::cores_for(concurrent, threads)).run(concurrent, work);
  for (const std::exception_ptr& e : err)
    if (e) std::rethrow_exception(e);
  std::vector<double> slowest;
  for (std::size_t j = 0; j < batches.size(); ++j) {
    std::vector<NetProfile> at_j;
    for (const auto& g : got) at_j.push_back(g[j]);
    double s = 1;
    const NetProfile one = at_slowest_pace(at_j, &s);
    slowest.push_back(s);
    for (std::size_t i = 0; i < p.layers.size(); ++i) {
      p.layers[i].forward_s.push_back(one.layers[i].forward_s);
      p.layers[i].backward_data_s.push_back(one.layers[i].backward_data_s);
      p.layers[i].backward_weights_s.push_back(one.layers[i].backward_weights_s);
    }
    p.loss_s.push_back(one.loss_s);
    adam.push_back(one.optimizer_s);
  }
  p.context["slowest_worker_factor"] = slowest;
  std::sort(adam.begin(), adam.end());
  p.optimizer_s_per_param = adam[adam.size() / 2] / static_cast<double>(std::max<int64_t>(plan.param_count, 1));
  return p;
}

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

namespace {

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

}  // namespace

// `more`'s one batch (above `p`'s) added to p; Adam's time per parameter: their mean.
void append_batch(projection::Profile& p, const projection::Profile& more) {
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
projection::Profile median_of(const std::vector<projection::Profile>& v) {
  PB_CHECK(!v.empty(), "profile: nothing timed");
  auto med = [&](auto get) {
    std::vector<double> x;
    for (const projection::Profile& p : v) x.push_back(get(p));
    return reports::median(std::move(x));
  };
  projection::Profile out = v.front();
  for (std::size_t l = 0; l < out.layers.size(); ++l)
    for (std::size_t b = 0; b < out.batches.size(); ++b) {
      out.layers[l].forward_s[b] = med([&](const projection::Profile& p) { return p.layers[l].forward_s[b]; });
      out.layers[l].backward_data_s[b] = med([&](const projection::Profile& p) { return p.layers[l].backward_data_s[b]; });
      out.layers[l].backward_weights_s[b] = med([&](const projection::Profile& p) { return p.layers[l].backward_weights_s[b]; });
    }
  for (std::size_t b = 0; b < out.batches.size(); ++b) out.loss_s[b] = med([&](const projection::Profile& p) { return p.loss_s[b]; });
  out.optimizer_s_per_param = med([](const projection::Profile& p) { return p.optimizer_s_per_param; });
  out.context["rounds"] = v.size();
  auto factor = [](const projection::Profile& p, std::size_t b) {  // at_slowest_pace's, 1 where not recorded
    const json f = p.context.value("slowest_worker_factor", json::array());
    return b < f.size() && f[b].is_number() ? f[b].get<double>() : 1.0;
  };
  if (out.context.contains("slowest_worker_factor")) {
    json f = json::array();
    for (std::size_t b = 0; b < out.batches.size(); ++b) f.push_back(med([&](const projection::Profile& p) { return factor(p, b); }));
    out.context["slowest_worker_factor"] = f;
  }
  return out;
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
projection::Profile layerwise_profile(const projection::Profile& p, const NetPlan& plan, int n, int reps, int rounds, bool tp) {
  projection::Profile q = p;
  std::map<std::size_t, std::vector<projection::Profile>> timed;  // layer -> its slice net, once per round
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
      timed[i].push_back(engine_profile(plan_net(one), one.name, p.batches, p.threads, reps, p.concurrent,
                                         parse_precision(p.precision)));
      if (!tp) continue;
      copy_fwd[i].resize(p.batches.size()), copy_bwd[i].resize(p.batches.size());
      for (std::size_t b = 0; b < p.batches.size(); ++b) {
        const auto [fwd, bwd] = tp_copy_seconds(K, numel_of(l.out) / K, n, p.batches[b], reps);
        copy_fwd[i][b].push_back(fwd), copy_bwd[i][b].push_back(bwd);
      }
    }
  for (const auto& [i, v] : timed) {
    const int64_t K = plan.layers[i].out[0], k = (K + n - 1) / n;
    const projection::Profile t = median_of(v);
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
projection::Profile stagewise_profile(const projection::Profile& p, const NetPlan& plan, const std::vector<std::pair<int, int>>& ranges, int reps,
                              int rounds) {
  projection::Profile q = p;
  if (ranges.size() < 2) return q;
  std::vector<std::vector<projection::Profile>> timed(ranges.size());
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
      timed[s].push_back(engine_profile(plan_net(one), one.name, p.batches, p.threads, reps, p.concurrent,
                                         parse_precision(p.precision)));
    }
  for (std::size_t s = 0; s < ranges.size(); ++s) {
    const projection::Profile t = median_of(timed[s]);
    const int off = s > 0 ? 1 : 0;
    for (int i = ranges[s].first; i < ranges[s].second; ++i) {
      const projection::LayerProfile& from = t.layers[static_cast<std::size_t>(i - ranges[s].first + off)];
      projection::LayerProfile& to = q.layers[static_cast<std::size_t>(i)];
      to.forward_s = from.forward_s;
      to.backward_data_s = from.backward_data_s;
      to.backward_weights_s = from.backward_weights_s;
      if (i == 0) std::fill(to.backward_data_s.begin(), to.backward_data_s.end(), 0.0);
    }
  }
  q.context["stages"] = ranges.size();
  return q;
}

}  // namespace pb
