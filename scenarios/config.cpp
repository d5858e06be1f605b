// A configuration as a run would take it (scenarios/config.h): its options, its name and its plan.
#include "scenarios/config.h"

#include <algorithm>

#include <fmt/format.h>

#include "engine/check.h"
#include "projection/plan_price.h"
#include "strategies/plan_gen.h"
#include "strategies/registry.h"
#include "workloads/workload.h"

namespace pb::projection {

std::string Config::label() const {
  if (plan) return fmt::format("{} (plan file, M={})", strategy, micro_batches);
  return setting_label(setting_of(*this));
}

std::vector<std::string> Config::options() const { return setting_options(setting_of(*this)); }

Setting setting_of(const Config& c) {
  Setting s;
  s.strategy = c.strategy;
  s.micro_batches = c.micro_batches;
  parse_schedule(c.schedule, &s.schedule);
  s.recompute = c.recompute;
  s.bucket_bytes = c.bucket_bytes;
  return s;
}

std::string run_name(const Config& c) { return pb::run_name(setting_of(c)); }

StrategyOptions options_of(const Config& c, const Profile* p) {
  StrategyOptions o;
  o.devices = c.devices;
  o.micro_batches = c.micro_batches;
  o.cap_micro_batches = c.cap_micro_batches;
  o.bucket_bytes = static_cast<std::size_t>(c.bucket_bytes);
  o.first_bucket_bytes = static_cast<std::size_t>(c.first_bucket_bytes);
  o.balance = c.balance;
  o.profile_batch = c.global_batch;
  o.schedule = Schedule::GPipe;
  parse_schedule(c.schedule, &o.schedule);
  o.recompute = c.recompute;
  o.virtual_stages = c.virtual_stages;
  if (takes_reduce_dtype(c.strategy)) o.reduce_dtype = parse_dtype_label(c.reduce_dtype, "--reduce-dtype");
  if (takes_param_dtype(c.strategy)) o.param_dtype = parse_dtype_label(c.param_dtype, "--param-dtype");
  if (p && p->precision != "bf16") o.param_dtype = DType::F32;  // fp32 compute gathers fp32 (project refuses the flag)
  if (p) o.backend.precision = parse_precision(p->precision);  // bf16: activations travel in bf16, as run's
  using By = StrategyOptions::BalanceBy;
  if (c.balance_by == "time" && p) {
    o.balance_by = By::Time;
    o.layer_seconds = [p](int64_t n) {  // as the run times them: forward + both backwards
      std::vector<double> s;
      for (int i = 0; i < static_cast<int>(p->layers.size()); ++i)
        s.push_back(p->forward(i, n) + p->backward_data(i, n) + p->backward_weights(i, n));
      return s;
    };
  } else if (c.balance_by == "seed") {
    o.balance_by = By::Seed;
    o.seed_first_stage = kGreatNetSeedFirstStage;
  } else if (c.balance_by != "flops" && c.balance_by != "time") {
    throw UsageError(fmt::format("balance '{}': expected flops, time or seed", c.balance_by));
  }
  return o;
}

Plan plan_for(const Profile& p, const Config& c) {
  if (c.plan) return *c.plan;
  return make_plan(run_name(c), net_of(p), options_of(c, &p), c.global_batch);
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

}  // namespace pb::projection
