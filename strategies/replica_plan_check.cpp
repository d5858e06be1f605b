// A plan someone wrote, run as ddp's step: what it must be for ddp.cpp's step to compute the same
// function -- beyond what the validator proves, its own plan's computations in the same order, its
// buffers, and each all-reduce over the bucket its own plan reduces.
#include <algorithm>
#include <tuple>
#include <vector>

#include <fmt/ranges.h>

#include "engine/check.h"
#include "plan/check.h"
#include "strategies/plan_gen.h"

namespace pb {

namespace {

bool computation(ActionKind k) {
  return k == ActionKind::Forward || k == ActionKind::Recompute || k == ActionKind::BackwardData ||
         k == ActionKind::BackwardWeights || k == ActionKind::Loss || k == ActionKind::Optimizer;
}

std::vector<BufferKey> keys(const Plan& p, const std::vector<int>& buffers) {
  std::vector<BufferKey> out;
  for (int b : buffers) out.push_back(buffer_key(p.buffers.at(b)));
  return out;
}

// What makes two communication actions the same call: kind, collective, group, counts and buffers.
bool same_call(const Plan& a, const Action& x, const Plan& b, const Action& y) {
  auto group = [](const Plan& p, int g) { return g < 0 ? std::string() : p.groups.at(g).name; };
  return x.kind == y.kind && x.coll == y.coll && group(a, x.group) == group(b, y.group) && x.peer == y.peer &&
         x.root == y.root && x.count == y.count && x.bytes == y.bytes && x.async == y.async &&
         keys(a, x.reads) == keys(b, y.reads) && keys(a, x.writes) == keys(b, y.writes);
}

}  // namespace

void check_replica_plan(const Plan& user, const Plan& own, const std::string& source) {
  const std::vector<PlanIssue> issues = validate_plan(user);
  if (!issues.empty()) throw UsageError(fmt::format("{}: {}", source, issues_text(issues)));
  auto refuse = [&](int w, int id, const std::string& why) {
    throw UsageError(fmt::format("{}: {}: {}", source, describe(user, w, id), why));
  };
  if (user.workers != own.workers || user.batch != own.batch)
    throw UsageError(fmt::format("{}: {} workers at batch {}, but this {} runs {} at batch {}", source, user.workers,
                                 user.batch, own.strategy, own.workers, own.batch));
  check_plan_computes(user, own, source);
  for (std::size_t g = 0; g < user.groups.size(); ++g)
    if (g >= own.groups.size() || user.groups[g].name != own.groups[g].name || user.groups[g].members != own.groups[g].members)
      throw UsageError(fmt::format("{}: group '{}' is none that {} has", source, user.groups[g].name, own.strategy));
  for (int w = 0; w < user.workers; ++w) {
    // Its buffers: each one the strategy keeps on that worker, as large.
    for (const Action& a : user.actions[w])
      for (const std::vector<int>* list : {&a.reads, &a.writes})
        for (int b : *list) {
          const PlanBuffer& mine = user.buffers.at(b);
          bool kept = false;
          for (const PlanBuffer& o : own.buffers) kept = kept || (same_buffer(o, mine) && o.bytes == mine.bytes);
          if (!kept)
            refuse(w, a.id, fmt::format("buffer '{}' ({} B) is none that {} keeps on worker {}", buffer_label(mine), mine.bytes,
                                        own.strategy, w));
        }
    // Its computations: the strategy's own, in the same order (the step runs backward as one call).
    std::vector<const Action*> mine_compute, own_compute, own_calls;
    for (const Action& a : own.actions[w]) (computation(a.kind) ? own_compute : own_calls).push_back(&a);
    std::size_t k = 0;
    for (const Action& a : user.actions[w]) {
      if (computation(a.kind)) {
        const Action* o = k < own_compute.size() ? own_compute[k++] : nullptr;
        if (!o || o->kind != a.kind || o->layer_begin != a.layer_begin || o->layer_end != a.layer_end || o->micro != a.micro ||
            o->samples != a.samples)
          refuse(w, a.id, o ? fmt::format("where {} runs {}", own.strategy, describe(own, w, o->id))
                            : fmt::format("{} runs no more computations", own.strategy));
        continue;
      }
      if (a.kind == ActionKind::Wait || a.kind == ActionKind::GroupStart || a.kind == ActionKind::GroupEnd) continue;
      // Its communication: each call one of the strategy's own, once.
      auto it = std::find_if(own_calls.begin(), own_calls.end(), [&](const Action* o) { return o && same_call(user, a, own, *o); });
      if (it == own_calls.end()) refuse(w, a.id, fmt::format("{} makes no such call", own.strategy));
      *it = nullptr;
    }
    if (k != own_compute.size())
      throw UsageError(fmt::format("{}: worker {} misses {}", source, w, describe(own, w, own_compute[k]->id)));
    for (const Action* o : own_calls)
      if (o && o->kind != ActionKind::Wait && o->kind != ActionKind::GroupStart && o->kind != ActionKind::GroupEnd)
        throw UsageError(fmt::format("{}: worker {} misses {}", source, w, describe(own, w, o->id)));
  }
}

}  // namespace pb
