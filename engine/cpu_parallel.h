// The CPU backend's element-wise and blocked loops: on a team of `threads` when the work is worth
// waking one for, else on the calling thread without entering a parallel region at all -- libgomp
// allocates a team and makes a futex call for every region, a team of one included, which on a
// small net costs more than the loop.
#pragma once

#include <cstdint>

namespace pb {

// Work below this many elements is not worth waking a thread team for.
constexpr int64_t kParallelGrain = 1 << 15;

inline int team(int64_t work, int threads) { return work < kParallelGrain ? 1 : threads; }

// body(i) for i in [0, count), statically scheduled over team(work, threads) threads.
template <class Body>
inline void parallel_for(int64_t work, int threads, int64_t count, Body&& body) {
  const int t = team(work, threads);
  if (t <= 1) {
    for (int64_t i = 0; i < count; ++i) body(i);
    return;
  }
#pragma omp parallel for num_threads(t) schedule(static)
  for (int64_t i = 0; i < count; ++i) body(i);
}

// The same over n elements of work, vectorised (omp simd) on one thread and on a team.
template <class Body>
inline void parallel_for_simd(int64_t n, int threads, Body&& body) {
  const int t = team(n, threads);
  if (t <= 1) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) body(i);
    return;
  }
#pragma omp parallel for simd num_threads(t) schedule(static)
  for (int64_t i = 0; i < n; ++i) body(i);
}

}  // namespace pb
