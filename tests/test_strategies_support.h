// What the strategy tests share (tests/test_strategies_*.cpp): training a net with a strategy from
// seeded parameters, regular's cached reference, the match check and the workloads.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "tests/paths.h"
#include "engine/check.h"
#include "engine/fsutil.h"
#include "strategies/batch.h"
#include "strategies/group.h"
#include "strategies/registry.h"
#include "strategies/stages.h"
#include "tests/reference.h"
#include "workloads/workload.h"

namespace pb::strategies_test {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

struct Trained {
  std::vector<double> losses;
  std::vector<float> params;
  StepStats stats;  // after the last step
  std::vector<StepStats> per_batch;
};

inline StrategyOptions options(int devices) {
  StrategyOptions o;
  o.devices = devices;
  o.backend.threads = 1;  // the test machine's cores are shared by all workers
  return o;
}

// Trains `net` from seeded parameters on the batches given (sizes, in order over one seeded data
// set), `steps` steps per batch.
inline Trained train(const std::string& strategy, const StrategyOptions& o, const NetSpec& net,
                 const std::vector<int64_t>& batches, int steps = 5) {
  const NetPlan plan = plan_net(net);
  int64_t total = 0;
  for (int64_t b : batches) total += b;
  const int64_t in = numel_of(plan.input), out = numel_of(plan.output);
  const std::vector<float> x = synthetic_values(total * in, 1);
  const std::vector<float> t = net.target == Target::Input ? x : synthetic_values(total * out, 2);
  auto s = make_strategy(strategy, o);
  s->setup(plan, init_params(plan, 0), net.adam);
  Trained r;
  int64_t at = 0;
  for (int64_t b : batches) {
    s->load_batch(std::vector<float>(x.begin() + at * in, x.begin() + (at + b) * in),
                  std::vector<float>(t.begin() + at * out, t.begin() + (at + b) * out), b);
    at += b;
    for (int k = 0; k < steps; ++k) {
      s->step();
      r.losses.push_back(s->loss());
    }
    r.per_batch.push_back(s->stats());
  }
  r.params = s->params();
  r.stats = s->stats();
  return r;
}

// Each strategy's peak bytes per worker after one step of a batch of 16 on `net`.
inline std::map<std::string, std::vector<std::size_t>> peaks_per_worker(const std::vector<std::string>& strategies,
                                                                        const StrategyOptions& o, const NetSpec& net) {
  std::map<std::string, std::vector<std::size_t>> peak;
  for (const std::string& s : strategies) {
    const Trained t = train(s, o, net, {16}, 1);
    for (const WorkerStats& w : t.stats.workers) peak[s].push_back(w.peak_bytes);
  }
  return peak;
}

inline const Trained& reference(const NetSpec& net, const std::vector<int64_t>& batches, int steps = 5) {
  static std::map<std::string, Trained> cache;
  std::string key = fmt::format("{} {} {} {}", net.name, net.input.back(), fmt::join(batches, ","), steps);
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, train("regular", options(1), net, batches, steps)).first;
  return it->second;
}

// Losses within rel `loss_rtol`; parameters within atol + rtol |ref|, reporting the worst element.
inline void expect_matches(const Trained& got, const Trained& ref, double loss_rtol = 1e-5, double atol = 1e-5, double rtol = 1e-4) {
  ASSERT_EQ(got.losses.size(), ref.losses.size());
  for (std::size_t k = 0; k < ref.losses.size(); ++k)
    EXPECT_NEAR(got.losses[k], ref.losses[k], loss_rtol * std::abs(ref.losses[k])) << "loss of step " << k + 1;
  ASSERT_EQ(got.params.size(), ref.params.size());
  double worst = -1;
  std::size_t at = 0;
  for (std::size_t i = 0; i < ref.params.size(); ++i) {
    const double excess = std::abs(double(got.params[i]) - ref.params[i]) - (atol + rtol * std::abs(ref.params[i]));
    if (excess > worst) worst = excess, at = i;
  }
  EXPECT_LE(worst, 0.0) << "worst parameter mismatch at [" << at << "]: " << got.params[at] << " vs "
                        << ref.params[at] << " (of " << ref.params.size() << ")";
}

// Width 0.1875 rather than 0.125: at 0.125 every ReLU of the last layer is dead from the start
// (seeded init), the gradients are zero and any strategy would "match".
inline NetSpec small_great_net() { return great_net(8, 0.1875); }

// Adam is blind to a uniform gradient scale (m / sqrt(v)); with eps far above the gradients it
// behaves like SGD (update ~ lr g / eps), so a wrong scale (a local instead of the global mean)
// shows in the parameters.
inline NetSpec scale_sensitive(NetSpec net, double lr, double eps) {
  net.name += "/sgd-like";
  net.adam.lr = lr;
  net.adam.eps = eps;
  return net;
}

inline std::vector<NetSpec> workloads() {
  return {small_great_net(), linear_net(), scale_sensitive(small_great_net(), 1.0, 1.0),
          scale_sensitive(linear_net(), 1.0, 10.0)};
}

// workloads() with Adam's eps raised to 1e-6 where it is smaller: for strategies whose gradients
// round differently from regular's (tp's slices, hsdp's two-stage sums), which plain Adam
// (eps 1e-8) amplifies on small_great_net's near-zero gradients (TpMatchesRegular says how).
inline std::vector<NetSpec> workloads_eps_1e6() {
  std::vector<NetSpec> nets = workloads();
  for (NetSpec& net : nets)
    if (net.adam.eps < 1e-6) net.adam.eps = 1e-6, net.name += "/eps:1e-6";
  return nets;
}

inline void check_equivalence(const std::string& strategy, const StrategyOptions& base, const std::vector<int64_t>& batches,
                              bool linear_too = true) {
  for (const NetSpec& net : workloads()) {
    const int layers = static_cast<int>(net.layers.size());
    if (layers == 1 && !linear_too) continue;
    for (int n = 1; n <= 4; ++n) {
      if ((strategy == "mp" || strategy.rfind("pipeline", 0) == 0) && n > layers) continue;  // a stage per layer at most
      StrategyOptions o = base;
      o.devices = n;
      SCOPED_TRACE(fmt::format("{} on {} workers, {}, batches {}", strategy, n, net.name, fmt::join(batches, ",")));
      expect_matches(train(strategy, o, net, batches), reference(net, batches));
    }
  }
}

}  // namespace pb::strategies_test
