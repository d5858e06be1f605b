// The persistent threads that drive a process's local workers: one per worker, alive from setup
// to destruction, fed one task per call. Task 0 runs on the calling thread, so a single local
// worker (regular, any strategy at one device, a rank of a multi-process job) needs no thread
// and no handoff inside the timed step.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/spin_wait.h"

namespace pb {

class WorkerPool {
 public:
  // Error naming how many threads started when the system refuses one (thread or memory limits).
  // cores: empty, or a CPU per task: task i's thread is bound to cores[i], the calling thread (task
  // 0) from here until the pool is destroyed, when it gets its own CPUs back.
  explicit WorkerPool(int n, std::vector<int> cores = {});
  // A CPU per task for tasks that each run one thread: the calling thread's CPUs in turn (round
  // robin when there are more tasks); empty for one task, for tasks of several threads (their
  // teams need more than a core), or where threads are not bound. With
  // waits that poll (engine/spin_wait.h), unbound threads often pile onto one core while another
  // idles, and a step's time then depends on where the scheduler put them (docs/internals.md,
  // Where workers run).
  static std::vector<int> cores_for(int n, int threads_per_task);
  ~WorkerPool();  // joins
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;
  int size() const { return static_cast<int>(threads_.size()) + 1; }
  // Runs fn(i) for i < count (i = 0 on the calling thread, i > 0 always on the same pool thread)
  // and returns when all are done, rethrowing the first exception. on_error runs on a failing
  // task's thread, e.g. to abort a communicator the other tasks are blocked in.
  void run(int count, const std::function<void(int)>& fn, const std::function<void()>& on_error = {});

 private:
  void loop(int i);
  void stop_and_join() noexcept;
  void record_failure(const std::function<void()>& on_error);
  std::mutex mu_;  // guards everything below; also orders the caller's writes before a task's reads
  SpinCondition start_cv_, done_cv_;
  const std::function<void(int)>* fn_ = nullptr;
  const std::function<void()>* on_error_ = nullptr;
  int count_ = 0, pending_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  std::vector<std::thread> threads_;  // task i > 0 runs on threads_[i - 1]
  std::vector<int> cores_;
  std::vector<int> caller_cores_;  // the calling thread's CPUs before it was bound
};

}  // namespace pb
