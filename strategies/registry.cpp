// The strategies by name: adding one is a file plus one line here.
#include "strategies/registry.h"

#include <utility>

#include <fmt/ranges.h>

#include "engine/check.h"

namespace pb {

namespace {
const std::vector<std::pair<std::string, StrategyFactory>>& registry() {
  static const std::vector<std::pair<std::string, StrategyFactory>> r = {
      {"regular", make_regular},
      {"dp", make_dp},
      {"ddp", make_ddp},
      {"mp", make_mp},
      {"pipeline", make_pipeline},
  };
  return r;
}
}  // namespace

std::vector<std::string> strategy_names() {
  std::vector<std::string> names;
  for (const auto& [name, f] : registry()) names.push_back(name);
  return names;
}

std::unique_ptr<Strategy> make_strategy(const std::string& name, const StrategyOptions& opts) {
  if (opts.devices < 1) throw UsageError(fmt::format("--devices must be at least 1, got {}", opts.devices));
  for (const auto& [n, f] : registry())
    if (n == name) return f(opts);
  throw UsageError(fmt::format("unknown strategy '{}': expected one of {}", name, fmt::join(strategy_names(), ", ")));
}

std::vector<int64_t> chunk_sizes(int64_t batch, int n) {
  std::vector<int64_t> out;
  if (batch <= 0 || n <= 0) return out;
  const int64_t chunk = (batch + n - 1) / n;
  for (int64_t start = 0; start < batch; start += chunk) out.push_back(std::min(chunk, batch - start));
  return out;
}

}  // namespace pb
