// Devices and their memory accounting. A CPU "device" is a worker slot that shares the cores;
// a CUDA device is one GPU.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace pb {

enum class DeviceKind { Cpu, Cuda };

struct Device {
  DeviceKind kind = DeviceKind::Cpu;
  int index = 0;
  bool operator==(const Device& o) const { return kind == o.kind && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
  std::string str() const;
};

inline Device cpu(int index = 0) { return {DeviceKind::Cpu, index}; }
inline Device cuda(int index = 0) { return {DeviceKind::Cuda, index}; }

// What a device's bytes hold: the engine's own tensors, or scratch the libraries and kernels
// keep between calls (oneDNN scratchpads and reorder buffers, im2col, Winograd transforms, cuDNN
// workspace).
enum class MemoryPool { Tensors, Workspace };

// Raw allocation on one device with current/peak byte counts, in all and per pool. The peak in
// all is the allocator's part of "peak memory per device"; an allocation that does not fit throws
// OutOfMemory. Scratch a library holds in its own allocations is counted with note().
class Allocator {
 public:
  virtual ~Allocator() = default;
  void* allocate(std::size_t bytes, MemoryPool pool = MemoryPool::Tensors);
  void release(void* p, std::size_t bytes, MemoryPool pool = MemoryPool::Tensors) noexcept;
  // Bytes held on this device outside allocate(): +n when a scratch grows by n, -n when it goes.
  void note(MemoryPool pool, std::ptrdiff_t delta) noexcept;
  std::size_t current_bytes() const { return current_.load(); }
  std::size_t peak_bytes() const { return peak_.load(); }
  std::size_t current_bytes(MemoryPool pool) const { return pool_current_[index(pool)].load(); }
  std::size_t peak_bytes(MemoryPool pool) const { return pool_peak_[index(pool)].load(); }
  // A pool's bytes at the moment of the peak in all: the parts of peak_bytes(), which add up to it.
  std::size_t at_peak_bytes(MemoryPool pool) const { return at_peak_[index(pool)].load(); }
  // Calls of allocate() and growths noted, since the process began: a step that allocates
  // nothing (the steady state after warm-up) leaves it unchanged.
  std::size_t allocations() const { return allocations_.load(); }
  void reset_peak();
  // Bytes this process uses on the device as its driver reports them, allocator and runtime
  // (libraries' handles and scratch, loaded kernels) together: CUDA, growth of cudaMemGetInfo's
  // used memory since before the first allocation here; 0 where there is no such figure (CPU).
  virtual std::size_t process_used_bytes() const { return 0; }

 protected:
  virtual void* raw_allocate(std::size_t bytes) = 0;
  virtual void raw_release(void* p) noexcept = 0;

 private:
  static int index(MemoryPool p) { return p == MemoryPool::Tensors ? 0 : 1; }
  void add(MemoryPool pool, std::size_t bytes) noexcept;
  void sub(MemoryPool pool, std::size_t bytes) noexcept;
  std::atomic<std::size_t> current_{0};
  std::atomic<std::size_t> peak_{0};
  std::atomic<std::size_t> pool_current_[2] = {0, 0};
  std::atomic<std::size_t> pool_peak_[2] = {0, 0};
  std::atomic<std::size_t> at_peak_[2] = {0, 0};
  std::atomic<std::size_t> allocations_{0};
};

// Counts a scratch buffer that a library or kernel allocates itself as workspace of a device:
// set(bytes) after it grows or shrinks; the destructor takes it off.
class WorkspaceCount {
 public:
  explicit WorkspaceCount(Device d) : dev_(d) {}
  ~WorkspaceCount() { set(0); }
  WorkspaceCount(const WorkspaceCount&) = delete;
  WorkspaceCount& operator=(const WorkspaceCount&) = delete;
  void set(std::size_t bytes) noexcept;
  std::size_t bytes() const { return held_; }

 private:
  Device dev_;
  std::size_t held_ = 0;
};

// One allocator per device, created on first use, alive for the process.
Allocator& allocator_for(Device d);

// Copies bytes between any two devices (host<->GPU, GPU<->GPU, host<->host); returns when the
// destination holds the data.
void copy_bytes(Device dst_dev, void* dst, Device src_dev, const void* src, std::size_t bytes);

// Number of CUDA devices usable by this build (0 without CUDA or without a driver).
int cuda_device_count();

// What this build and machine offer, for `parbench devices` and the JSON context of a run.
struct GpuInfo {
  int index = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;  // compute capability, e.g. 9.0 for H100/H200
  std::size_t total_bytes = 0;
  int multiprocessors = 0;
};

struct SystemInfo {
  unsigned cpu_threads = 0;
  bool cuda_built = false, nccl_built = false;
  // Versions as the libraries report them: driver/runtime 1000*major + 10*minor (13000 =
  // 13.0; driver 0 = no driver), cuDNN and NCCL 10000*major + 100*minor + patch.
  int cuda_driver_version = 0, cuda_runtime_version = 0;
  int cudnn_version = 0, nccl_version = 0;
  std::vector<GpuInfo> gpus;
  std::string cuda_note;  // why no GPU is usable ("no CUDA driver ..."), empty otherwise
  std::string cuda_module;  // the CUDA backend module's file, when it was loaded
  std::string str() const;  // a few human-readable lines
};

// IfGpus leaves the CUDA module unloaded where the driver sees no GPU (the library versions
// are then 0); Always loads it to report the versions this build's CUDA backend runs with.
enum class CudaInfo { IfGpus, Always };
SystemInfo system_info(CudaInfo what = CudaInfo::IfGpus);

}  // namespace pb
