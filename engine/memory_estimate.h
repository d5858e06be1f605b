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
// one sample. estimate_memory(plan, batch, config): one configuration's peak per worker, below.
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

// One configuration, for the per-worker estimate below. `strategy` as registered: regular, dp,
// ddp, mp, pipeline[-1f1b][-recompute], pipeline-zb, fsdp[-prefetch], zero2[-prefetch], tp, dp<D>xpp<P>[-1f1b][-recompute],
// dp<D>xtp<T>, hsdp<R>x<S> (fsdp's buffers with shards of 1/S).
struct MemoryConfig {
  std::string strategy = "regular";
  int devices = 1;
  int micro_batches = 4;  // pipeline, dp<D>xpp<P>: per replica
  // mp, pipeline, dp<D>xpp<P>: each stage's layers [begin, end), as the strategy split them
  // (strategies/stages.h); empty: as many equal runs of layers as stages.
  std::vector<std::pair<int, int>> stages;
  // Precision::Bf16 (autocast): every Sequential also holds a bf16 copy of its parameters, keeps
  // its activations and their gradients in bf16, and its input (bf16) and output (fp32) apart.
  bool bf16 = false;
  // Optional: the library workspace (bytes) a worker's backend holds once it has run `layers`
  // (forward and backward, each layer's input gradient but the net's first) at `batch`, the layers
  // as the worker runs them (tp: its slices of the output channels). Unset: the largest
  // convolution's unfolded input of one sample, the im2col bound. measured_workspace() measures it.
  std::function<double(const std::vector<LayerPlan>& layers, int64_t batch)> workspace;
  // Optional: the same for a run of the plan's layers [first, last] that the worker runs as one
  // Sequential (regular, dp, ddp, a stage; fsdp, zero2, tp on one worker), where the library can
  // keep blocked layouts and fuse ReLUs: less than the layers alone. Unset: `workspace`.
  // measured_sequential_workspace() measures it.
  std::function<double(const std::vector<LayerPlan>& layers, int64_t batch)> sequential_workspace;
};

// A MemoryConfig::workspace that runs the layers once, each alone in turn, on a fresh backend of
// `options` on `device` (untimed; milliseconds for a small net), and returns the growth of the
// device's workspace count; results are kept per list of shapes and batch. Its buffers raise
// `device`'s allocator peak: measure before a run resets it, or on a slot no worker uses.
std::function<double(const std::vector<LayerPlan>&, int64_t)> measured_workspace(const BackendOptions& options, Device device);
// A MemoryConfig::sequential_workspace that runs the layers once as one Sequential (forward and
// backward, as measured_workspace does), with the same caveats.
std::function<double(const std::vector<LayerPlan>&, int64_t)> measured_sequential_workspace(const BackendOptions& options,
                                                                                              Device device);

// Per worker, what its device's allocator peaks at in a step of `c` at `global_batch` (tensors and
// workspace; not the runtime beside them), from the buffers the strategy keeps: in `per_worker`,
// the largest worker's parts in params ... workspace (their total() is its peak). Beyond one worker
// fsdp and zero2 hold the buffers they gather into, made once at setup (the largest unit's
// parameters and gradients; zero2: every unit's parameters; fsdp-prefetch: two units' parameters,
// the one computing and the next). Formulas: docs/projection.md.
MemoryEstimate estimate_memory(const NetPlan& plan, int64_t global_batch, const MemoryConfig& c);

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
