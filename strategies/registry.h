// Strategy factories; each strategy file defines one, and registry.cpp lists them by name.
#pragma once

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
// The registered pipeline variant for a schedule and recompute: pipeline, pipeline-1f1b,
// pipeline-recompute, pipeline-1f1b-recompute.
std::string pipeline_name(Schedule schedule, bool recompute);
// Whether `name` is one of them; if so, its schedule and recompute.
bool parse_pipeline_name(const std::string& name, Schedule* schedule, bool* recompute);
}  // namespace pb
