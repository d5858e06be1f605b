// A plan someone wrote, run as a staged strategy's step (mp, pipeline, dp x pp): what it must be
// for pipeline.cpp's step to compute the same function -- beyond what the validator proves, the
// places the strategy keeps each micro-batch's input, activations and gradients.
#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include <fmt/ranges.h>

#include "engine/check.h"
#include "plan/check.h"
#include "strategies/plan_gen.h"
#include "strategies/registry.h"
#include "strategies/rules.h"

namespace pb {

namespace {

bool stage_compute(ActionKind k) {
  return k == ActionKind::Forward || k == ActionKind::Recompute || k == ActionKind::BackwardData ||
         k == ActionKind::BackwardWeights;
}

}  // namespace

void check_plan_computes(const Plan& user, const Plan& own, const std::string& source) {
  if (user.workers != own.workers)
    throw UsageError(fmt::format("{}: {} workers, but {} runs on {}", source, user.workers, own.strategy, own.workers));
  auto computes = [](ActionKind k) { return stage_compute(k) || k == ActionKind::Loss; };
  using Key = std::tuple<int, int, int64_t>;  // kind, micro-batch, samples
  auto key = [](const Action& a) { return Key{static_cast<int>(a.kind), std::max(a.micro, 0), a.samples}; };
  for (int w = 0; w < user.workers; ++w) {
    // What each worker computes, not how it is cut: a backward may be split into other buckets, but
    // every kind, micro-batch and sample count is own's, and as many forwards of each micro-batch
    // (a stage's chunks, fsdp's units).
    std::set<Key> mine, theirs;
    std::map<int, int> my_forwards, their_forwards;  // micro-batch -> forwards
    for (const Action& a : own.actions[w])
      if (computes(a.kind)) theirs.insert(key(a)), their_forwards[std::max(a.micro, 0)] += a.kind == ActionKind::Forward;
    for (const Action& a : user.actions[w]) {
      if (!computes(a.kind)) continue;
      mine.insert(key(a)), my_forwards[std::max(a.micro, 0)] += a.kind == ActionKind::Forward;
      if (theirs.count(key(a))) continue;
      std::string there;  // what own computes instead, where it has that kind and micro-batch
      for (const Action& o : own.actions[w])
        if (o.kind == a.kind && std::max(o.micro, 0) == std::max(a.micro, 0)) there = fmt::format(" ({} sample(s) there)", o.samples);
      throw UsageError(fmt::format("{}: {}: {} of {} sample(s), which {} at batch {} with {} micro-batch(es) does not compute{}",
                                   source, describe(user, w, a.id), action_kind_name(a.kind), a.samples, own.strategy,
                                   own.batch, own.micro_batches, there));
    }
    for (const Key& k : theirs)
      if (!mine.count(k))
        throw UsageError(fmt::format("{}: worker {} has no {} of micro-batch {} on {} sample(s), which {} at batch {} computes",
                                     source, w, action_kind_name(static_cast<ActionKind>(std::get<0>(k))), std::get<1>(k),
                                     std::get<2>(k), own.strategy, own.batch));
    for (const auto& [m, n] : their_forwards)
      if (my_forwards[m] != n)
        throw UsageError(fmt::format("{}: worker {} has {} forward(s) of micro-batch {} where {} has {}", source, w,
                                     my_forwards[m], m, own.strategy, n));
  }
}

void check_stage_plan(const Plan& user, const Plan& own, const std::vector<std::pair<int, int>>& ranges,
                      const std::vector<int>& slots, bool recompute, const std::string& source) {
  const std::vector<PlanIssue> issues = validate_plan(user);
  if (!issues.empty()) throw UsageError(fmt::format("{}: {}", source, issues_text(issues)));
  auto refuse = [&](int w, int id, const std::string& why) {
    throw UsageError(fmt::format("{}: {}: {}", source, describe(user, w, id), why));
  };
  if (user.workers != own.workers)
    throw UsageError(fmt::format("{}: {} workers, but {} runs on {}", source, user.workers, own.strategy, own.workers));
  if (user.micro_batches != own.micro_batches)
    throw UsageError(fmt::format("{}: {} micro-batches, but {} cuts the batch into {}", source, user.micro_batches,
                                 own.strategy, own.micro_batches));
  check_plan_computes(user, own, source);
  if (user.groups.size() != own.groups.size())
    throw UsageError(fmt::format("{}: {} groups, but {} has {}", source, user.groups.size(), own.strategy, own.groups.size()));
  for (std::size_t g = 0; g < own.groups.size(); ++g)
    if (user.groups[g].members != own.groups[g].members)
      throw UsageError(fmt::format("{}: group {} '{}' is not {}'s group {} (workers {})", source, g, user.groups[g].name,
                                   own.strategy, g, fmt::join(own.groups[g].members, ",")));
  // Transfers in one dtype, so both sides of each name the same; bf16 only where the strategy's own
  // are (--precision bf16: bf16 values, unchanged by it), fp32 everywhere.
  auto p2p_dtype = [](const Plan& p, DType* t, int* worker, int* id) {
    for (int w = 0; w < p.workers; ++w)
      for (const Action& a : p.actions[w])
        if (a.kind == ActionKind::Send || a.kind == ActionKind::Recv) {
          if (*worker < 0) *t = a.dtype, *worker = w, *id = a.id;
          else if (a.dtype != *t) return std::make_pair(w, a.id);
        }
    return std::make_pair(-1, -1);
  };
  DType own_t = DType::F32, user_t = DType::F32;
  int ow = -1, oid = -1, uw = -1, uid = -1;
  p2p_dtype(own, &own_t, &ow, &oid);
  if (const auto [w, id] = p2p_dtype(user, &user_t, &uw, &uid); w >= 0)
    refuse(w, id, fmt::format("its dtype differs from {}'s ({}): every send and receive travels in one",
                              describe(user, uw, uid), dtype_label(user_t)));
  if (user_t != DType::F32 && user_t != own_t)
    refuse(uw, uid, fmt::format("{} sends its activations in {} (bf16 only under --precision bf16)", own.strategy,
                                dtype_label(own_t)));
  const int stages = static_cast<int>(ranges.size());
  for (int w = 0; w < user.workers; ++w) {
    std::set<BufferKey> places;  // the buffers the strategy keeps for this worker
    for (const PlanBuffer& b : own.buffers)
      if (b.worker == w) places.insert(buffer_key(b));
    auto name = [&](int b) { return buffer_label(user.buffers.at(b)); };
    // Of the worker's first chunk (the one an interleaved worker's others are checked by the executor).
    auto is = [&](int b, BufferRole role) { return user.buffers.at(b).role == role && user.buffers.at(b).chunk == 0; };
    const int s = w % stages, slot_count = recompute ? 1 : slots.at(w);
    std::map<int, int> holds;     // buffer -> the micro-batch it holds
    std::map<int, int> input_of;  // micro-batch -> the buffer its forward read
    std::vector<int> act_slot(slot_count, -1);  // Sequential's activation slots: their micro-batch
    int backwards = 0, steps = 0;
    for (const PlanBuffer& b : user.buffers)  // stage 0's inputs: x[j] is micro-batch j's
      if (b.worker == w && b.role == BufferRole::Input && b.chunk == 0 && b.index >= 0)
        holds[static_cast<int>(&b - user.buffers.data())] = b.index;
    for (const Action& a : user.actions[w]) {
      if (a.kind == ActionKind::Optimizer && ++steps > 1) refuse(w, a.id, "a second optimizer step");
      for (const auto* ids : {&a.reads, &a.writes})
        for (int b : *ids)
          if (!places.count(buffer_key(user.buffers.at(b))))
            refuse(w, a.id, fmt::format("buffer '{}' is none that {} keeps on worker {}", name(b), own.strategy, w));
      const int k = a.micro;
      if (stage_compute(a.kind) && (a.layer_begin != ranges[s].first || a.layer_end != ranges[s].second))
        refuse(w, a.id, fmt::format("worker {} runs stage {}, layers [{}, {})", w, s, ranges[s].first, ranges[s].second));
      if ((stage_compute(a.kind) || a.kind == ActionKind::Loss || a.kind == ActionKind::Send || a.kind == ActionKind::Recv) &&
          (k < 0 || k >= user.micro_batches))
        refuse(w, a.id, fmt::format("micro-batch {} is not one of 0..{}", k, user.micro_batches - 1));
      const int slot = k >= 0 ? k % slot_count : 0;
      auto expect = [&](int b, const char* what) {
        if (holds.count(b) && holds[b] != k)
          refuse(w, a.id, fmt::format("{} '{}' holds micro-batch {} here, not {}", what, name(b), holds[b], k));
      };
      switch (a.kind) {
        case ActionKind::Recv:
        case ActionKind::Loss:
          for (int b : a.writes) holds[b] = k;
          break;
        case ActionKind::Forward:
        case ActionKind::Recompute:
          if (a.reads.empty()) refuse(w, a.id, "a forward reads its input first");
          expect(a.reads[0], "its input");
          input_of[k] = a.reads[0];
          act_slot[slot] = k;
          break;
        case ActionKind::BackwardWeights:
          if ((backwards++ > 0) != (a.reads.size() > 2))
            refuse(w, a.id, backwards == 1 ? "the stage's first backward writes the gradients: it reads only dy and "
                                             "the activations"
                                           : "a later backward adds to the gradients: it reads them too");
          [[fallthrough]];
        case ActionKind::BackwardData:
          if (act_slot[slot] != k)
            refuse(w, a.id, fmt::format("the activation slot {} holds micro-batch {}, not {} (recompute it first)", slot,
                                        act_slot[slot], k));
          if (input_of.count(k)) expect(input_of[k], "the input its activations refer to");
          for (int b : a.reads)
            if (is(b, BufferRole::OutputGrad) && user.buffers[b].index < 0) expect(b, "the output gradient");
          for (int b : a.writes) holds[b] = k;
          break;
        case ActionKind::Send:
          for (int b : a.reads) {
            if (is(b, BufferRole::Activations) && act_slot[slot] != k)
              refuse(w, a.id, fmt::format("the activation slot {} holds micro-batch {}, not {}", slot, act_slot[slot], k));
            if (!is(b, BufferRole::Activations)) expect(b, "what it sends");
          }
          break;
        default:
          break;
      }
    }
    if (steps == 0) throw UsageError(fmt::format("{}: worker {} never steps its optimizer", source, w));
  }
}

void check_plan_file(const Plan& user, const NetPlan& net, const StrategyOptions& o, const std::string& source) {
  const std::string& name = user.strategy;
  const auto spec = parse_strategy(name);
  if (name == "ddp") {  // a replica's step: its own plan at these options
    StrategyOptions own_options = o;
    own_options.plan = nullptr;
    check_replica_plan(user, make_plan(name, net, own_options, user.batch), source);
    return;
  }
  if (name != "mp" && !(spec && spec->fill_drain))
    throw UsageError(fmt::format("{}: strategy {} runs only the plan it makes; a plan file runs as mp, a pipeline "
                                 "(pipeline, pipeline-1f1b, ...), a dp<D>xpp<P> or ddp", source, name));
  if (net.has_skips())
    throw UsageError(fmt::format("{}: the net has skips ({}); a plan file runs only a chain's pipeline yet (its own "
                                 "plan, `parbench plan`, shows what {} runs)", source, first_skip(net), name));
  StrategyOptions own_options = o;
  own_options.plan = nullptr;
  own_options.micro_batches = user.micro_batches;
  own_options.cap_micro_batches = false;
  Schedule schedule = spec->schedule;
  bool recompute = own_options.recompute = o.recompute || spec->recompute;
  if (name == "mp") schedule = Schedule::GPipe, recompute = false;
  const Plan own = make_plan(name, net, own_options, user.batch);
  std::vector<std::pair<int, int>> ranges;
  std::vector<int> slots;
  for (int w = 0; w < own.workers; ++w) {
    int b = -1, e = -1;
    for (const Action& a : own.actions[w])
      if (a.kind == ActionKind::Forward) b = b < 0 ? a.layer_begin : std::min(b, a.layer_begin), e = std::max(e, a.layer_end);
    if (own.replica[w] == 0) ranges.push_back({b, e});
  }
  const int stages = static_cast<int>(ranges.size());
  for (int w = 0; w < own.workers; ++w) slots.push_back(pipeline_slots(schedule, stages, w % stages, own.micro_batches));
  check_stage_plan(user, own, ranges, slots, recompute, source);
}

}  // namespace pb
