// A plan's memory: each worker's peak, from the buffers its plan names and the library workspace
// its computations need -- one count for every strategy, since a plan says what its step keeps.
// Every buffer is held from setup (or its first use) to the end of the step, as the engine keeps
// its buffers for the next step; a split backward's kept output gradients (KeptGrad) only from the
// action that writes them to the one that reads them, as a Sequential takes them from a pool.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "engine/memory_estimate.h"
#include "engine/net.h"
#include "plan/plan.h"

namespace pb {

using WorkspaceMeasure = std::function<double(const std::vector<LayerPlan>& layers, int64_t batch)>;

// The library workspace (bytes) a backend holds once it has run some layers forward and backward
// at a batch: engine/memory_estimate.h's measured_* probes, or a profile's per layer.
struct WorkspaceProbes {
  WorkspaceMeasure layers;      // each layer alone in turn; unset: the im2col bound
  WorkspaceMeasure sequential;  // the layers as one Sequential (blocked layouts, fused ReLUs); unset: `layers`
  WorkspaceMeasure sliced;      // tp's channel slices (bf16: their fp32 input gradients too); unset: `layers`
};

// Per worker of `p` (a step of `net`), its peak in bytes: its buffers and its workspace. A worker
// whose forwards run one range of layers runs them as one Sequential; one that runs several (fsdp's
// units, interleaved chunks, tp's layers) on one backend needs the most of their layers alone and
// of each longer range as a Sequential; a forward of part < 1 runs that share of its layer's output
// channels. In the result, per_worker holds every worker's peak and params ... workspace the largest
// worker's parts (parameters and their copies; gradients and Adam's state; activations, their
// gradients, scratch and staging; workspace); `largest` names the net's largest layer output.
MemoryEstimate plan_memory(const Plan& p, const NetPlan& net, const WorkspaceProbes& probes = {});

}  // namespace pb
