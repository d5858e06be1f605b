// One configuration's memory per worker, from the buffers its strategy keeps: each registry line
// (strategies/registry.cpp) says how its strategy lays them out (MemoryModel), and the formulas
// here count them. The lower bound of every strategy alike is engine/memory_estimate.h's.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "engine/memory_estimate.h"
#include "engine/net.h"

namespace pb {

// How a strategy lays out a worker's buffers (a registry line's memory model).
struct MemoryModel {
  // Replicas: each worker the whole net on its chunk (a worker of a sharded or sliced strategy
  // alone in its group too); Stages: contiguous stages, micro-batches in slots; Shards: each
  // unit's parameters and state sharded over a group; Slices: each layer's output channels split.
  enum class Layout { Replicas, Stages, Shards, Slices } layout = Layout::Replicas;
  bool root = false;       // Replicas: the state, the batch and its output on worker 0 (scatter / gather)
  bool one_micro = false;  // Stages: the whole batch as one micro-batch
  // Shards: units whose gathered parameters a worker holds at once: 1, 2 (the next one prefetched),
  // or 0: every unit's, from its forward to its backward.
  int gathered = 1;
};
// `name`'s model: a family's member its family's. UsageError for an unknown name.
const MemoryModel& memory_model_of(const std::string& name);

// One configuration, for the per-worker estimate below. `strategy`: a registered strategy or
// family member; its registry line's MemoryModel says which buffers it keeps.
struct MemoryConfig {
  std::string strategy = "regular";
  int devices = 1;
  int micro_batches = 4;  // pipeline, dp<D>xpp<P>: per replica
  // mp, pipeline, dp<D>xpp<P>: each stage's layers [begin, end), as the strategy split them
  // (strategies/stages.h); empty: as many equal runs of layers as stages.
  std::vector<std::pair<int, int>> stages;  // pipeline-interleaved: V x P of them, stage c * P + r on worker r
  int virtual_stages = 2;                      // pipeline-interleaved: chunks per worker
  // Precision::Bf16 (autocast): every Sequential also holds a bf16 copy of its parameters, keeps
  // its activations and their gradients in bf16, and its input (bf16) and output (fp32) apart.
  bool bf16 = false;
  // --reduce-dtype / --param-dtype bf16: the communicator's bf16 staging (engine/comm_wire.cpp),
  // kept from the first step on.
  bool reduce_bf16 = false, param_bf16 = false;
  // bf16 with StrategyOptions::bf16_activation_wire: pipeline stages' bf16 transfer staging.
  bool bf16_activation_wire = true;
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
  // Optional: `workspace` for tp's slices under bf16, whose split layers write their partial input
  // gradients in fp32 (measured_tp_workspace()). Unset: `workspace`.
  std::function<double(const std::vector<LayerPlan>& layers, int64_t batch)> tp_workspace;
};

// Per worker, what its device's allocator peaks at in a step of `c` at `global_batch` (tensors and
// workspace; not the runtime beside them), from the buffers the strategy keeps: in `per_worker`,
// the largest worker's parts in params ... workspace (their total() is its peak). Beyond one worker
// fsdp and zero2 hold the buffers they gather into, made once at setup (the largest unit's
// parameters and gradients; zero2: every unit's parameters; fsdp-prefetch: two units' parameters,
// the one computing and the next). Formulas: docs/projection.md.
MemoryEstimate estimate_memory(const NetPlan& plan, int64_t global_batch, const MemoryConfig& c);

}  // namespace pb
