// Linked only into PARBENCH_STATIC_RUNTIME builds (the GPU bundle), which carry this compiler's
// libstdc++ to systems whose glibc may be older than the one it was built on. Its
// std::random_device calls arc4random, which glibc has only from 2.36; this private definition
// (hidden: no other library sees it) serves that call from getrandom (glibc 2.25), so the
// programs need no glibc newer than 2.34.
#include <sys/random.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>

extern "C" __attribute__((visibility("hidden"))) uint32_t arc4random(void) {
  uint32_t v = 0;
  ssize_t got = 0;
  do {
    got = getrandom(&v, sizeof v, 0);
  } while (got < 0 && errno == EINTR);
  if (got != static_cast<ssize_t>(sizeof v)) std::abort();  // as glibc's: no fallback to a weak source
  return v;
}
