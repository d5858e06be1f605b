#include "strategies/pool.h"

#include <system_error>

#include "engine/check.h"

namespace pb {

WorkerPool::WorkerPool(int n) {
  PB_CHECK(n >= 1, "a pool of {} workers", n);
  threads_.reserve(static_cast<std::size_t>(n - 1));
  for (int i = 1; i < n; ++i) {
    try {
      threads_.emplace_back([this, i] { loop(i); });
    } catch (const std::system_error& e) {
      stop_and_join();  // a joinable std::thread must not be destroyed
      throw Error(fmt::format("could not start worker thread {} of {} ({} started): {}", i + 1, n, i, e.what()));
    }
  }
}

WorkerPool::~WorkerPool() { stop_and_join(); }

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
