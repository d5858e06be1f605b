// Splitting a convolution's batch into parts a library with 32-bit tensor indexing accepts.
// cuDNN refuses a tensor of 2^31 elements or more (cudnnSetTensor4dDescriptor returns
// CUDNN_STATUS_NOT_SUPPORTED), so a large batch runs as consecutive sub-batches, as PyTorch
// does; weight and bias gradients of the parts are summed (beta = 1 after the first part).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/backend.h"

namespace pb {

// The most elements one cuDNN tensor may hold: 2^31 - 1.
inline constexpr int64_t kMaxTensorElements = (int64_t(1) << 31) - 1;

// Images [offset, offset + n) of the batch.
struct BatchPart {
  int64_t offset = 0;
  int64_t n = 0;
  bool operator==(const BatchPart& o) const { return offset == o.offset && n == o.n; }
};

// Consecutive parts covering the batch of g, each keeping its input (n*c*h*w) and output
// (n*k*p*q) at or below max_elements, as few parts as possible and balanced (sizes differ by at
// most one, larger first, so at most two shapes need a plan). One part when the whole batch
// fits. Throws Error when a single image is already over the limit.
std::vector<BatchPart> conv_batch_parts(const ConvGeom& g, int64_t max_elements = kMaxTensorElements);

}  // namespace pb
