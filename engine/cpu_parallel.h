// The CPU backend's element-wise and blocked loops: on a team of `threads` when the work is worth
// waking one for, else on the calling thread without entering a parallel region at all -- libgomp
// allocates a team and makes a futex call for every region, a team of one included, which on a
// small net costs more than the loop.
#pragma once

#include <cstdint>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace pb {

// Work below this many elements is not worth waking a thread team for.
constexpr int64_t kParallelGrain = 1 << 15;

inline int team(int64_t work, int threads) { return work < kParallelGrain ? 1 : threads; }

// body(i) for i in [0, count), statically scheduled over team(work, threads) threads. The body
// is taken by value and an element-wise one captures its scalars by value ([=]), so that they
// need not be read through a reference at every element.
template <class Body>
inline void parallel_for(int64_t work, int threads, int64_t count, Body body) {
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
inline void parallel_for_simd(int64_t n, int threads, Body body) {
  const int t = team(n, threads);
  if (t <= 1) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) body(i);
    return;
  }
#pragma omp parallel for simd num_threads(t) schedule(static)
  for (int64_t i = 0; i < n; ++i) body(i);
}

// body(lo, hi) over contiguous pieces of [0, n), one per thread of team(n, threads) as
// schedule(static) splits them: for a body that runs its own loop (Adam's ran 6x slower as a
// per-element body).
template <class Body>
inline void parallel_ranges(int64_t n, int threads, Body body) {
  const int t = team(n, threads);
  if (t <= 1) return body(int64_t{0}, n);
#pragma omp parallel num_threads(t)
  {
#ifdef _OPENMP
    const int64_t k = omp_get_thread_num(), T = omp_get_num_threads();
#else
    const int64_t k = 0, T = 1;
#endif
    const int64_t per = n / T, extra = n % T;
    const int64_t lo = k * per + (k < extra ? k : extra);
    body(lo, lo + per + (k < extra ? 1 : 0));
  }
}

}  // namespace pb
