// Launchers of the CUDA kernels of nets with skips (engine/cuda/cuda_resample.cu): the residual
// add, 2x2 max pooling and nearest 2x upsampling, fp32 and bf16, as the Backend ops of those
// names say (engine/backend.h). Each launches on `stream` in the grid engine/kernel_shapes.h gives.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "engine/backend.h"
#include "engine/bf16.h"

namespace pb::cu {

void launch_add(cudaStream_t stream, int64_t n, const float* a, const float* b, float* y);
void launch_max_pool2x2_forward(cudaStream_t stream, const Planes& s, const float* x, float* y);
void launch_max_pool2x2_backward(cudaStream_t stream, const Planes& s, const float* x, const float* dy, float* dx);
void launch_upsample2x_forward(cudaStream_t stream, const Planes& s, const float* x, float* y);
void launch_upsample2x_backward(cudaStream_t stream, const Planes& s, const float* dy, float* dx);

// y[i, c, j] += b[c] over n x channels x inner values (bf16: in fp32, rounded once).
void launch_add_channel_bias(cudaStream_t stream, int64_t n, int64_t channels, int64_t inner, const float* b, float* y);
void launch_add_channel_bias(cudaStream_t stream, int64_t n, int64_t channels, int64_t inner, const Bf16* b, Bf16* y);

void launch_add(cudaStream_t stream, int64_t n, const Bf16* a, const Bf16* b, Bf16* y);
void launch_max_pool2x2_forward(cudaStream_t stream, const Planes& s, const Bf16* x, Bf16* y);
void launch_max_pool2x2_backward(cudaStream_t stream, const Planes& s, const Bf16* x, const Bf16* dy, Bf16* dx);
void launch_upsample2x_forward(cudaStream_t stream, const Planes& s, const Bf16* x, Bf16* y);
void launch_upsample2x_backward(cudaStream_t stream, const Planes& s, const Bf16* dy, Bf16* dx);

}  // namespace pb::cu
