// Backend::fill_normal's default (made on the host, copied over) and the host fill it and the CPU
// backend use.
#include "engine/random_fill.h"

#include <vector>

#include "engine/backend.h"
#include "engine/cpu_parallel.h"

namespace pb {

void fill_normal_host(float* dst, int64_t n, uint64_t seed, uint64_t offset, float scale, int threads) {
  parallel_for_simd(n, threads, [=](int64_t i) { dst[i] = hashed_normal(seed, offset + static_cast<uint64_t>(i), scale); });
}

void Backend::fill_normal(float* dst, int64_t n, uint64_t seed, uint64_t offset, float scale, Stream* stream) {
  if (n <= 0) return;
  std::vector<float> host(static_cast<std::size_t>(n));
  fill_normal_host(host.data(), n, seed, offset, scale, 1);
  copy(device(), dst, Device{DeviceKind::Cpu, 0}, host.data(), host.size() * sizeof(float), stream);
  if (stream) {
    synchronize(*stream);
  } else {
    synchronize();
  }
}

}  // namespace pb
