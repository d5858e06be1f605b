// Reproducible pseudo-random values by index (a counter-based hash), bit-identical on the host and
// on a GPU: data made where it lives, for timing runs (parbench profile). Not the training data of
// run / train / replay, which follow PyTorch's generators (engine/model.h).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define PB_HOST_DEVICE __host__ __device__
#else
#define PB_HOST_DEVICE
#endif

namespace pb {

// splitmix64's finalizer: every input bit flips about half the output bits.
PB_HOST_DEVICE inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Value i of stream `seed`: mean 0, standard deviation `scale`, about normal (the Irwin-Hall sum
// of four 16-bit uniforms from one hash, within +-3.47 sd). An integer sum, one float subtract and
// two multiplies, none of which a compiler may fuse, so host and device agree to the bit.
PB_HOST_DEVICE inline float hashed_normal(uint64_t seed, uint64_t i, float scale) {
  const uint64_t h = mix64(mix64(seed) + i * 0x9E3779B97F4A7C15ull);
  const uint32_t s = static_cast<uint32_t>((h & 0xffffu) + ((h >> 16) & 0xffffu) + ((h >> 32) & 0xffffu) + (h >> 48));
  // 4 uniforms over 0..65535: mean 131070, sd sqrt(4 (65536^2 - 1) / 12) = 37837.23.
  const float unit = (static_cast<float>(s) - 131070.0f) * (1.0f / 37837.23f);
  return unit * scale;
}

// dst[i] = hashed_normal(seed, offset + i, scale) for i in [0, n), on `threads` host threads.
void fill_normal_host(float* dst, int64_t n, uint64_t seed, uint64_t offset, float scale, int threads);

}  // namespace pb
