// The NCCL communicator's watchdog decision (engine/nccl/nccl_comm.cpp), as a pure function so
// that it is tested without a GPU: given what polling a launch's events and the communicator's
// asynchronous error found, whether the launch is done, still waiting, or the job must stop.
#pragma once

#include <string>

namespace pb {

struct WatchState {
  bool finished = false;   // the launch's end event has completed
  bool reached = false;    // its stream has reached it (the arrival event before it completed)
  double waited_s = 0;     // since it was reached (or since the host call began, for a host call)
  std::string error;       // the communicator's asynchronous error or a CUDA error; "" if none
  double timeout_s = 0;    // --comm-timeout; 0: never
};

enum class WatchVerdict { Done, Waiting, Failed, TimedOut };

WatchVerdict watch_verdict(const WatchState& s);

// The message the communicator is aborted with: rank, call and peers, and why.
// call: e.g. "send_recv with peer 2" or "all_reduce".
std::string watch_message(int rank, const std::string& call, const WatchState& s, WatchVerdict v);

}  // namespace pb
