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

// Raw allocation on one device with current/peak byte counts. Peak is what reports show as
// "peak memory per device"; an allocation that does not fit throws OutOfMemory.
class Allocator {
 public:
  virtual ~Allocator() = default;
  void* allocate(std::size_t bytes);
  void release(void* p, std::size_t bytes) noexcept;
  std::size_t current_bytes() const { return current_.load(); }
  std::size_t peak_bytes() const { return peak_.load(); }
  void reset_peak() { peak_.store(current_.load()); }

 protected:
  virtual void* raw_allocate(std::size_t bytes) = 0;
  virtual void raw_release(void* p) noexcept = 0;

 private:
  std::atomic<std::size_t> current_{0};
  std::atomic<std::size_t> peak_{0};
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
