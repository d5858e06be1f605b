// The NCCL watchdog's thread (engine/nccl/nccl_watchdog.h).
#include "engine/nccl/nccl_watchdog.h"

#include "engine/nccl_watch.h"
#include "engine/process.h"

namespace pb {

NcclWatchdog::~NcclWatchdog() {
  stop();
  for (auto& r : ranks_) {
    for (Launch& l : r->launches) r->free.insert(r->free.end(), {l.reached, l.finished});
    for (cudaEvent_t e : r->free) cudaEventDestroy(e);
  }
}

void NcclWatchdog::start(OnFail fail) {
  fail_ = std::move(fail);
  thread_ = std::thread([this] { loop(); });
}

void NcclWatchdog::stop() noexcept {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  // From the watchdog's own thread (its failure aborting the communicator): it returns by itself.
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

cudaEvent_t NcclWatchdog::event(Rank& r) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!r.free.empty()) {
      cudaEvent_t e = r.free.back();
      r.free.pop_back();
      return e;
    }
  }
  cudaEvent_t e = nullptr;  // only polled: no timing
  CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}

// Every 20 ms: far below any timeout worth setting, and a negligible load on the host.
void NcclWatchdog::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, std::chrono::milliseconds(20));
    if (stop_) break;
    const double timeout_s = comm_timeout();
    for (int r = 0; r < static_cast<int>(ranks_.size()); ++r) {
      const std::string msg = poll(r, timeout_s);
      if (msg.empty()) continue;
      lock.unlock();
      fail_(msg);  // once: the communicator is aborted and unusable afterwards
      return;
    }
  }
}

std::string NcclWatchdog::poll(int rank, double timeout_s) {
  Rank& r = *ranks_[rank];
  if (!r.comm) return {};
  const auto now = std::chrono::steady_clock::now();
  WatchState s;
  s.timeout_s = timeout_s;
  ncclResult_t async = ncclSuccess;
  if (ncclCommGetAsyncError(r.comm, &async) != ncclSuccess) async = ncclInternalError;
  if (async != ncclSuccess && async != ncclInProgress)
    s.error = fmt::format("{} ({})", ncclGetErrorString(async), ncclGetLastError(r.comm));
  // Launches finish in stream order: the first unfinished one is what the rank waits in.
  while (!r.launches.empty()) {
    Launch& l = r.launches.front();
    const cudaError_t e = cudaEventQuery(l.finished);
    if (e == cudaSuccess) {
      r.free.insert(r.free.end(), {l.reached, l.finished});
      r.launches.pop_front();
      continue;
    }
    if (e != cudaErrorNotReady && s.error.empty()) s.error = cudaGetErrorString(e);
    if (!l.seen_reached && cudaEventQuery(l.reached) == cudaSuccess) l.seen_reached = true, l.reached_at = now;
    break;
  }
  std::string call = "communicator";
  if (!r.issuing.empty()) {  // a host call into NCCL (connection set-up can wait for the peer)
    call = r.issuing;
    s.reached = true;
    s.waited_s = std::chrono::duration<double>(now - r.since).count();
  } else if (!r.launches.empty()) {
    const Launch& l = r.launches.front();
    call = l.call;
    s.reached = l.seen_reached;
    s.waited_s = l.seen_reached ? std::chrono::duration<double>(now - l.reached_at).count() : 0;
  } else {
    s.finished = true;
  }
  const WatchVerdict v = watch_verdict(s);
  return v == WatchVerdict::Failed || v == WatchVerdict::TimedOut ? watch_message(rank, call, s, v) : std::string();
}

}  // namespace pb
