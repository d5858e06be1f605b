// The CUDA backend (cuDNN, cuBLAS, NCCL) is a separately built shared module,
// libparbench_cuda.so, opened at run time only when a GPU is used or asked about: loading
// those libraries costs resident memory that a CPU run should not pay.
//
// This header is the whole contract between the program and the module; neither side
// includes CUDA headers through it. The module resolves the engine's own symbols (Allocator,
// Communicator, errors, ...) against the program that opens it, so both must come from one build.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/device.h"

namespace pb {

class Communicator;

class CudaModule {
 public:
  virtual ~CudaModule() = default;
  // GPUs the CUDA runtime sees; 0 (not an error) when there is no driver or no device, with
  // the reason in fill_system_info's cuda_note.
  virtual int device_count() = 0;
  // The PCI bus id of a visible device ("0000:3b:00.0"): the same GPU has the same id in every
  // process of a host, whatever CUDA_VISIBLE_DEVICES made of its index (engine/gpu_placement.h).
  virtual std::string pci_bus_id(int device) = 0;
  virtual std::unique_ptr<Allocator> make_allocator(int device) = 0;
  virtual void copy_bytes(Device dst_dev, void* dst, Device src_dev, const void* src, std::size_t bytes) = 0;
  virtual std::unique_ptr<Backend> make_backend(int device, const BackendOptions& opts) = 0;
  // Versions (runtime, cuDNN, NCCL as built; driver as found), GPUs, and why there are none.
  virtual void fill_system_info(SystemInfo& info) = 0;
  // One rank per distinct GPU in this process; null when the module was built without NCCL.
  virtual std::unique_ptr<Communicator> make_nccl_communicator(const std::vector<Backend*>& ranks) = 0;
  // One GPU rank per MPI process, over the job or (color >= 0) the processes of that color; null
  // when the module was built without NCCL or MPI.
  virtual std::unique_ptr<Communicator> make_nccl_mpi_communicator(const std::vector<Backend*>& ranks, int color) = 0;
};

// The module's one exported symbol; the program looks it up by this name.
#define PARBENCH_CUDA_MODULE_ENTRY "parbench_cuda_module_v2"
using CudaModuleEntry = CudaModule* (*)();

// What the driver says without loading the module (libcuda.so.1 through dlopen): the GPU count,
// or 0 and why (no driver, no device).
struct CudaDriverProbe {
  int devices = 0;
  std::string note;
};
const CudaDriverProbe& cuda_driver_probe();

// The module, opened on first call; throws Error naming every place looked in, or the loader's
// message, when it cannot be opened. Looked for, in order: $PARBENCH_CUDA_MODULE (a file), then
// libparbench_cuda.so beside the running program, in lib/ beside it, and in ../lib.
CudaModule& cuda_module();
bool cuda_module_loaded();
std::string cuda_module_path();  // the file opened; empty until cuda_module() succeeded

}  // namespace pb
