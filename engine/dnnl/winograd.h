// Winograd F(2x2, 3x3) convolutions of the engine's own for the CPU backend: transforms in
// plain C++ that the compiler vectorises for the build's ISA, the 16 products per tile as one
// batched oneDNN matmul. For CPUs where oneDNN has no Winograd kernel (it has one for AVX-512
// only): 3x3 stride-1 layers take 4 instead of 9 multiplies per output.
#pragma once

#include <cstddef>
#include <memory>

#include "engine/backend.h"

namespace pb {

class Winograd2x3 {
 public:
  // Tiles go through in chunks whose transformed input and output (16 x channels x tiles floats
  // each) stay within chunk_bytes, so the matmuls stay in cache-sized pieces and memory small.
  static constexpr std::size_t kChunkBytes = std::size_t(16) << 20;

  // Its transform buffers count as `device`'s workspace.
  explicit Winograd2x3(int threads, std::size_t chunk_bytes = kChunkBytes, Device device = cpu());
  ~Winograd2x3();
  // 3x3 kernel, stride 1, padding 0-2 both ways (backward data runs as a forward with padding
  // 2 - pad).
  static bool applies(const ConvGeom& g);
  // Frees the transform buffers (sized again by the next call).
  void release_scratch();
  // relu: y = max(conv, 0), applied in the output transform (the ReLU fused into the conv).
  void forward(const ConvGeom& g, const float* x, const float* w, const float* b, float* y, bool relu = false);
  void backward_data(const ConvGeom& g, const float* dy, const float* w, float* dx);
  // dw, db (when given) overwritten, or added to when accumulate.
  void backward_weights(const ConvGeom& g, const float* x, const float* dy, float* dw, float* db, bool accumulate);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pb
