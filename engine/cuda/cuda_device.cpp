// GPU allocators, copies between any two devices, and device discovery (what engine/device.cpp
// reaches through the CUDA module).
#include <mutex>
#include <set>

#include "engine/check.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/cuda_util.h"
#ifdef PARBENCH_HAVE_NCCL
#include <nccl.h>
#endif

namespace pb {

namespace {

std::string cuda_name(int device) { return Device{DeviceKind::Cuda, device}.str(); }

class CudaAllocator final : public Allocator {
 public:
  // The baseline is what the device holds before this process's first allocation there: other
  // processes' memory, and this process's context (which the first call makes; not counted).
  explicit CudaAllocator(int device) : device_(device), baseline_(driver_used()) {}
  // Growth since the baseline: this process's allocations, handles and loaded kernels, as long
  // as other processes on the GPU hold what they held then.
  std::size_t process_used_bytes() const override {
    const std::size_t used = driver_used();
    return used > baseline_ ? used - baseline_ : 0;
  }

 protected:
  void* raw_allocate(std::size_t bytes) override {
    if (bytes == 0) return nullptr;  // an empty tensor owns no device memory
    cu::use_device(device_);
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, bytes);
    if (e == cudaErrorMemoryAllocation) {
      // Not sticky, but still the "last error": clear it so the next launch check does not
      // report this allocation.
      (void)cudaGetLastError();
      std::size_t free_bytes = 0, total = 0;
      if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) (void)cudaGetLastError();
      throw OutOfMemory(cuda_name(device_), bytes, free_bytes);
    }
    CUDA_CHECK(e);
    return p;
  }

  void raw_release(void* p) noexcept override {
    // cudaFree waits for the device's queued work, so a buffer still in use by a kernel is
    // never freed under it. Errors are ignored: at exit the runtime may be gone already.
    if (cudaSetDevice(device_) != cudaSuccess || cudaFree(p) != cudaSuccess) (void)cudaGetLastError();
  }

 private:
  std::size_t driver_used() const {
    cu::use_device(device_);
    std::size_t free_bytes = 0, total = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
    return total - free_bytes;
  }

  int device_;
  std::size_t baseline_;
};

struct DeviceCount {
  int count = 0;
  std::string note;  // why there are none, when there are none
};

const DeviceCount& device_count() {
  static const DeviceCount dc = [] {
    DeviceCount out;
    const cudaError_t e = cudaGetDeviceCount(&out.count);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();  // no driver or no device: zero GPUs, not an error
      out.count = 0;
      out.note = fmt::format("{}: {}", cudaGetErrorName(e), cudaGetErrorString(e));
    } else if (out.count == 0) {
      out.note = "no CUDA device";
    }
    return out;
  }();
  return dc;
}

// Peer access makes GPU-to-GPU copies direct (NVLink/PCIe) instead of staged through the
// host; enabled once per ordered pair, where the hardware allows it.
void enable_peer_access(int from, int to) {
  static std::mutex mu;
  static std::set<std::pair<int, int>> done;
  std::lock_guard<std::mutex> lock(mu);
  if (!done.insert({from, to}).second) return;
  int can = 0;
  CUDA_CHECK(cudaDeviceCanAccessPeer(&can, from, to));
  if (!can) return;
  cu::use_device(from);
  const cudaError_t e = cudaDeviceEnablePeerAccess(to, 0);
  if (e == cudaErrorPeerAccessAlreadyEnabled) {
    (void)cudaGetLastError();
    return;
  }
  CUDA_CHECK(e);
}

}  // namespace

std::unique_ptr<Allocator> make_cuda_allocator(int device) {
  const int n = cuda_count_devices();
  if (device < 0 || device >= n)
    throw Error(fmt::format("{} requested, but this machine has {} CUDA device(s){}", cuda_name(device), n,
                            device_count().note.empty() ? "" : " (" + device_count().note + ")"));
  return std::make_unique<CudaAllocator>(device);
}

void cuda_copy_async(Device dst_dev, void* dst, Device src_dev, const void* src, std::size_t bytes,
                     cudaStream_t stream) {
  if (bytes == 0) return;
  const bool dst_gpu = dst_dev.kind == DeviceKind::Cuda, src_gpu = src_dev.kind == DeviceKind::Cuda;
  if (dst_gpu && src_gpu && dst_dev.index != src_dev.index) enable_peer_access(src_dev.index, dst_dev.index);
  // Unified addressing: the runtime tells host, this GPU and a peer apart from the pointers.
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream));
}

void cuda_copy_bytes(Device dst_dev, void* dst, Device src_dev, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  const bool dst_gpu = dst_dev.kind == DeviceKind::Cuda, src_gpu = src_dev.kind == DeviceKind::Cuda;
  if (dst_gpu && src_gpu && dst_dev.index != src_dev.index) {
    // Stream-ordered, not device-wide: the legacy default stream of each device orders after
    // the backends' blocking streams there, so an event on the destination's and the copy on
    // the source's make the copy wait for both sides' queued work; only that stream is then
    // waited for. (cudaMemcpyPeer + cudaDeviceSynchronize would also stall every other stream
    // of the destination, e.g. another worker's compute or a collective in flight.)
    cu::use_device(dst_dev.index);
    cu::Event dst_ready(cudaEventDisableTiming);
    CUDA_CHECK(cudaEventRecord(dst_ready, cudaStreamLegacy));
    cu::use_device(src_dev.index);
    CUDA_CHECK(cudaStreamWaitEvent(cudaStreamLegacy, dst_ready, 0));
    cuda_copy_async(dst_dev, dst, src_dev, src, bytes, cudaStreamLegacy);
    CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
    return;
  }
  cu::use_device(dst_gpu ? dst_dev.index : src_dev.index);
  // The legacy default stream waits for the backends' (blocking) streams on this device, so
  // the copy sees their finished results; synchronizing it makes the copy complete on return.
  // (Communicators copy on their own non-blocking streams instead: Backend::copy.)
  cuda_copy_async(dst_dev, dst, src_dev, src, bytes, cudaStreamLegacy);
  CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
}

int cuda_count_devices() { return device_count().count; }

void cuda_fill_system_info(SystemInfo& info) {
  info.cuda_built = true;
  if (cudaDriverGetVersion(&info.cuda_driver_version) != cudaSuccess) {
    (void)cudaGetLastError();
    info.cuda_driver_version = 0;
  }
  if (cudaRuntimeGetVersion(&info.cuda_runtime_version) != cudaSuccess) {
    (void)cudaGetLastError();
    info.cuda_runtime_version = 0;
  }
  info.cudnn_version = static_cast<int>(cudnnGetVersion());
#ifdef PARBENCH_HAVE_NCCL
  info.nccl_built = true;
  if (ncclGetVersion(&info.nccl_version) != ncclSuccess) info.nccl_version = 0;
#endif
  info.cuda_note = device_count().note;
  for (int i = 0; i < device_count().count; ++i) {
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, i));
    GpuInfo g;
    g.index = i;
    g.name = prop.name;
    g.cc_major = prop.major;
    g.cc_minor = prop.minor;
    g.total_bytes = prop.totalGlobalMem;
    g.multiprocessors = prop.multiProcessorCount;
    info.gpus.push_back(g);
  }
}

}  // namespace pb
