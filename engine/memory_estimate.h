// What a training configuration needs in memory, estimated from its plan before anything is
// allocated, so an impossible size is refused with the numbers instead of ending in bad_alloc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

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
