#include "strategies/breakdown.h"

#include <algorithm>

namespace pb {

StepBreakdown breakdown(const StepStats& s) {
  StepBreakdown b;
  b.step_s = s.step_s;
  const double n = static_cast<double>(s.workers.size());
  if (s.workers.empty() || s.step_s <= 0) return b;
  double compute = 0, transfer = 0, idle = 0, other = 0, least_idle = 0;
  for (std::size_t i = 0; i < s.workers.size(); ++i) {
    const WorkerStats& w = s.workers[i];
    compute += w.compute_s, transfer += w.transfer_s, idle += w.idle_s, other += w.other_s;
    b.transfer_s_max = std::max(b.transfer_s_max, w.transfer_s);
    b.bytes_sent += static_cast<double>(w.comm_bytes);
    if (i == 0 || w.idle_s < least_idle) least_idle = w.idle_s, b.critical_worker = static_cast<int>(i);
  }
  const double device_time = n * s.step_s;
  b.compute_share = compute / device_time;
  b.transfer_share = transfer / device_time;
  b.idle_share = idle / device_time;
  b.other_share = other / device_time;
  b.exposed_comm_s = s.workers[b.critical_worker].exposed_transfer_s;
  if (s.staged) b.measured_bubble = idle / device_time;  // every worker is a stage
  // The ranks of the communicator: the workers that took part.
  const int ranks = std::max(1, s.workers_used);
  for (int k = 0; k < kCollKinds; ++k) {
    KindBandwidth kb;
    int64_t calls = 0;
    for (const WorkerStats& w : s.workers) {
      const CollStats& c = w.kinds[k];
      calls += c.calls;
      if (static_cast<CollKind>(k) == CollKind::SendRecv) {
        // Each message once (its sender counts the bytes) over each transfer's own time.
        kb.bytes += static_cast<double>(c.bytes);
        kb.seconds += c.seconds;
      } else {
        // A collective moves its size on every rank, and is done when the slowest rank is.
        kb.bytes = std::max(kb.bytes, static_cast<double>(c.bytes));
        kb.seconds = std::max(kb.seconds, c.seconds);
      }
    }
    if (calls == 0 || kb.bytes <= 0 || kb.seconds <= 0) continue;
    kb.algbw = kb.bytes / kb.seconds;
    kb.busbw = kb.algbw * bus_factor(static_cast<CollKind>(k), ranks);
    b.kinds[k] = kb;
  }
  return b;
}

}  // namespace pb
