// bfloat16 storage (torch.bfloat16): the top 16 bits of an IEEE float. A distinct type, so a bf16
// buffer never passes for a float one; host conversions for setup and tests.
#pragma once

#include <cstdint>
#include <cstring>

namespace pb {

struct Bf16 {
  uint16_t bits;
};
static_assert(sizeof(Bf16) == 2, "Bf16 is two bytes");

// Round to nearest even, as PyTorch's float -> bfloat16 cast; a NaN stays a (quiet) NaN.
inline Bf16 to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return {static_cast<uint16_t>((u >> 16) | 0x40u)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return {static_cast<uint16_t>(u >> 16)};
}

inline float from_bf16(Bf16 b) {
  const uint32_t u = static_cast<uint32_t>(b.bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// The value float f becomes as bf16.
inline float round_bf16(float f) { return from_bf16(to_bf16(f)); }

}  // namespace pb
