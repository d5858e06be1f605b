// Strategy factories; each strategy file defines one, and registry.cpp lists them by name.
#pragma once

#include "strategies/strategy.h"

namespace pb {
std::unique_ptr<Strategy> make_regular(const StrategyOptions& o);
std::unique_ptr<Strategy> make_dp(const StrategyOptions& o);
std::unique_ptr<Strategy> make_ddp(const StrategyOptions& o);
std::unique_ptr<Strategy> make_mp(const StrategyOptions& o);
std::unique_ptr<Strategy> make_pipeline(const StrategyOptions& o);
// Stages over the workers with `micro_batches` micro-batches (pipeline.cpp); mp is one micro-batch.
std::unique_ptr<Strategy> make_staged(const StrategyOptions& o, const std::string& name, int micro_batches);
}  // namespace pb
