// The NCCL watchdog's decision (engine/nccl_watch.h).
#include "engine/nccl_watch.h"

#include <fmt/format.h>

namespace pb {

// An error outranks completion: a communicator in error may have completed garbage.
WatchVerdict watch_verdict(const WatchState& s) {
  if (!s.error.empty()) return WatchVerdict::Failed;
  if (s.finished) return WatchVerdict::Done;
  if (s.reached && s.timeout_s > 0 && s.waited_s > s.timeout_s) return WatchVerdict::TimedOut;
  return WatchVerdict::Waiting;
}

std::string watch_message(int rank, const std::string& call, const WatchState& s, WatchVerdict v) {
  if (v == WatchVerdict::Failed) return fmt::format("rank {}: NCCL {} failed: {}; aborting the communicator", rank, call, s.error);
  if (v == WatchVerdict::TimedOut)
    return fmt::format("rank {}: NCCL {} has waited {:.0f} s for its peers (--comm-timeout {:g}): a rank has stopped, "
                       "hung or died; aborting the communicator", rank, call, s.waited_s, s.timeout_s);
  return fmt::format("rank {}: NCCL {} is {}", rank, call, v == WatchVerdict::Done ? "done" : "waiting");
}

}  // namespace pb
