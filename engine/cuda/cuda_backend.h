// Inside the CUDA module (libparbench_cuda.so): per-GPU allocators, copies, discovery and the
// backend factory, which cuda_module_impl.cpp hands to the program (engine/cuda_module.h).
#pragma once

#include <cstddef>
#include <memory>

#include <cuda_runtime.h>

#include "engine/backend.h"
#include "engine/device.h"

namespace pb {

// cudaMalloc/cudaFree on one GPU; a failed cudaMalloc throws OutOfMemory naming the device,
// the bytes asked and the bytes free.
std::unique_ptr<Allocator> make_cuda_allocator(int device);

// Any direction (host<->GPU, GPU<->GPU on one device or across devices); ordered after the
// work already queued on the devices involved, and returns when dst holds the data.
void cuda_copy_bytes(Device dst_dev, void* dst, Device src_dev, const void* src, std::size_t bytes);
// The same copy queued on `stream` alone (ordered after nothing else), not waited for.
void cuda_copy_async(Device dst_dev, void* dst, Device src_dev, const void* src, std::size_t bytes,
                     cudaStream_t stream);

// GPUs the runtime sees; 0 (not an error) when there is no driver or no device.
int cuda_count_devices();

// cuDNN/cuBLAS backend on one GPU. The environment variable PARBENCH_CONV_SEARCH=exhaustive
// (or heuristic) overrides opts.exhaustive_conv_search, so a whole run can match PyTorch's
// torch.backends.cudnn.benchmark without a new flag.
std::unique_ptr<Backend> make_cuda_backend(int device, const BackendOptions& opts);

// Fills the CUDA fields of `info` (versions, GPUs); never throws for a missing driver.
void cuda_fill_system_info(SystemInfo& info);

}  // namespace pb
