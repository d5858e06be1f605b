// Finds and opens the CUDA backend module (engine/cuda_module.h), and asks the driver how many
// GPUs there are without it. Only in builds that have the module (PARBENCH_HAVE_CUDA).
#include "engine/cuda_module.h"

#ifdef PARBENCH_HAVE_CUDA
#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>

#include "engine/check.h"
#include "engine/comm.h"

namespace pb {

namespace {

constexpr const char* kModuleFile = "libparbench_cuda.so";

struct Loaded {
  std::mutex mu;
  CudaModule* module = nullptr;  // never closed: its objects live as long as the process
  std::string path;
};
Loaded& loaded() {
  static Loaded l;
  return l;
}

std::vector<std::string> module_candidates() {
  if (const char* env = std::getenv("PARBENCH_CUDA_MODULE"); env && *env) return {env};
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return {kModuleFile};  // the loader's own search path
  const std::filesystem::path dir = exe.parent_path();
  return {(dir / kModuleFile).string(), (dir / "lib" / kModuleFile).string(),
          (dir / ".." / "lib" / kModuleFile).string()};
}

}  // namespace

const CudaDriverProbe& cuda_driver_probe() {
  static const CudaDriverProbe probe = [] {
    CudaDriverProbe p;
    // libcuda.so.1 ships with the NVIDIA driver; without it there is no GPU to use.
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      p.note = fmt::format("no CUDA driver ({})", dlerror());
      return p;
    }
    using Init = int (*)(unsigned);
    using Count = int (*)(int*);
    auto init = reinterpret_cast<Init>(dlsym(lib, "cuInit"));
    auto count = reinterpret_cast<Count>(dlsym(lib, "cuDeviceGetCount"));
    if (!init || !count) {
      p.note = "libcuda.so.1 lacks cuInit or cuDeviceGetCount";
    } else if (const int e = init(0); e != 0) {
      constexpr int kNoDevice = 100;  // CUDA_ERROR_NO_DEVICE
      p.note = e == kNoDevice ? "no CUDA device" : fmt::format("cuInit failed (CUresult {})", e);
    } else if (count(&p.devices) != 0 || p.devices <= 0) {
      p.devices = 0;
      p.note = "no CUDA device";
    }
    if (p.devices == 0) dlclose(lib);  // kept open otherwise: the runtime uses it next
    return p;
  }();
  return probe;
}

CudaModule& cuda_module() {
  Loaded& l = loaded();
  std::lock_guard<std::mutex> lock(l.mu);
  if (l.module) return *l.module;
  std::string tried;
  for (const std::string& path : module_candidates()) {
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      tried += fmt::format("\n  {}", dlerror());
      continue;
    }
    auto entry = reinterpret_cast<CudaModuleEntry>(dlsym(h, PARBENCH_CUDA_MODULE_ENTRY));
    if (!entry) throw Error(fmt::format("{} is not a parbench CUDA module (no {})", path, PARBENCH_CUDA_MODULE_ENTRY));
    l.module = entry();
    l.path = path;
    return *l.module;
  }
  throw Error(fmt::format("the CUDA backend module could not be loaded (set PARBENCH_CUDA_MODULE to its path):{}",
                          tried));
}

bool cuda_module_loaded() {
  Loaded& l = loaded();
  std::lock_guard<std::mutex> lock(l.mu);
  return l.module != nullptr;
}

std::string cuda_module_path() {
  Loaded& l = loaded();
  std::lock_guard<std::mutex> lock(l.mu);
  return l.path;
}

// comm.h's factories, served by the module.
#ifdef PARBENCH_HAVE_NCCL
std::unique_ptr<Communicator> make_nccl_communicator(const std::vector<Backend*>& ranks) {
  auto c = cuda_module().make_nccl_communicator(ranks);
  PB_CHECK(c, "the CUDA module was built without NCCL");
  return c;
}
#ifdef PARBENCH_HAVE_MPI
std::unique_ptr<Communicator> make_nccl_mpi_communicator(const std::vector<Backend*>& ranks, int color) {
  auto c = cuda_module().make_nccl_mpi_communicator(ranks, color);
  PB_CHECK(c, "the CUDA module was built without NCCL over MPI");
  return c;
}
#endif
#endif

}  // namespace pb
#endif
