// A stage of a net with skips (residual adds, U-Net concats): which outputs share storage, and
// which buffers backward sums each output's gradient in. Sequential runs it (model_graph.cpp) and
// the memory estimate counts it (memory_estimate.cpp), from this one description.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/net.h"

namespace pb {

// Whether layer i of a stage starting at `begin` computes in place on its input's storage: a
// flatten (a view), or a ReLU whose input is a layer of the stage, read by it alone, not a view.
bool graph_in_place(const NetPlan& plan, int begin, int i);

// Backward over layers [begin, end), last layer first. Each layer's output gradient is the sum of
// its readers' contributions: the first reader to get there writes it, the others add theirs --
// straight in for add and flatten (the output gradient itself), through `tmp` for the rest.
// Buffers come from a pool, each held from its first write until its layer's backward is done.
struct GraphBackward {
  struct Write {
    int target = -1;  // the stage layer (index in the stage) whose output gradient this is; -1: the stage input's
    int buf = -1;     // its buffer in the pool; -1: the caller's dx
    bool first = true;
    int tmp = -1;  // the pool buffer a contribution is made in before it is added; -1: none
  };
  std::vector<std::vector<Write>> writes;  // per layer of the stage, per input
  std::vector<int> grad_of;                // per layer: the pool buffer of its output gradient (-1: the caller's dy)
  std::vector<int64_t> pool;               // per buffer, its values per sample
};
GraphBackward plan_graph_backward(const NetPlan& plan, int begin, int end);

// Why autocast bf16 cannot run stage [begin, end) as PyTorch would, or empty when it can.
// Autocast keeps a value computed from the fp32 input with no conv or linear before it in fp32,
// where the engine rounds it at the stage's edge: the same wherever it only flows on through ReLU,
// pooling, upsampling, flatten and concat (rounding commutes with them) into a conv or linear,
// not where an add sums it or two readers' gradients sum for it (in fp32, rounded once).
std::string bf16_graph_refusal(const NetPlan& plan, int begin, int end);

// Per-sample values of what a stage of a net with skips keeps: its layers' outputs (in-place
// ones share) and backward's gradient pool.
struct GraphBuffers {
  int64_t activations = 0, scratch = 0;
};
GraphBuffers graph_buffers(const NetPlan& plan, int begin, int end);

// Whether [begin, end) of `plan` runs as a graph stage: a layer reads another than the one before
// it, or an output is read twice. Such a stage reads only its own layers and the layer before it.
bool is_graph_stage(const NetPlan& plan, int begin, int end);

}  // namespace pb
