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
std::unique_ptr<Strategy> make_fsdp(const StrategyOptions& o);
std::unique_ptr<Strategy> make_tp(const StrategyOptions& o);
std::unique_ptr<Strategy> make_zero2(const StrategyOptions& o);
// Stages over the workers with `micro_batches` micro-batches (pipeline.cpp); mp is one micro-batch.
std::unique_ptr<Strategy> make_staged(const StrategyOptions& o, const std::string& name, int micro_batches);
// ddp's gradient buckets over a replica's flat gradients, [begin, end) each, in the order
// backward completes them (ddp.cpp).
class Sequential;
std::vector<std::pair<int64_t, int64_t>> ddp_buckets(const Sequential& m, std::size_t first_bytes, std::size_t bytes);
}  // namespace pb
