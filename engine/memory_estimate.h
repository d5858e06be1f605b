// What a training configuration needs in memory, estimated from its plan before anything is
// allocated, so an impossible size is refused with the numbers instead of ending in bad_alloc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/device.h"
#include "engine/net.h"

namespace pb {

// A lower bound over all workers together: every strategy holds the parameters, their gradients
// and Adam's two moments, keeps each layer's output for the backward pass, and needs the largest
// conv layer's unfolded input (im2col) or an equivalent workspace for one sample.
struct MemoryEstimate {
  double params = 0, grads_and_moments = 0, activations = 0, workspace = 0;  // bytes
  std::string largest;  // the layer with the largest output, e.g. "layer 4 (conv2d), output (16, 96, 96)"
  double total() const { return params + grads_and_moments + activations + workspace; }
};

MemoryEstimate estimate_memory(const NetPlan& plan, int64_t global_batch);

// What a configuration holds, measured after its steps: the engine's tensors and the libraries'
// workspace at the allocator's peak (together that peak), and the runtime beside them. CUDA, per
// GPU: runtime = bytes in use on the GPU (cudaMemGetInfo) less the allocator's -- the CUDA
// context, cuDNN/cuBLAS handles, NCCL buffers, and any other process on that GPU; the figures
// are the GPU's with the largest total. CPU: the workers share the host's memory, so tensors and
// workspace are summed over the workers, and runtime = the process's resident memory (VmRSS)
// less the CPU allocators' bytes -- the program and its libraries, oneDNN's primitive cache,
// host-side copies of the data, thread stacks. Either way total() is the device peak.
struct MemoryUse {
  double tensors = 0, workspace = 0, runtime = 0;  // bytes
  double total() const { return tensors + workspace + runtime; }
};
// `devices`: the configuration's devices in this process (all of one kind).
MemoryUse measure_memory(const std::vector<Device>& devices);

// The process's resident memory (VmRSS in /proc/self/status); 0 when unknown.
std::size_t resident_bytes();

// RAM the kernel says a new allocation can get (MemAvailable in /proc/meminfo); 0 when unknown.
std::size_t available_ram_bytes();

// Throws pb::UsageError "needs at least X GiB (...), the devices have Y GiB ..." when the
// estimate exceeds what `devices` workers of `kind` can have: on CPU `limit_bytes` (when > 0)
// or the available RAM, on CUDA `limit_bytes` per GPU or each GPU's memory. `what` names the
// net and the flags that size it, for the message. In a multi-process job it is collective
// (every rank calls it at the same point) and uses the smallest capacity among the ranks.
void check_memory_fits(const NetPlan& plan, int64_t global_batch, DeviceKind kind, int devices,
                       double limit_bytes, const std::string& what);

}  // namespace pb
