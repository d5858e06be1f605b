#include "engine/cpu_steal.h"

#include <algorithm>
#include <fstream>
#include <sstream>

namespace pb {

std::optional<CpuTimes> parse_proc_stat(const std::string& text) {
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("cpu ", 0) != 0) continue;
    std::istringstream fields(line.substr(4));
    double v[8];
    for (double& x : v)
      if (!(fields >> x) || x < 0) return std::nullopt;
    CpuTimes t;
    for (double x : v) t.total += x;  // guest time is already inside user and nice
    t.steal = v[7];
    return t;
  }
  return std::nullopt;
}

std::optional<CpuTimes> read_cpu_times() {
  std::ifstream in("/proc/stat");
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return parse_proc_stat(text.str());
}

std::optional<double> steal_fraction(const std::optional<CpuTimes>& before, const std::optional<CpuTimes>& after) {
  if (!before || !after) return std::nullopt;
  const double total = after->total - before->total;
  if (!(total > 0)) return std::nullopt;
  return std::max(0.0, after->steal - before->steal) / total;
}

}  // namespace pb
