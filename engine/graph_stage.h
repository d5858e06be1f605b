// A stage of a net with skips (residual adds, U-Net concats): the values it takes from earlier
// stages and gives to later ones, which outputs share storage, and which buffers backward sums each
// output's gradient in. Sequential runs it (model_graph.cpp) and
// the memory estimate counts it (memory_estimate.cpp), from this one description.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "engine/net.h"

namespace pb {

// The values a stage [begin, end) reads from before it (entries: layers before `begin`, or
// kNetInput) and the outputs of its own that layers after it read (exits; the last is always
// end - 1), each ascending. A chain stage's are {begin - 1} (kNetInput at 0) and {end - 1}.
struct StageBoundary {
  std::vector<int> entries, exits;
  int entry_of(int layer) const;  // its index in entries
};
StageBoundary stage_boundary(const NetPlan& plan, int begin, int end);

// The gradients one worker passes between the stages [cuts[s], cuts[s + 1]) of a net it runs one
// after another (fsdp's units), backward last stage first. A value a stage reads from an earlier
// one has a pool buffer from the first of its readers' backwards to its maker's; a later reader's
// part is made in another (`tmp`, given back once added). kNetInput's gradient is not made.
struct StageGradients {
  std::vector<std::vector<std::pair<int, int>>> entry_from;  // per stage, per entry: the stage and exit making it (-1: the input)
  std::vector<std::vector<int>> entry_buf, entry_tmp;  // per stage, per entry (-1: none)
  std::vector<std::vector<int>> exit_buf;              // per stage, per exit (-1: the loss gradient)
  std::vector<int64_t> pool;                           // per buffer: values per sample
};
StageGradients plan_stage_gradients(const NetPlan& plan, const std::vector<int>& cuts);

// Whether layer i of a stage starting at `begin` computes in place on its input's storage: a
// flatten (a view), or a ReLU whose input is a layer of the stage, read by it alone, not a view.
bool graph_in_place(const NetPlan& plan, int begin, int i);

// Backward over layers [begin, end), last layer first. Each layer's output gradient is the sum of
// its readers' contributions: the first reader to get there writes it, the others add theirs --
// straight in for add and flatten (the output gradient itself), through `tmp` for the rest; an
// exit's gradient from later stages (the caller's) is added last, or is its gradient where no
// layer of the stage reads it. Entries' gradients go to the caller's buffers, or under bf16 to
// pool buffers held to the end (widened into the caller's then). Buffers come from a pool, each
// held from its first write until its layer's backward is done.
struct GraphBackward {
  struct Write {
    int target = -1;  // the stage layer (index in the stage) whose output gradient this is; -1: an entry's
    int entry = -1;   // target -1: the entry (index in StageBoundary::entries)
    int buf = -1;     // its buffer in the pool; -1: the caller's
    bool first = true;
    int tmp = -1;  // the pool buffer a contribution is made in before it is added; -1: none
  };
  std::vector<std::vector<Write>> writes;  // per layer of the stage, per input
  std::vector<int> grad_of;                // per layer: the pool buffer of its output gradient (-1: the caller's)
  std::vector<int> exit_of;                // per layer: its index in StageBoundary::exits, or -1
  std::vector<int> exit_tmp;               // per layer, bf16: the pool buffer its exit gradient is rounded in (-1: grad_of's)
  std::vector<int> entry_buf;              // per entry, bf16: its gradient's pool buffer
  std::vector<int64_t> pool;               // per buffer, its values per sample
};
GraphBackward plan_graph_backward(const NetPlan& plan, int begin, int end, bool bf16 = false);

// Why autocast bf16 cannot run the net as PyTorch would, or empty when it can.
// Autocast keeps a value computed from the fp32 input with no conv or linear before it in fp32,
// where the engine rounds it at the stage's edge: the same wherever it only flows on through ReLU,
// pooling, upsampling, flatten and concat (rounding commutes with them) into a conv or linear,
// not where an add sums it or two readers' gradients sum for it (in fp32, rounded once). Every
// stage of a net that holds runs as autocast would: its entries are bf16 values, or fp32 ones
// that only flow on so and whose gradients no weight needs.
std::string bf16_graph_refusal(const NetPlan& plan);

// Per-sample values of what a stage of a net with skips keeps: its layers' outputs (in-place
// ones share) and backward's gradient pool.
struct GraphBuffers {
  int64_t activations = 0, scratch = 0;
};
GraphBuffers graph_buffers(const NetPlan& plan, int begin, int end, bool bf16 = false);

// Whether [begin, end) of `plan` runs as a graph stage: a layer reads another than the one before
// it, or an output is read twice (by layers of the stage or after it).
bool is_graph_stage(const NetPlan& plan, int begin, int end);

}  // namespace pb
