// The share of the CPUs' time a hypervisor gave to others ("steal" in /proc/stat): on a VM whose
// host is busy, timings taken then are not the machine's own; and the share other processes of
// this machine used, which slows a waiting thread's peers alike (docs/internals.md, A busy machine).
#pragma once

#include <optional>
#include <string>

namespace pb {

// Above this share, calibrate and run warn that their timings were disturbed (on this project's
// VM: under 2% while its host was quiet, 5-25% as it got busier, 25-75% in its slow spells).
inline constexpr double kStealWarning = 0.1;
// Above this share of the CPUs' time used by other processes they warn likewise.
inline constexpr double kOthersWarning = 0.1;

struct CpuTimes {
  double steal = 0;  // clock ticks, all CPUs
  double total = 0;  // user + nice + system + idle + iowait + irq + softirq + steal
  double busy = 0;   // user + nice + system + irq + softirq
  double own = 0;    // this process's user + system, in the same ticks (read_cpu_times only)
};

// The aggregate "cpu " line of /proc/stat's text; nullopt where it is missing or has no steal
// field (kernels before 2.6.11, non-Linux).
std::optional<CpuTimes> parse_proc_stat(const std::string& text);
// This machine's, read now; nullopt where /proc/stat cannot be read or parsed.
std::optional<CpuTimes> read_cpu_times();
// Steal over total between two readings; nullopt when either is missing or no time passed.
std::optional<double> steal_fraction(const std::optional<CpuTimes>& before, const std::optional<CpuTimes>& after);
// The busy time not this process's over total between two readings; nullopt likewise. Under MPI
// the other ranks count among the others.
std::optional<double> others_fraction(const std::optional<CpuTimes>& before, const std::optional<CpuTimes>& after);

// What took the CPUs from a command's timings since `before`: steal, and other processes (in a
// single process only; under MPI the other ranks are such processes).
struct Disturbance {
  std::optional<double> steal, others;
};
Disturbance disturbance_since(const std::optional<CpuTimes>& before);
// Warns on stderr of each share above its threshold: "`command`: warning: ... `during` ...:
// `effect`; `again` ...".
void warn_if_disturbed(const Disturbance& d, const std::string& command, const std::string& during,
                       const std::string& effect, const std::string& again);

}  // namespace pb
