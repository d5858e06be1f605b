// Strategy factories; each strategy file defines one, and registry.cpp lists them by name.
#pragma once

#include "strategies/strategy.h"

namespace pb {
std::unique_ptr<Strategy> make_regular(const StrategyOptions& o);
}  // namespace pb
