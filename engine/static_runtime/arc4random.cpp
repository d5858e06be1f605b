// Linked only with PARBENCH_STATIC_RUNTIME (the GPU bundle): libstdc++'s std::random_device, built
// on glibc 2.36, calls arc4random, which older glibc lacks; this definition, in each binary, takes
// the bytes from getrandom (glibc 2.25) so that the bundle runs on glibc 2.34 (RHEL 9).
#include <sys/random.h>

#include <cstdint>

extern "C" std::uint32_t arc4random() {
  std::uint32_t v = 0;
  // getrandom on the urandom source: short reads and EINTR only; retried until all 4 bytes came.
  while (getrandom(&v, sizeof v, 0) != static_cast<ssize_t>(sizeof v)) {
  }
  return v;
}
