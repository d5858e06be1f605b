// Sets this thread's OpenMP team size for oneDNN (it reads the calling thread's
// omp_get_max_threads(), a per-thread setting, when it creates and runs primitives) and restores
// the caller's value after.
#pragma once

#ifdef _OPENMP
#include <omp.h>
#endif

namespace pb {

class OmpThreads {
 public:
  explicit OmpThreads(int n) {
#ifdef _OPENMP
    saved_ = omp_get_max_threads();
    if (saved_ != n) omp_set_num_threads(n);
#else
    (void)n;
#endif
  }
  ~OmpThreads() {
#ifdef _OPENMP
    if (omp_get_max_threads() != saved_) omp_set_num_threads(saved_);
#endif
  }
  OmpThreads(const OmpThreads&) = delete;
  OmpThreads& operator=(const OmpThreads&) = delete;

 private:
  int saved_ = 1;
};

}  // namespace pb
