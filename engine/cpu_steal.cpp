#include "engine/cpu_steal.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include <sys/resource.h>
#include <unistd.h>

#include <fmt/format.h>

#include "engine/process.h"

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
    t.busy = v[0] + v[1] + v[2] + v[5] + v[6];
    return t;
  }
  return std::nullopt;
}

std::optional<CpuTimes> read_cpu_times() {
  std::ifstream in("/proc/stat");
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  std::optional<CpuTimes> t = parse_proc_stat(text.str());
  rusage self{};
  const long ticks = sysconf(_SC_CLK_TCK);  // /proc/stat's unit
  if (t && ticks > 0 && getrusage(RUSAGE_SELF, &self) == 0) {
    auto seconds = [](const timeval& v) { return static_cast<double>(v.tv_sec) + static_cast<double>(v.tv_usec) * 1e-6; };
    t->own = (seconds(self.ru_utime) + seconds(self.ru_stime)) * static_cast<double>(ticks);
  }
  return t;
}

std::optional<double> steal_fraction(const std::optional<CpuTimes>& before, const std::optional<CpuTimes>& after) {
  if (!before || !after) return std::nullopt;
  const double total = after->total - before->total;
  if (!(total > 0)) return std::nullopt;
  return std::max(0.0, after->steal - before->steal) / total;
}

std::optional<double> others_fraction(const std::optional<CpuTimes>& before, const std::optional<CpuTimes>& after) {
  if (!before || !after) return std::nullopt;
  const double total = after->total - before->total;
  if (!(total > 0)) return std::nullopt;
  const double others = (after->busy - before->busy) - (after->own - before->own);
  return std::clamp(others / total, 0.0, 1.0);
}

Disturbance disturbance_since(const std::optional<CpuTimes>& before) {
  const std::optional<CpuTimes> after = read_cpu_times();
  return {steal_fraction(before, after), multi_process() ? std::nullopt : others_fraction(before, after)};
}

void warn_if_disturbed(const Disturbance& d, const std::string& command, const std::string& during,
                       const std::string& effect, const std::string& again) {
  if (d.steal && *d.steal > kStealWarning)
    fmt::print(stderr,
               "{}: warning: the hypervisor gave {:.0f}% of this machine's CPU time to others {} (steal, /proc/stat): "
               "{}; {} when it is quieter\n",
               command, *d.steal * 100, during, effect, again);
  if (d.others && *d.others > kOthersWarning)
    fmt::print(stderr,
               "{}: warning: other processes used {:.0f}% of this machine's CPU time {} (/proc/stat): its workers shared "
               "the cores with them, so {}; {} with nothing else running\n",
               command, *d.others * 100, during, effect, again);
}

}  // namespace pb
