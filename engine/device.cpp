// Per-device allocators, cross-device copies, device discovery. CUDA devices are served by
// the CUDA module (engine/cuda_module.h), opened only when a GPU is used or asked about.
#include "engine/device.h"
#include "engine/cpu_model.h"
#include "engine/memory_estimate.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "engine/backend.h"
#include "engine/check.h"
#include "engine/cuda_module.h"

namespace pb {

std::string Device::str() const {
  return fmt::format("{}:{}", kind == DeviceKind::Cpu ? "cpu" : "cuda", index);
}

namespace {
void raise_to(std::atomic<std::size_t>& peak, std::size_t now) noexcept {
  std::size_t p = peak.load();
  while (now > p && !peak.compare_exchange_weak(p, now)) {
  }
}
}  // namespace

void Allocator::add(MemoryPool pool, std::size_t bytes) noexcept {
  auto& c = pool_current_[index(pool)];
  raise_to(pool_peak_[index(pool)], c.fetch_add(bytes) + bytes);
  const std::size_t now = current_.fetch_add(bytes) + bytes;
  if (now > peak_.load()) {
    raise_to(peak_, now);
    // The composition of the new peak (exact when one thread allocates on this device at a time,
    // as a worker does; the parts then add up to the peak).
    const std::size_t other = pool_current_[1 - index(pool)].load();
    at_peak_[1 - index(pool)].store(other);
    at_peak_[index(pool)].store(now - other);
  }
}

void Allocator::sub(MemoryPool pool, std::size_t bytes) noexcept {
  current_.fetch_sub(bytes);
  pool_current_[index(pool)].fetch_sub(bytes);
}

void* Allocator::allocate(std::size_t bytes, MemoryPool pool) {
  void* p = raw_allocate(bytes);
  allocations_.fetch_add(1);
  add(pool, bytes);
  return p;
}

void Allocator::release(void* p, std::size_t bytes, MemoryPool pool) noexcept {
  if (!p) return;
  raw_release(p);
  sub(pool, bytes);
}

void Allocator::note(MemoryPool pool, std::ptrdiff_t delta) noexcept {
  if (delta > 0) allocations_.fetch_add(1);
  if (delta > 0) add(pool, static_cast<std::size_t>(delta));
  if (delta < 0) sub(pool, static_cast<std::size_t>(-delta));
}

void Allocator::reset_peak() {
  peak_.store(current_.load());
  for (int i = 0; i < 2; ++i) pool_peak_[i].store(pool_current_[i].load());
  for (int i = 0; i < 2; ++i) at_peak_[i].store(pool_current_[i].load());
}

void WorkspaceCount::set(std::size_t bytes) noexcept {
  if (bytes == held_) return;
  allocator_for(dev_).note(MemoryPool::Workspace, static_cast<std::ptrdiff_t>(bytes) - static_cast<std::ptrdiff_t>(held_));
  held_ = bytes;
}

namespace {

class CpuAllocator final : public Allocator {
 protected:
  void* raw_allocate(std::size_t bytes) override {
    // 64-byte alignment for vector loads; aligned_alloc needs a multiple of the alignment.
    std::size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
    if (!p) throw OutOfMemory("cpu", bytes, available_ram_bytes());
    return p;
  }
  void raw_release(void* p) noexcept override { std::free(p); }
};

}  // namespace

Allocator& allocator_for(Device d) {
  static std::mutex mu;
  static std::map<std::pair<int, int>, std::unique_ptr<Allocator>> allocators;
  std::lock_guard<std::mutex> lock(mu);
  auto key = std::make_pair(static_cast<int>(d.kind), d.index);
  auto it = allocators.find(key);
  if (it != allocators.end()) return *it->second;
  std::unique_ptr<Allocator> a;
  if (d.kind == DeviceKind::Cpu) {
    a = std::make_unique<CpuAllocator>();
  } else {
#ifdef PARBENCH_HAVE_CUDA
    a = cuda_module().make_allocator(d.index);
#else
    throw Error(fmt::format("{} requested, but this build has no CUDA support", d.str()));
#endif
  }
  return *allocators.emplace(key, std::move(a)).first->second;
}

void copy_bytes(Device dst_dev, void* dst, Device src_dev, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  if (dst_dev.kind == DeviceKind::Cpu && src_dev.kind == DeviceKind::Cpu) {
    std::memcpy(dst, src, bytes);
    return;
  }
#ifdef PARBENCH_HAVE_CUDA
  cuda_module().copy_bytes(dst_dev, dst, src_dev, src, bytes);
#else
  throw Error("copy involving a CUDA device in a build without CUDA");
#endif
}

int cuda_device_count() {
#ifdef PARBENCH_HAVE_CUDA
  // The driver first: where it sees no GPU the module (and cuDNN, cuBLAS, NCCL) stays unloaded.
  if (!cuda_module_loaded() && cuda_driver_probe().devices == 0) return 0;
  return cuda_module().device_count();
#else
  return 0;
#endif
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string v = line.substr(colon + 1);
      v.erase(0, v.find_first_not_of(" \t"));
      if (!v.empty()) return v;
    }
  return "unknown";
}

namespace {
std::string version_str(int v, int major_div, int minor_div, bool patch) {
  if (v <= 0) return "none";
  std::string out = fmt::format("{}.{}", v / major_div, (v % major_div) / minor_div);
  return patch ? fmt::format("{}.{}", out, v % minor_div) : out;
}
}  // namespace

SystemInfo system_info(CudaInfo what) {
  SystemInfo info;
  info.cpu_threads = std::thread::hardware_concurrency();
#ifdef PARBENCH_HAVE_CUDA
  info.cuda_built = true;
#ifdef PARBENCH_HAVE_NCCL
  info.nccl_built = true;
#endif
  const CudaDriverProbe& probe = cuda_driver_probe();
  // Without libcuda.so.1 there is no NVIDIA driver at all: say that, not the runtime's
  // cudaErrorInsufficientDriver, which reads as a driver too old.
  const bool no_driver = probe.note.rfind("no CUDA driver", 0) == 0;
  const std::string why = no_driver ? "no NVIDIA driver (libcuda.so.1 not found)" : probe.note;
  if (what == CudaInfo::IfGpus && probe.devices == 0 && !cuda_module_loaded()) {
    info.cuda_note = why + "; the CUDA backend module was not loaded";
    return info;
  }
  try {
    cuda_module().fill_system_info(info);
    info.cuda_module = cuda_module_path();
    if (probe.devices == 0 && info.gpus.empty()) info.cuda_note = why;  // the driver's verdict, not the runtime's code
  } catch (const Error& e) {
    if (probe.devices > 0) throw;  // GPUs present but unusable: a broken install, say so
    info.cuda_note = fmt::format("{}; {}", why, e.what());
  }
#else
  (void)what;
  info.cuda_note = "built without CUDA";
#endif
  return info;
}

std::string SystemInfo::str() const {
  std::string out = fmt::format("cpu: {}, {} hardware threads\n", cpu_model_name(), cpu_threads);
  if (!cuda_built) return out + "cuda: not built (configure found no CUDA toolkit with cuDNN)\n";
  if (cuda_module.empty())
    return out + fmt::format("cuda: no GPU usable: {}\n", cuda_note);
  out += fmt::format("cuda: module {}\n", cuda_module);
  out += fmt::format("cuda: driver {}, runtime {}, cuDNN {}, NCCL {}\n",
                     version_str(cuda_driver_version, 1000, 10, false),
                     version_str(cuda_runtime_version, 1000, 10, false),
                     version_str(cudnn_version, 10000, 100, true),
                     nccl_built ? version_str(nccl_version, 10000, 100, true) : "not built");
  out += fmt::format("cuda: {} device(s){}\n", gpus.size(), cuda_note.empty() ? "" : " (" + cuda_note + ")");
  for (const GpuInfo& g : gpus)
    out += fmt::format("  cuda:{}: {}, compute capability {}.{}, {} SMs, {:.1f} GiB\n", g.index, g.name,
                       g.cc_major, g.cc_minor, g.multiprocessors, g.total_bytes / double(1u << 30));
  return out;
}

AdamStepScalars adam_step_scalars(const AdamParams& a, int64_t step) {
  const double bc1 = 1.0 - std::pow(a.beta1, static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(a.beta2, static_cast<double>(step));
  return {static_cast<float>(a.lr / bc1),         static_cast<float>(std::sqrt(bc2)),
          static_cast<float>(a.beta1),            static_cast<float>(a.beta2),
          static_cast<float>(1.0 - a.beta1),      static_cast<float>(1.0 - a.beta2),
          static_cast<float>(a.eps),              static_cast<float>(a.weight_decay)};
}

// A backend without a layout of its own: Plain calls only.
void Backend::conv2d_forward_in(const ConvGeom& g, ConvLayouts io, const float* x, const float* w, const float* b,
                                float* y) {
  PB_CHECK(io.plain(), "{} has no blocked activation layout", name());
  conv2d_forward(g, x, w, b, y);
}
// Not fused in a layout of the backend's own, unless it says so (conv2d_forward_in then runs).
bool Backend::conv2d_relu_forward_in(const ConvGeom& g, ConvLayouts io, const float* x, const float* w,
                                     const float* b, float* y) {
  return io.plain() && conv2d_relu_forward(g, x, w, b, y);
}
void Backend::conv2d_backward_data_in(const ConvGeom& g, ConvLayouts io, const float* dy, const float* w,
                                      float* dx) {
  PB_CHECK(io.plain(), "{} has no blocked activation layout", name());
  conv2d_backward_data(g, dy, w, dx);
}
void Backend::conv2d_backward_weights_in(const ConvGeom& g, ConvLayouts io, const float* x, const float* dy,
                                         float* dw, float* db, bool accumulate) {
  PB_CHECK(io.plain(), "{} has no blocked activation layout", name());
  conv2d_backward_weights(g, x, dy, dw, db, accumulate);
}

void Backend::conv2d_forward_bf16_in(const ConvGeom& g, ConvLayouts io, const Bf16* x, const Bf16* w, const Bf16* b,
                                     Bf16* y) {
  PB_CHECK(io.plain(), "{} has no blocked bf16 activation layout", name());
  conv2d_forward_bf16(g, x, w, b, y);
}
void Backend::conv2d_backward_data_bf16_in(const ConvGeom& g, ConvLayouts io, const Bf16* dy, const Bf16* w,
                                           Bf16* dx) {
  PB_CHECK(io.plain(), "{} has no blocked bf16 activation layout", name());
  conv2d_backward_data_bf16(g, dy, w, dx);
}
void Backend::conv2d_backward_weights_bf16_in(const ConvGeom& g, ConvLayouts io, const Bf16* x, const Bf16* dy,
                                              float* dw, float* db, bool accumulate) {
  PB_CHECK(io.plain(), "{} has no blocked bf16 activation layout", name());
  conv2d_backward_weights_bf16(g, x, dy, dw, db, accumulate);
}

void Backend::conv_transpose2d_forward(const ConvGeom& g, const float* x, const float* w, const float* b, float* y) {
  conv2d_backward_data(g, x, w, y);
  if (b) add_channel_bias(g.n, g.c, g.h * g.w, b, y);
}
void Backend::conv_transpose2d_backward_data(const ConvGeom& g, const float* dy, const float* w, float* dx) {
  conv2d_forward(g, dy, w, nullptr, dx);
}
void Backend::conv_transpose2d_backward_weights(const ConvGeom& g, const float* x, const float* dy, float* dw, float* db,
                                                bool accumulate) {
  conv2d_backward_weights(g, dy, x, dw, nullptr, accumulate);
  if (db) channel_sums(g.n, g.c, g.h * g.w, dy, db, accumulate);
}

const char* precision_name(Precision p) { return p == Precision::Fp32 ? "fp32" : p == Precision::Tf32 ? "tf32" : "bf16"; }

Precision parse_precision(const std::string& s) {
  if (s == "fp32") return Precision::Fp32;
  if (s == "tf32") return Precision::Tf32;
  if (s == "bf16") return Precision::Bf16;
  throw UsageError(fmt::format("unknown precision '{}': expected fp32, tf32 or bf16", s));
}

}  // namespace pb
