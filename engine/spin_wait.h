// Waiting for another thread of this process: polled first, then blocked.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace pb {

// How long a waiting thread polls before it sleeps. A peer that arrives within it (after equal
// work, the usual case at a collective or a step's start) is met without a sleep and a wake-up,
// which on a VM cost tens of microseconds (docs/internals.md, Waiting for peers). Bounded, and yielding between polls, so that a thread
// waiting for a peer that is not running gives the core away, and costs nothing once asleep.
inline constexpr std::chrono::microseconds kSpinWait{50};

// Polls ready() until it holds or `until` passes, pausing between polls and yielding the core
// every 16; whether it held.
template <class Ready>
bool poll_until(std::chrono::steady_clock::time_point until, Ready ready) {
  do {
    for (int k = 0; k < 16; ++k) {
#if defined(__x86_64__) || defined(__i386__)
      _mm_pause();
#endif
      if (ready()) return true;
    }
    std::this_thread::yield();
  } while (std::chrono::steady_clock::now() < until);
  return false;
}

// Takes `mu`, polling it first: a peer holds it for a few instructions, and a thread that found
// it taken and slept on it (futex) would pay a wake-up; its holder, waking it, pays too.
inline void lock_polling(std::mutex& mu) {
  if (mu.try_lock()) return;
  if (!poll_until(std::chrono::steady_clock::now() + kSpinWait, [&] { return mu.try_lock(); })) mu.lock();
}

// std::unique_lock<std::mutex> lock(mu), taken by lock_polling.
inline std::unique_lock<std::mutex> hold_polling(std::mutex& mu) {
  lock_polling(mu);
  return std::unique_lock<std::mutex>(mu, std::adopt_lock);
}

// A condition variable whose waiters poll before they block. They poll a counter that every
// notify_all() bumps, not the mutex: a poller taking the mutex over and over would make the
// thread that comes to change the state sleep on it.
class SpinCondition {
 public:
  // After changing, under the mutex, what waiters' predicates read.
  void notify_all() {
    epoch_.fetch_add(1, std::memory_order_release);
    cv_.notify_all();
  }

  // cv.wait(lock, done), done() read under the lock.
  template <class Pred>
  void wait(std::unique_lock<std::mutex>& lock, Pred done) {
    if (done()) return;
    const auto until = std::chrono::steady_clock::now() + kSpinWait;
    uint64_t seen = epoch_.load(std::memory_order_acquire);
    for (;;) {
      lock.unlock();
      const bool changed = std::chrono::steady_clock::now() < until &&
                           poll_until(until, [&] { return epoch_.load(std::memory_order_acquire) != seen; });
      lock = hold_polling(*lock.mutex());
      if (done()) return;
      if (!changed) break;
      seen = epoch_.load(std::memory_order_acquire);
    }
    cv_.wait(lock, done);
  }

 private:
  std::atomic<uint64_t> epoch_{0};
  std::condition_variable cv_;
};

}  // namespace pb
