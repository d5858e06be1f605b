// The NCCL communicator's watchdog: a thread that polls the events around every launch of the
// local ranks (cudaEventQuery), their communicators' asynchronous errors (ncclCommGetAsyncError)
// and host calls into NCCL that do not return; on an error, or a wait for peers longer than
// --comm-timeout, it reports once, naming the rank, the call and its peers (engine/nccl_watch.h
// decides). Without it a stopped peer or a broken link hangs the job without a word.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/check.h"

namespace pb {

class NcclWatchdog {
 public:
  using OnFail = std::function<void(const std::string&)>;
  explicit NcclWatchdog(int ranks) : ranks_(ranks) {
    for (auto& r : ranks_) r = std::make_unique<Rank>();
  }
  ~NcclWatchdog();
  NcclWatchdog(const NcclWatchdog&) = delete;
  NcclWatchdog& operator=(const NcclWatchdog&) = delete;

  void add_rank(int rank, ncclComm_t comm) { ranks_.at(rank)->comm = comm; }
  // Starts polling; fail is called at most once, on the watchdog's thread.
  void start(OnFail fail);
  void stop() noexcept;

  // Runs enqueue (one launch's NCCL calls on stream s, on the rank's thread with its device
  // current) under the rank's lock, between two events on s that the watchdog polls.
  template <class F>
  void watch(int rank, const std::string& call, cudaStream_t s, F&& enqueue) {
    Rank& r = *ranks_.at(rank);
    std::unique_lock<std::timed_mutex> calls(r.calls);
    Launch l;
    l.call = call, l.reached = event(r), l.finished = event(r);
    CUDA_CHECK(cudaEventRecord(l.reached, s));
    {
      std::lock_guard<std::mutex> lock(mu_);
      r.issuing = call;
      r.since = std::chrono::steady_clock::now();
    }
    try {
      enqueue();
      CUDA_CHECK(cudaEventRecord(l.finished, s));
    } catch (...) {  // the call failed: nothing to watch
      std::lock_guard<std::mutex> lock(mu_);
      r.issuing.clear();
      r.free.insert(r.free.end(), {l.reached, l.finished});
      throw;
    }
    std::lock_guard<std::mutex> lock(mu_);
    r.issuing.clear();
    r.launches.push_back(std::move(l));
  }

  // The rank's lock, taken within `patience` when its thread is not stuck inside NCCL (owns_lock
  // false otherwise): ncclCommAbort must not run while the rank issues calls on the communicator.
  std::unique_lock<std::timed_mutex> hold(int rank, std::chrono::milliseconds patience) {
    std::unique_lock<std::timed_mutex> lock(ranks_.at(rank)->calls, std::defer_lock);
    (void)lock.try_lock_for(patience);
    return lock;
  }

 private:
  struct Launch {
    std::string call;
    cudaEvent_t reached = nullptr, finished = nullptr;
    bool seen_reached = false;
    std::chrono::steady_clock::time_point reached_at;
  };
  struct Rank {
    ncclComm_t comm = nullptr;
    std::timed_mutex calls;        // held while the rank's thread issues NCCL calls
    std::deque<Launch> launches;   // issued, not yet seen finished; guarded by mu_
    std::vector<cudaEvent_t> free; // guarded by mu_
    std::string issuing;           // the host call in progress ("": none); guarded by mu_
    std::chrono::steady_clock::time_point since;
  };
  cudaEvent_t event(Rank& r);
  void loop();
  // "" while all is well; else the failure message (polling one rank under mu_).
  std::string poll(int rank, double timeout_s);

  std::vector<std::unique_ptr<Rank>> ranks_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  OnFail fail_;
  std::thread thread_;
};

}  // namespace pb
