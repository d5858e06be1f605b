// Makes OpenMP threads wait passively by default: a .preinit_array entry re-executes the
// program with OMP_WAIT_POLICY=PASSIVE before any library is initialised.
#if defined(_OPENMP) && defined(__linux__)
#include <cstddef>
#include <cstring>
#include <iterator>

#include <unistd.h>

// OpenMP threads wait passively (sleep in the kernel) at the end of a parallel region unless the
// user chose otherwise. libgomp's default spins up to 300000 times per barrier, and when another
// process holds one of the cores the spinning thread burns its time slice waiting for a teammate
// that is not running: a step then takes 10-30x longer (docs/PERFORMANCE.md). libgomp reads
// OMP_WAIT_POLICY once, in its own constructor, and libc installs the environment only after an
// executable's .preinit_array has run, so the only way in is the environment of a fresh exec:
// this runs before any library is initialised and re-executes the program with the variable
// added (once: the new process has it). If the exec fails, the program goes on as it was.
namespace {
bool names(const char* entry, const char* name) {
  const std::size_t n = std::strlen(name);
  return std::strncmp(entry, name, n) == 0 && entry[n] == '=';
}
void default_passive_openmp_wait(int, char** argv, char** envp) {
  static char policy[] = "OMP_WAIT_POLICY=PASSIVE";
  static char* env[4096];
  std::size_t n = 0;
  for (; envp && envp[n]; ++n) {
    if (names(envp[n], "OMP_WAIT_POLICY") || names(envp[n], "GOMP_SPINCOUNT")) return;
    if (n + 2 >= std::size(env)) return;
    env[n] = envp[n];
  }
  env[n] = policy;
  env[n + 1] = nullptr;
  execve("/proc/self/exe", argv, env);  // returns only when it fails
}
}  // namespace
__attribute__((section(".preinit_array"), used)) static void (*const pb_preinit_openmp_wait)(int, char**, char**) =
    default_passive_openmp_wait;
#endif
