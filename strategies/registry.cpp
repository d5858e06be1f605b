// The strategies by name: adding one is a file plus one line here.
#include "strategies/registry.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include <fmt/ranges.h>

#include "engine/check.h"
#include "engine/graph_stage.h"
#include "strategies/plan_gen.h"
#include "strategies/rules.h"
#include "strategies/sweep.h"

namespace pb {

ChunkSchedule zbv_schedule(const StrategyOptions& o);  // pipeline_zbv.cpp

namespace {
using PlanFactory = std::function<Plan(const NetPlan&, const StrategyOptions&, int64_t)>;

struct Entry {
  StrategyInfo info;
  StrategyFactory make;
  PlanFactory plan;  // one step of it as data (strategies/*_plan.cpp)
  ProjectionRule projected = {};  // what project sweeps of it (strategies/sweep.h)
  Family family = {};        // a family: its members' names
};

ProjectionRule swept(ProjectionRule::Axes axes) {
  ProjectionRule p;
  p.axes = axes;
  return p;
}

// A pipeline variant: projected by its name only, its rows pipeline's with its schedule and recompute.
ProjectionRule pipeline_projected(Schedule schedule, bool recompute) {
  ProjectionRule p = swept(ProjectionRule::Axes::MicroBatches);
  p.in_all = false;
  p.variant_of = "pipeline";
  p.schedule = schedule;
  p.recompute = recompute;
  return p;
}

// A schedule of its own (no GPipe / 1F1B form): projected under its name, over micro-batch counts.
ProjectionRule own_schedule(Schedule schedule) {
  ProjectionRule p = swept(ProjectionRule::Axes::MicroBatches);
  p.schedule = schedule;
  return p;
}

// Shown among `strategy`'s rows in a table of fastest variants.
ProjectionRule shown_among(const std::string& strategy) {
  ProjectionRule p;
  p.shown_with = strategy;
  return p;
}

// Sharded strategies pay the machine's bookkeeping per unit they free, by class.
ProjectionRule units(const std::string& unit_class) {
  ProjectionRule p;
  p.unit_class = unit_class;
  return p;
}

const Family dpxpp_members = {hybrid_name, parse_hybrid_name};
const Family dptp_members = {[](int d, int t, Schedule, bool) { return dptp_name(d, t); },
                             [](const std::string& n, int* d, int* t, Schedule*, bool*) { return parse_dptp_name(n, d, t); }};
const Family hsdp_members = {[](int r, int s, Schedule, bool) { return hsdp_name(r, s); },
                             [](const std::string& n, int* r, int* s, Schedule*, bool*) { return parse_hsdp_name(n, r, s); }};

StrategyFactory pipeline_variant(Schedule schedule, bool recompute) {
  return [=](const StrategyOptions& o) {
    StrategyOptions v = o;
    v.schedule = schedule;
    v.recompute = recompute;
    return make_pipeline(v);
  };
}

PlanFactory pipeline_plan(Schedule schedule, bool recompute) {
  return [=](const NetPlan& net, const StrategyOptions& o, int64_t batch) {
    StrategyOptions v = o;
    v.schedule = schedule;
    v.recompute = recompute;
    return plan_staged(net, v, batch, pipeline_name(schedule, recompute), o.micro_batches, 1);
  };
}

// A chunked schedule's pipeline (strategies/rules.h), by the function that makes the schedule.
using ScheduleMaker = ChunkSchedule (*)(const StrategyOptions&);
StrategyFactory chunked(const char* name, ScheduleMaker sched) {
  return [=](const StrategyOptions& o) { return make_chunk_pipeline(o, name, sched(o)); };
}
PlanFactory chunked_plan(const char* name, ScheduleMaker sched) {
  return [=](const NetPlan& n, const StrategyOptions& o, int64_t b) { return plan_chunk_pipeline(n, o, b, name, sched(o)); };
}

Plan mp_plan(const NetPlan& net, const StrategyOptions& o, int64_t batch) {
  StrategyOptions one = o;  // as make_mp
  one.schedule = Schedule::GPipe;
  one.recompute = false;
  return plan_staged(net, one, batch, "mp", 1, 1);
}

// Display order: the seed's comparison first.
const std::vector<Entry>& registry() {
  static const std::vector<Entry> r = {
      {{"regular", "one device, the whole batch", true, false}, make_regular, plan_regular},
      {{"dp", "torch.nn.DataParallel: scatter from device 0, replicate, gather, step on device 0", false, false},
       make_dp, plan_dp},
      {{"ddp", "a replica per worker, bucketed gradient all-reduce overlapped with backward", false, true}, make_ddp, plan_ddp,
       swept(ProjectionRule::Axes::Buckets)},
      {{"mp", "layers split into contiguous stages, one per worker", false, true}, make_mp, mp_plan,
       shown_among("pipeline")},
      {{"pipeline", "mp with micro-batches in a GPipe fill-drain schedule", false, true}, make_pipeline,
       pipeline_plan(Schedule::GPipe, false), swept(ProjectionRule::Axes::Schedules)},
      {{"pipeline-1f1b", "pipeline in a 1F1B schedule (PipeDream-flush): at most P micro-batches in flight", false, true},
       pipeline_variant(Schedule::OneFOneB, false), pipeline_plan(Schedule::OneFOneB, false),
       pipeline_projected(Schedule::OneFOneB, false)},
      {{"pipeline-zb", "zero-bubble ZB-H1: 1F1B with backward split into input and weight gradients, weight "
                       "gradients deferred into the drain; at most P micro-batches in flight", false, true},
       pipeline_variant(Schedule::ZeroBubble, false), pipeline_plan(Schedule::ZeroBubble, false),
       own_schedule(Schedule::ZeroBubble)},
      {{"pipeline-interleaved", "interleaved 1F1B (Megatron's virtual stages): V model chunks per worker "
                                "(--virtual-stages), bubble (P-1)/(VM) of the ideal step; M a multiple of P", false, true},
       pipeline_variant(Schedule::Interleaved, false), pipeline_plan(Schedule::Interleaved, false),
       own_schedule(Schedule::Interleaved)},
      {{"pipeline-zbv", "zero-bubble V (ScheduleZBVZeroBubble): two chunks per worker in a V, stages r and 2P-1-r, "
                        "backward split into input and weight gradients, weight gradients filling the bubble", false, true},
       chunked("pipeline-zbv", zbv_schedule), chunked_plan("pipeline-zbv", zbv_schedule), swept(ProjectionRule::Axes::MicroBatches)},
      {{"pipeline-recompute", "GPipe pipeline keeping only stage inputs, recomputing activations in backward", false, true},
       pipeline_variant(Schedule::GPipe, true), pipeline_plan(Schedule::GPipe, true),
       pipeline_projected(Schedule::GPipe, true)},
      {{"pipeline-1f1b-recompute", "1F1B pipeline with recomputed activations", false, true},
       pipeline_variant(Schedule::OneFOneB, true), pipeline_plan(Schedule::OneFOneB, true),
       pipeline_projected(Schedule::OneFOneB, true)},
      {{"fsdp", "ddp with parameters, gradients and Adam state sharded (ZeRO-3): all-gather per layer, reduce-scatter", false, true},
       make_fsdp, [](const NetPlan& n, const StrategyOptions& o, int64_t b) { return plan_fsdp(n, o, b, "fsdp", true); },
       units("fsdp")},
      {{"zero2", "fsdp keeping the gathered parameters from forward to backward (ZeRO-2): one all-gather per layer", false, true},
       make_zero2, [](const NetPlan& n, const StrategyOptions& o, int64_t b) { return plan_fsdp(n, o, b, "zero2", false); },
       units("zero2")},
      {{"fsdp-prefetch", "fsdp starting the next layer's all-gather before this layer's compute, forward and "
                         "backward (FSDP2 prefetch): two layers' parameters held", false, true},
       make_fsdp_prefetch,
       [](const NetPlan& n, const StrategyOptions& o, int64_t b) { return plan_fsdp(n, o, b, "fsdp-prefetch", true, true); },
       units("fsdp")},
      {{"zero2-prefetch", "zero2 starting the next layer's all-gather before this layer's forward", false, true},
       make_zero2_prefetch,
       [](const NetPlan& n, const StrategyOptions& o, int64_t b) { return plan_fsdp(n, o, b, "zero2-prefetch", false, true); },
       units("zero2")},
      {{"tp", "tensor parallel: each worker computes a slice of every layer's output channels, activations all-gathered", false, true},
       make_tp, [](const NetPlan& n, const StrategyOptions& o, int64_t b) { return plan_tp(n, o, b, "tp", 1); }},
      // A family: its members are named dp<D>xpp<P> (hybrid_name); the sweep expands it.
      {{kHybridFamily, "dp x pp: D replicas of a P-stage pipeline, each stage's gradients all-reduced among its D "
                       "workers (dp<D>xpp<P>; --dp D --pp P)", false, true},
       nullptr, nullptr, swept(ProjectionRule::Axes::Schedules), dpxpp_members},
      {{kDpTpFamily, "dp x tp: D replicas of a T-way tp group, each tp rank's slice gradients all-reduced among its "
                     "D workers (dp<D>xtp<T>; --dp D --tp T)", false, true},
       nullptr, nullptr, {}, dptp_members},
      {{kHsdpFamily, "hybrid sharded data parallel: fsdp within R groups of S workers, each shard's reduced gradients "
                     "all-reduced across the groups (hsdp<R>x<S>)", false, true},
       nullptr, nullptr, units("fsdp"), hsdp_members},
  };
  return r;
}
}  // namespace

bool parse_factor_name(const std::string& name, const char* first, const char* second, int* a, int* b,
                       std::size_t* used) {
  std::size_t i = 0;
  // A run of digits, no leading zero; its value, saturated above the limit.
  std::string spelled[2];
  int which = 0;
  auto number = [&](int64_t* v) {
    if (i >= name.size() || name[i] < '1' || name[i] > '9') return false;
    const std::size_t from = i;
    *v = 0;
    for (; i < name.size() && name[i] >= '0' && name[i] <= '9'; ++i) *v = std::min<int64_t>(*v * 10 + (name[i] - '0'), int64_t{1} << 40);
    spelled[which++] = name.substr(from, i - from);
    return true;
  };
  auto literal = [&](const char* s) {
    const std::string t(s);
    if (name.compare(i, t.size(), t) != 0) return false;
    i += t.size();
    return true;
  };
  int64_t x = 0, y = 0;
  if (!literal(first) || !number(&x) || !literal(second) || !number(&y)) return false;
  if (x > kMaxHybridDevices || y > kMaxHybridDevices || x * y > kMaxHybridDevices)
    throw UsageError(fmt::format("strategy {}: {} x {} devices, more than the {} a run may have", name.substr(0, i),
                                 spelled[0], spelled[1], kMaxHybridDevices));
  *a = static_cast<int>(x), *b = static_cast<int>(y), *used = i;
  return true;
}

std::vector<std::pair<int, int>> hybrid_factorizations(int devices, int dp, int side) {
  std::vector<std::pair<int, int>> out;
  for (int d = 1; d <= devices; ++d) {
    const int s = devices / d;
    if (devices % d == 0 && (dp ? d == dp : d >= 2) && (side ? s == side : s >= 2)) out.emplace_back(d, s);
  }
  return out;
}

const std::vector<StrategyInfo>& strategy_infos() {
  static const std::vector<StrategyInfo> infos = [] {
    std::vector<StrategyInfo> v;
    for (const Entry& e : registry()) v.push_back(e.info);
    return v;
  }();
  return infos;
}

std::vector<std::string> strategy_names() {
  std::vector<std::string> names;
  for (const StrategyInfo& i : strategy_infos()) names.push_back(i.name);
  return names;
}

std::optional<StrategySpec> parse_strategy(const std::string& name) {
  for (const Entry& e : registry()) {
    StrategySpec s;
    s.entry = e.info.name;
    s.family = static_cast<bool>(e.family);
    if (s.family && e.family.parse(name, &s.first, &s.second, &s.schedule, &s.recompute)) {
      s.fill_drain = s.entry == kHybridFamily;
      return s;
    }
    if (name != e.info.name) continue;
    s.fill_drain = !s.family && parse_pipeline_name(name, &s.schedule, &s.recompute);
    return s;
  }
  return std::nullopt;
}

namespace {
const Entry& entry_of(const StrategySpec& spec) {
  for (const Entry& e : registry())
    if (e.info.name == spec.entry) return e;
  throw std::logic_error("a parsed strategy without its registry line: " + spec.entry);
}
}  // namespace

const StrategyInfo& strategy_info(const std::string& name) {
  if (const auto spec = parse_strategy(name)) return entry_of(*spec).info;
  throw UsageError(fmt::format("unknown strategy '{}': expected one of {} (members of {} as dp<D>xpp<P>, of {} as "
                               "dp<D>xtp<T>, of {} as hsdp<R>x<S>)", name, fmt::join(strategy_names(), ", "),
                               kHybridFamily, kDpTpFamily, kHsdpFamily));
}

std::unique_ptr<Strategy> make_strategy(const std::string& name, const StrategyOptions& opts) {
  if (opts.devices < 1) throw UsageError(fmt::format("--devices must be at least 1, got {}", opts.devices));
  check_wire_dtypes(name, opts);
  const auto spec = parse_strategy(name);
  if (!spec) strategy_info(name);  // throws, naming the known ones
  if (opts.plan && name != "mp" && name != "ddp" && !spec->fill_drain)
    throw UsageError(fmt::format("{}: strategy {} runs only the plan it makes; a plan file runs as mp, a pipeline "
                                 "(pipeline, pipeline-1f1b, ...), a dp<D>xpp<P> or ddp", opts.plan_source, name));
  if (spec->member_of(kHybridFamily)) {  // a suffix selects as the options do
    StrategyOptions o = opts;
    if (spec->schedule != Schedule::GPipe) o.schedule = spec->schedule;
    o.recompute = o.recompute || spec->recompute;
    return make_hybrid(o, spec->first, spec->second);
  }
  if (spec->member_of(kDpTpFamily)) return make_dptp(opts, spec->first, spec->second);
  if (spec->member_of(kHsdpFamily)) return make_hsdp(opts, spec->first, spec->second);
  if (name == kHsdpFamily)
    throw UsageError(fmt::format("{} names a family of strategies: pick one as hsdp<R>x<S> (e.g. hsdp2x2)", name));
  if (name == kHybridFamily)
    throw UsageError(fmt::format("{} names a family of strategies: pick one as dp<D>xpp<P> (e.g. dp2xpp2), or use "
                                 "--dp D --pp P", name));
  if (name == kDpTpFamily)
    throw UsageError(fmt::format("{} names a family of strategies: pick one as dp<D>xtp<T> (e.g. dp2xtp2), or use "
                                 "--dp D --tp T", name));
  return entry_of(*spec).make(opts);
}

namespace {
Plan plan_of(const std::string& name, const NetPlan& net, const StrategyOptions& opts, int64_t batch) {
  if (opts.devices < 1) throw UsageError(fmt::format("--devices must be at least 1, got {}", opts.devices));
  if (net.has_skips() && opts.backend.precision == Precision::Bf16)
    if (const std::string why = bf16_graph_refusal(net); !why.empty())
      throw UsageError(fmt::format("{}: precision bf16: {}", name, why));
  if (batch < 1) throw UsageError(fmt::format("--batch must be at least 1, got {}", batch));
  check_wire_dtypes(name, opts);
  const auto spec = parse_strategy(name);
  const int dp = spec ? spec->first : 0, pp = spec ? spec->second : 0;
  if (spec && spec->member_of(kHybridFamily)) {  // as make_strategy
    StrategyOptions o = opts;
    if (spec->schedule != Schedule::GPipe) o.schedule = spec->schedule;
    o.recompute = o.recompute || spec->recompute;
    if (o.devices != dp * pp)
      throw UsageError(fmt::format("{}: {} replicas of a {}-stage pipeline run on {} devices, got --devices {}", name,
                                   dp, pp, dp * pp, o.devices));
    return plan_staged(net, o, batch, hybrid_name(dp, pp, o.schedule, o.recompute), o.micro_batches, dp);
  }
  if (spec && spec->member_of(kDpTpFamily)) {
    if (opts.devices != dp * pp)
      throw UsageError(fmt::format("{}: {} replicas of a {}-way tp group run on {} devices, got --devices {}", name, dp,
                                   pp, dp * pp, opts.devices));
    return plan_tp(net, opts, batch, name, dp);
  }
  if (spec && spec->member_of(kHsdpFamily)) {
    if (opts.devices != dp * pp)
      throw UsageError(fmt::format("{}: {} groups of {} sharding workers run on {} devices, got --devices {}", name, dp,
                                   pp, dp * pp, opts.devices));
    return plan_fsdp(net, opts, batch, name, true, false, dp);
  }
  if (spec && !spec->family) {
    const Entry& e = entry_of(*spec);
    if (e.info.single_device && opts.devices != 1)
      throw UsageError(fmt::format("strategy {} runs on one device, got --devices {}", name, opts.devices));
    if (e.plan) return e.plan(net, opts, batch);
  }
  make_strategy(name, opts);  // throws, naming the known ones or the family's members
  throw UsageError(fmt::format("no plan for strategy '{}'", name));
}
}  // namespace

const std::vector<ProjectionFacts>& projection_facts() {
  static const std::vector<ProjectionFacts> facts = [] {
    std::vector<ProjectionFacts> v;
    for (const Entry& e : registry()) v.push_back({e.info.name, e.info.single_device, e.projected, e.family});
    return v;
  }();
  return facts;
}

const ProjectionFacts* projection_facts_of(const std::string& name) {
  const auto spec = parse_strategy(name);
  if (!spec) return nullptr;
  for (const ProjectionFacts& f : projection_facts())
    if (f.name == spec->entry) return &f;
  return nullptr;
}

Plan make_plan(const std::string& name, const NetPlan& net, const StrategyOptions& opts, int64_t batch) {
  Plan p = plan_of(name, net, opts, batch);
  p.layer_params = layer_params_of(net);
  return p;
}

std::vector<int64_t> layer_params_of(const NetPlan& net) {
  std::vector<int64_t> out;
  for (const LayerPlan& l : net.layers) out.push_back(l.weight_numel + l.bias_numel);
  return out;
}

}  // namespace pb
