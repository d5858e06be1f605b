#include "strategies/pool.h"

#include <system_error>

#ifdef __linux__
#include <pthread.h>
#include <sched.h>
#endif

#include "engine/check.h"
#include "engine/spin_wait.h"

namespace pb {

namespace {

#ifdef __linux__
std::vector<int> own_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> out;
  if (pthread_getaffinity_np(pthread_self(), sizeof(set), &set) != 0) return out;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) out.push_back(c);
  return out;
}

void bind_to(const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) CPU_SET(c, &set);
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);  // best effort: unbound still works
}
#else
std::vector<int> own_cpus() { return {}; }
void bind_to(const std::vector<int>&) {}
#endif

}  // namespace

std::vector<int> WorkerPool::cores_for(int n, int threads_per_task) {
  std::vector<int> out;
  if (n < 2 || threads_per_task != 1) return out;
  const std::vector<int> cpus = own_cpus();
  if (cpus.empty()) return out;
  for (int i = 0; i < n; ++i) out.push_back(cpus[static_cast<std::size_t>(i) % cpus.size()]);
  return out;
}

WorkerPool::WorkerPool(int n, std::vector<int> cores) : cores_(std::move(cores)) {
  PB_CHECK(n >= 1, "a pool of {} workers", n);
  PB_CHECK(cores_.empty() || static_cast<int>(cores_.size()) == n, "{} cores for a pool of {} workers", cores_.size(), n);
  if (!cores_.empty()) {
    caller_cores_ = own_cpus();
    bind_to({cores_[0]});
  }
  threads_.reserve(static_cast<std::size_t>(n - 1));
  for (int i = 1; i < n; ++i) {
    try {
      threads_.emplace_back([this, i] { loop(i); });
    } catch (const std::system_error& e) {
      stop_and_join();  // a joinable std::thread must not be destroyed
      if (!caller_cores_.empty()) bind_to(caller_cores_);
      throw Error(fmt::format("could not start worker thread {} of {} ({} started): {}", i + 1, n, i, e.what()));
    }
  }
}

WorkerPool::~WorkerPool() {
  stop_and_join();
  if (!caller_cores_.empty()) bind_to(caller_cores_);
}

void WorkerPool::stop_and_join() noexcept {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

void WorkerPool::record_failure(const std::function<void()>& on_error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_) error_ = std::current_exception();  // the first failure, not the aborts it causes
  }
  if (on_error) on_error();
}

void WorkerPool::run(int count, const std::function<void(int)>& fn, const std::function<void()>& on_error) {
  PB_CHECK(0 <= count && count <= size(), "{} tasks for {} workers", count, size());
  if (count == 0) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    error_ = nullptr;
    if (count > 1) {
      fn_ = &fn;
      on_error_ = &on_error;
      count_ = count;
      pending_ = count - 1;
      ++generation_;
      start_cv_.notify_all();
    }
  }
  try {
    fn(0);
  } catch (...) {
    record_failure(on_error);
  }
  std::exception_ptr error;
  {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return pending_ == 0; });
    error = error_;
  }
  if (error) std::rethrow_exception(error);
}

void WorkerPool::loop(int i) {
  if (!cores_.empty()) bind_to({cores_[i]});
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int)>* fn = nullptr;
    const std::function<void()>* on_error = nullptr;
    {
      std::unique_lock<std::mutex> lock(mu_);
      start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      if (i >= count_) continue;  // not part of this task
      fn = fn_;
      on_error = on_error_;
    }
    try {
      (*fn)(i);
    } catch (...) {
      record_failure(*on_error);
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (--pending_ == 0) done_cv_.notify_all();
  }
}

}  // namespace pb
