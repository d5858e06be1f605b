// The launcher of Backend::fill_normal's kernel on CUDA (engine/cuda/cuda_random_fill.cu).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace pb::cu {

// y[i] = hashed_normal(seed, offset + i, scale) for i in [0, n) (engine/random_fill.h), on `stream`.
void launch_fill_normal(cudaStream_t stream, int64_t n, uint64_t seed, uint64_t offset, float scale, float* y);

}  // namespace pb::cu
