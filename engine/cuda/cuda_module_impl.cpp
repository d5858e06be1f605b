// The module's side of engine/cuda_module.h: libparbench_cuda.so exports one entry point that
// hands the program these CUDA functions.
#include <cuda_runtime.h>

#include "engine/check.h"
#include "engine/comm.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/cuda_module.h"

namespace pb {
namespace {

class CudaModuleImpl final : public CudaModule {
 public:
  int device_count() override { return cuda_count_devices(); }
  std::string pci_bus_id(int device) override {
    char id[64] = {0};  // "domain:bus:device.function", 13 characters and a NUL at most
    CUDA_CHECK(cudaDeviceGetPCIBusId(id, static_cast<int>(sizeof id), device));
    return id;
  }
  std::unique_ptr<Allocator> make_allocator(int device) override { return make_cuda_allocator(device); }
  void copy_bytes(Device dst_dev, void* dst, Device src_dev, const void* src, std::size_t bytes) override {
    cuda_copy_bytes(dst_dev, dst, src_dev, src, bytes);
  }
  std::unique_ptr<Backend> make_backend(int device, const BackendOptions& opts) override {
    return make_cuda_backend(device, opts);
  }
  void fill_system_info(SystemInfo& info) override { cuda_fill_system_info(info); }
  std::unique_ptr<Communicator> make_nccl_communicator(const std::vector<Backend*>& ranks) override {
#ifdef PARBENCH_HAVE_NCCL
    return pb::make_nccl_communicator(ranks);  // the module's own (linked -Bsymbolic-functions)
#else
    (void)ranks;
    return nullptr;
#endif
  }
  std::unique_ptr<Communicator> make_nccl_mpi_communicator(const std::vector<Backend*>& ranks, int color) override {
#if defined(PARBENCH_HAVE_NCCL) && defined(PARBENCH_HAVE_MPI)
    return pb::make_nccl_mpi_communicator(ranks, color);
#else
    (void)ranks, (void)color;
    return nullptr;
#endif
  }
};

}  // namespace
}  // namespace pb

extern "C" __attribute__((visibility("default"))) pb::CudaModule* parbench_cuda_module_v2() {
  static pb::CudaModuleImpl module;
  return &module;
}
