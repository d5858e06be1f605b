// The backend factory: the CPU backend here, the CUDA backend from the CUDA module.
#include "engine/backend.h"
#include "engine/check.h"
#include "engine/cpu_backend.h"
#include "engine/cuda_module.h"

namespace pb {

std::unique_ptr<Backend> make_backend(Device d, const BackendOptions& opts) {
  if (d.kind == DeviceKind::Cpu) return std::make_unique<CpuBackend>(d, opts);
#ifdef PARBENCH_HAVE_CUDA
  return cuda_module().make_backend(d.index, opts);
#else
  throw Error(fmt::format("{} requested, but this build has no CUDA support", d.str()));
#endif
}

}  // namespace pb
