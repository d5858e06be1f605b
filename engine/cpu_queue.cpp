// The CPU backend's queues: there are none. Work runs when called, so streams are empty names,
// events keep the host time (for elapsed_s), waits and stream synchronizations are no-ops, and
// fills and copies are done on return.
#include <algorithm>
#include <chrono>
#include <cstring>

#include "engine/cpu_backend.h"
#include "engine/random_fill.h"

namespace pb {

void CpuBackend::fill(float* dst, int64_t n, float value, Stream*) {
  if (n > 0) std::fill(dst, dst + n, value);
}

void CpuBackend::fill_normal(float* dst, int64_t n, uint64_t seed, uint64_t offset, float scale, Stream*) {
  if (n > 0) fill_normal_host(dst, n, seed, offset, scale, threads_);
}

namespace {
template <typename T>
void rows_copy(T* dst, int64_t dst_pitch, const T* src, int64_t src_pitch, int64_t width, int64_t rows) {
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(dst + r * dst_pitch, src + r * src_pitch, static_cast<std::size_t>(width) * sizeof(T));
}
}  // namespace

void CpuBackend::copy_2d(float* dst, int64_t dst_pitch, const float* src, int64_t src_pitch, int64_t width,
                         int64_t rows, Stream*) {
  rows_copy(dst, dst_pitch, src, src_pitch, width, rows);
}

void CpuBackend::copy_2d_bf16(Bf16* dst, int64_t dst_pitch, const Bf16* src, int64_t src_pitch, int64_t width,
                              int64_t rows) {
  rows_copy(dst, dst_pitch, src, src_pitch, width, rows);
}

void CpuBackend::copy(Device dst_dev, void* dst, Device src_dev, const void* src, std::size_t bytes, Stream*) {
  copy_bytes(dst_dev, dst, src_dev, src, bytes);  // host to host: a memcpy, done on return
}

namespace {
struct CpuStream final : Stream {
  void* native() const override { return nullptr; }
};
struct CpuEvent final : Event {
  std::chrono::steady_clock::time_point at;
};
}  // namespace

std::unique_ptr<Stream> CpuBackend::create_stream() { return std::make_unique<CpuStream>(); }
std::unique_ptr<Event> CpuBackend::create_event() { return std::make_unique<CpuEvent>(); }
void CpuBackend::record(Event& e, Stream*) { static_cast<CpuEvent&>(e).at = std::chrono::steady_clock::now(); }
double CpuBackend::elapsed_s(Event& start, Event& end) {
  return std::chrono::duration<double>(static_cast<CpuEvent&>(end).at - static_cast<CpuEvent&>(start).at).count();
}

}  // namespace pb
