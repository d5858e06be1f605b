// Strategy factories; each strategy file defines one, and registry.cpp lists them by name.
#pragma once

#include <utility>

#include "strategies/strategy.h"

namespace pb {
std::unique_ptr<Strategy> make_regular(const StrategyOptions& o);
std::unique_ptr<Strategy> make_dp(const StrategyOptions& o);
std::unique_ptr<Strategy> make_ddp(const StrategyOptions& o);
std::unique_ptr<Strategy> make_mp(const StrategyOptions& o);
std::unique_ptr<Strategy> make_pipeline(const StrategyOptions& o);
// Stages over the workers with `micro_batches` micro-batches (pipeline.cpp) under o's schedule
// and recompute; mp is one micro-batch.
std::unique_ptr<Strategy> make_staged(const StrategyOptions& o, const std::string& name, int micro_batches);
// A pipeline of a chunked schedule (strategies/rules.h) over o.devices workers, o.micro_batches
// micro-batches (pipeline.cpp); its plan is plan_chunk_pipeline's.
struct ChunkSchedule;
std::unique_ptr<Strategy> make_chunk_pipeline(const StrategyOptions& o, const std::string& name, ChunkSchedule sched);
// The registered pipeline variant for a schedule and recompute: pipeline, pipeline-1f1b,
// pipeline-recompute, pipeline-1f1b-recompute.
std::string pipeline_name(Schedule schedule, bool recompute);
// Whether `name` is one of them; if so, its schedule and recompute.
bool parse_pipeline_name(const std::string& name, Schedule* schedule, bool* recompute);
// A dp x pp hybrid (pipeline.cpp): D replicas of a P-stage pipeline on D * P devices.
std::unique_ptr<Strategy> make_hybrid(const StrategyOptions& o, int dp, int pp);
std::unique_ptr<Strategy> make_fsdp(const StrategyOptions& o);
std::unique_ptr<Strategy> make_tp(const StrategyOptions& o);
// A dp x tp hybrid (tp.cpp): D replicas of a T-way tp group on D * T devices.
std::unique_ptr<Strategy> make_dptp(const StrategyOptions& o, int dp, int tp);
std::unique_ptr<Strategy> make_zero2(const StrategyOptions& o);
// fsdp and zero2 with the next unit's all-gather started before the current unit's compute.
std::unique_ptr<Strategy> make_fsdp_prefetch(const StrategyOptions& o);
std::unique_ptr<Strategy> make_zero2_prefetch(const StrategyOptions& o);
// hsdp<R>x<S> (fsdp.cpp): fsdp over each of R groups of S workers, shards all-reduced across groups.
std::unique_ptr<Strategy> make_hsdp(const StrategyOptions& o, int replicas, int shards);
// UsageError naming the flag when o's reduce_dtype or param_dtype do not apply to strategy `name`
// (wire_dtypes.cpp): every make_strategy and make_plan checks it.
void check_wire_dtypes(const std::string& name, const StrategyOptions& o);
bool takes_reduce_dtype(const std::string& name);  // sums gradients over replicas
bool takes_param_dtype(const std::string& name);   // gathers sharded parameters
// ddp's gradient buckets over a replica's flat gradients, [begin, end) each, in the order
// backward completes them (rules.cpp).
class Sequential;
std::vector<std::pair<int64_t, int64_t>> ddp_buckets(const Sequential& m, std::size_t first_bytes, std::size_t bytes);
}  // namespace pb
