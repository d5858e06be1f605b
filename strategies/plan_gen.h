// Plan generators: one step of each strategy as a plan (plan/plan.h), from the same rules the
// strategy runs by (strategies/rules.h). make_plan takes any name make_strategy takes.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "engine/net.h"
#include "plan/plan.h"
#include "strategies/strategy.h"

namespace pb {

Plan make_plan(const std::string& strategy, const NetPlan& net, const StrategyOptions& o, int64_t batch);
// Per layer of the net, its parameters: what make_plan records as Plan::layer_params.
std::vector<int64_t> layer_params_of(const NetPlan& net);

// A collective of fp32 buffers sent as `t` (StrategyOptions::reduce_dtype, param_dtype): its dtype,
// and its bytes (given in fp32) those of the payload in t.
inline Action& on_wire(Action& a, DType t) {
  a.bytes = a.bytes / static_cast<int64_t>(sizeof(float)) * static_cast<int64_t>(dtype_size(t));
  a.dtype = t;
  return a;
}

// --reduce-dtype bf16: the communicator's bf16 copy of `params` gradients reduced in one call (or
// in buckets all in flight at once), a staging buffer of `worker` (its model chunk `chunk`).
inline void gradient_staging(PlanBuilder& b, int worker, const StrategyOptions& o, int64_t params, int chunk = 0) {
  if (o.reduce_dtype == DType::Bf16)
    b.buffer(worker, BufferRole::Staging, -1, params * static_cast<int64_t>(dtype_size(DType::Bf16)), DType::Bf16, chunk);
}

// Per slot, the values of the bf16 transfer staging `worker`'s step takes on the communicator of
// plan group `group` (its Send and Recv there in bf16, replayed in order through that
// communicator's WireSlots); empty: none.
std::vector<int64_t> transfer_staging(const Plan& p, int worker, int group = 0);

Plan plan_regular(const NetPlan& net, const StrategyOptions& o, int64_t batch);
Plan plan_dp(const NetPlan& net, const StrategyOptions& o, int64_t batch);
Plan plan_ddp(const NetPlan& net, const StrategyOptions& o, int64_t batch);
// fsdp, zero2 (`reshard`: gather again for backward); `prefetch`: each unit's all-gather started
// before the previous unit's compute, on the communication lane (fsdp-prefetch, zero2-prefetch);
// `replicas` R > 1: hsdp<R>x<S>, fsdp within each group of S = workers / R, each unit's reduced
// shard then all-reduced over the R workers holding that shard.
Plan plan_fsdp(const NetPlan& net, const StrategyOptions& o, int64_t batch, const std::string& name, bool reshard,
               bool prefetch = false, int replicas = 1);
// mp, pipeline and its variants (replicas 1), dp x pp (replicas D): o.schedule, o.recompute.
Plan plan_staged(const NetPlan& net, const StrategyOptions& o, int64_t batch, const std::string& name, int micro,
                 int replicas);
// A chunked schedule's pipeline over o.devices workers, o.micro_batches micro-batches.
struct ChunkSchedule;
Plan plan_chunk_pipeline(const NetPlan& net, const StrategyOptions& o, int64_t batch, const std::string& name,
                         const ChunkSchedule& sched);
// The same from a stage split (workers x chunks stages) and micro-batch sizes already made.
Plan plan_chunked(const NetPlan& net, const StrategyOptions& o, int64_t batch, const std::string& name,
                  const std::vector<std::pair<int, int>>& ranges, const std::vector<int64_t>& sizes,
                  const ChunkSchedule& sched);
// The same from a stage split and each replica's micro-batch sizes already made (the strategy's own).
Plan plan_stage_steps(const NetPlan& net, const StrategyOptions& o, int64_t batch, const std::string& name,
                      const std::vector<std::pair<int, int>>& ranges,
                      const std::vector<std::vector<int64_t>>& micro_sizes);
// A plan someone wrote (`user`) against the plan its strategy makes (`own`, at the same workers,
// batch and micro-batches): per worker, the same kinds of forwards, recomputes, backwards and
// losses, each of a micro-batch of the same samples, and as many forwards of each micro-batch, in
// any order and cut (a backward in other buckets). A plan whose samples do not
// add up to its batch, or that another strategy made, computes something else: UsageError naming
// `source` and the first worker and action that differ.
void check_plan_computes(const Plan& user, const Plan& own, const std::string& source);
// A plan someone wrote (`user`), to run as a staged strategy's step instead of its own plan `own`:
// valid (plan/check.h), with own's workers, micro-batches, groups and buffer names; every stage
// computation over its worker's layers (`ranges`, per stage); each micro-batch's input, output
// gradient, activation slot (`slots` per worker; one with `recompute`) holding that micro-batch
// where it is read; the first backward writing the gradients and later ones adding; one optimizer
// step. UsageError naming `source`, the worker and the action otherwise.
void check_stage_plan(const Plan& user, const Plan& own, const std::vector<std::pair<int, int>>& ranges,
                      const std::vector<int>& slots, bool recompute, const std::string& source);
// A plan someone wrote, to run as ddp's step instead of its own plan `own`: valid, with own's
// workers, batch, groups and buffers, own's computations in own's order and each of own's
// communication calls once (placed as the writer likes, as the validator's ordering allows).
void check_replica_plan(const Plan& user, const Plan& own, const std::string& source);
// The same before a run, from the plan the strategy `user` names would make on `net` with `o`
// (--balance time: as the options time it): what `parbench run --plan` checks before it starts.
void check_plan_file(const Plan& user, const NetPlan& net, const StrategyOptions& o, const std::string& source);
Plan plan_tp(const NetPlan& net, const StrategyOptions& o, int64_t batch, const std::string& name, int replicas);

}  // namespace pb
