// What a training configuration needs in memory, estimated from its plan before anything is
// allocated, so an impossible size is refused with the numbers instead of ending in bad_alloc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "engine/backend.h"
#include "engine/device.h"
#include "engine/net.h"

namespace pb {

// estimate_memory(plan, batch): a lower bound over all workers together: every strategy holds the
// parameters, their gradients and Adam's two moments, keeps each layer's output for the backward
// pass, and needs the largest conv layer's unfolded input (im2col) or an equivalent workspace for
// one sample. One configuration's peak per worker: plan/memory.h, from the plan it runs.
struct MemoryEstimate {
  double params = 0, grads_and_moments = 0, activations = 0, workspace = 0;  // bytes
  std::string largest;  // the layer with the largest output, e.g. "layer 4 (conv2d), output (16, 96, 96)"
  std::vector<double> per_worker;  // the per-configuration estimate: each worker's peak (bytes)
  double total() const { return params + grads_and_moments + activations + workspace; }
  // The largest worker's peak; total() where there is no per-worker estimate.
  double worker_peak() const {
    double m = 0;
    for (double b : per_worker) m = m > b ? m : b;
    return per_worker.empty() ? total() : m;
  }
};

MemoryEstimate estimate_memory(const NetPlan& plan, int64_t global_batch);

// What a Sequential over layers [begin, end) keeps for n samples (engine/model.cpp,
// model_bf16.cpp), in bytes, made at its first step and kept: plan generators size their buffers by it.
struct SequentialBuffers {
  // Each layer's output but flatten views and ReLUs in place on an output of the run; bf16: every
  // output but the ReLUs' in bf16, with the input rounded to bf16 and the output widened to fp32.
  int64_t activations = 0;
  int64_t scratch = 0;     // backward's two input-gradient buffers (bf16: they also hold the output's)
  // The same per buffer: the pair, then a graph stage's gradient pool (stages that share them
  // hold each at the largest any needs: shared_scratch).
  std::vector<int64_t> scratch_parts;
  int64_t param_copy = 0;  // bf16: the parameters' bf16 copy, made at the first forward
  int64_t kept = 0;        // one set of a split backward's kept output gradients (its weighted layers')
};
SequentialBuffers sequential_buffers(const NetPlan& net, int begin, int end, int64_t n, bool bf16);
// What stages that share their scratch (Sequential::share_scratch) hold of it, in bytes.
int64_t shared_scratch(const std::vector<SequentialBuffers>& stages);

// Without a measured workspace: one sample's unfolded input of the largest convolution (im2col
// unfolds a sample at a time, into one buffer for every layer), in bytes.
double im2col_workspace(const std::vector<LayerPlan>& layers);

// A workspace measure (WorkspaceProbes::layers, plan/memory.h) that runs the layers once, each alone in turn, on a fresh backend of
// `options` on `device` (untimed; milliseconds for a small net), and returns the growth of the
// device's workspace count; results are kept per list of shapes and batch. Its buffers raise
// `device`'s allocator peak: measure before a run resets it, or on a slot no worker uses.
std::function<double(const std::vector<LayerPlan>&, int64_t)> measured_workspace(const BackendOptions& options, Device device);
// A WorkspaceProbes::sequential that runs the layers once as one Sequential (forward and
// backward, as measured_workspace does), with the same caveats.
std::function<double(const std::vector<LayerPlan>&, int64_t)> measured_sequential_workspace(const BackendOptions& options,
                                                                                              Device device);
// A WorkspaceProbes::sliced: measured_workspace's, and under bf16 each layer's input gradient
// also written in fp32 (the backward-data tp's split layers run, strategies/tp_ops.h).
std::function<double(const std::vector<LayerPlan>&, int64_t)> measured_tp_workspace(const BackendOptions& options, Device device);

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
