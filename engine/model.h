// A Sequential stage: layers [begin, end) of a net on one device. Its parameters live in one
// contiguous buffer and its gradients in another, so an all-reduce or an Adam step is one call.
// On a backend made for Precision::Bf16 it runs autocast (docs/bf16.md): fp32 parameters,
// gradients and stage edges (input, output and their gradients); bf16 inside.
#pragma once

#include <array>
#include <functional>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "engine/backend.h"
#include "engine/graph_stage.h"
#include "engine/net.h"
#include "engine/tensor.h"
#include "engine/trace.h"

namespace pb {

// The passes of one layer that a profiler times apart.
enum class LayerPass { Forward, BackwardData, BackwardWeights };

// One pass of a layer over `batch` samples: its FLOPs (multiply-add = 2; the forward's are the
// plan's forward_flops, and each backward pass of a conv or linear layer does as many; ReLU one
// a value) and the bytes it must move at least -- every input read once and every output written
// once: activations and their gradients of `act_bytes` a value, weights of `weight_bytes`, weight
// gradients fp32. The roofline's numerator (bench/roofline.h). `part`: the share of a conv's or
// linear layer's output channels computed (tp's column slices): its FLOPs, weights and output (or
// output gradient) scale by it, its whole input (or input gradient) is read (written) still.
struct LayerWork {
  double flops = 0, bytes = 0;
};
LayerWork layer_work(const LayerPlan& l, int64_t batch, LayerPass pass, int act_bytes, int weight_bytes,
                     double part = 1);

// Called around every backend call a Sequential makes for a layer (global index): a profiler
// records device events there. ReLU's backward is its BackwardData; Flatten makes no call.
class LayerObserver {
 public:
  virtual ~LayerObserver() = default;
  virtual void before(int layer, LayerPass pass) = 0;
  virtual void after(int layer, LayerPass pass) = 0;
};

class Sequential {
 public:
  Sequential(const NetPlan& plan, int begin, int end, Backend& backend);

  Backend& backend() { return *backend_; }
  Tensor& params() { return params_; }
  Tensor& grads() { return grads_; }
  int begin() const { return begin_; }
  int end() const { return end_; }
  const Shape& in_sample() const { return plan_.layers[begin_].in; }
  const Shape& out_sample() const { return plan_.layers[end_ - 1].out; }
  int64_t in_numel(int64_t batch) const { return batch * numel_of(in_sample()); }
  int64_t out_numel(int64_t batch) const { return batch * numel_of(out_sample()); }
  double forward_flops_per_sample() const;

  // This stage's slice of the whole net's flat parameter vector.
  void load_params(const std::vector<float>& full);
  void store_params(std::vector<float>& full) const;

  // Output [batch, out...], owned by the stage, valid until the next forward in this slot.
  // Slots hold the activations of separate micro-batches until their backward.
  const float* forward(const float* x, int64_t batch, int slot = 0);
  // dy: gradient of the loss w.r.t. this slot's output. dx: gradient w.r.t. the input, written
  // when not null. Gradients overwrite grads(), or add to them when accumulate.
  // grads_ready(i), when given, fires as soon as layer i's (global index) slice of grads() is
  // final for this call, last layer first: ddp starts its bucket all-reduces from it.
  void backward(const float* dy, float* dx, bool accumulate, int slot = 0,
                const std::function<void(int layer)>& grads_ready = {});
  // A stage of a net with skips may read values made before it and give outputs to layers after it
  // (boundary(): its entries and exits). These take the entries' values, in that order; give each
  // exit's value (fp32; valid as forward's output); and take each exit's gradient from the layers
  // after the stage (the last: the output's), writing each entry's gradient (null: not wanted) from
  // this stage's layers alone: the caller sums an entry's over the stages that read it.
  const StageBoundary& boundary() const { return boundary_; }
  const float* forward(const std::vector<const float*>& entries, int64_t batch, int slot = 0);
  const float* exit_value(std::size_t k, int slot = 0) const;
  void backward(const std::vector<const float*>& exit_grads, const std::vector<float*>& entry_grads, bool accumulate,
                int slot = 0, const std::function<void(int layer)>& grads_ready = {});
  // The same in two calls (zero-bubble pipelines): backward_data writes dx and keeps each weighted
  // layer's output gradient in the slot; backward_weights computes the weight gradients from them
  // later, then hands the kept gradients back for the next backward_data. Under bf16 the kept
  // gradients are bf16, as the whole backward passes them.
  void backward_data(const float* dy, float* dx, int slot = 0);
  void backward_weights(bool accumulate, int slot = 0);
  // backward_data of a stage of a net with skips: its exits' gradients in, its entries' out.
  void backward_data(const std::vector<const float*>& exit_grads, const std::vector<float*>& entry_grads, int slot = 0);
  // The flat grads() range [begin, end) of layer i (global index; empty for ReLU/Flatten).
  std::pair<int64_t, int64_t> layer_grad_range(int i) const;
  // Where forward and backward record their spans (one per call, or per layer with detail).
  void set_tracer(Tracer* t) { tracer_ = t; }
  // Every later forward/backward calls it around each layer's backend calls; null: none.
  void set_observer(LayerObserver* o) { observer_ = o; }
  // Frees backward's scratch for gradients between layers (made again when needed).
  void release_scratch() {
    (*gbuf_)[0] = (*gbuf_)[1] = Tensor();
    graph_pool_->clear();
  }
  // Uses other's scratch from now on: stages on one device whose backwards never overlap
  // (fsdp's units) hold one pair and one gradient pool, each buffer the largest any needs,
  // instead of one each.
  void share_scratch(Sequential& other) {
    gbuf_ = other.gbuf_;
    graph_pool_ = other.graph_pool_;
  }
  // The same for the bf16 copy of the parameters (autocast's weight cast): one buffer, the largest
  // any needs, instead of one per stage (fsdp's units); each backward then rounds it again.
  void share_params16(Sequential& other) {
    params16_ = other.params16_;
    params16_shared_ = other.params16_shared_ = true;
  }
  // Computes with these bf16 weights, the stage's parameters already in bf16 and kept by the
  // caller (fsdp's gathered parameters under --param-dtype bf16), instead of rounding its fp32
  // parameters; null: rounds them again.
  void use_params16(const Bf16* p) { ext16_ = p; }

 private:
  struct Slot {
    const float* input = nullptr;
    int64_t batch = 0;
    std::vector<const float*> out;  // per layer of the stage
    // Per layer of the stage, how its output (and that output's gradient) lies: Blocked only
    // between two convolutions the backend keeps so, never for the stage's own output.
    std::vector<ActLayout> layout;
    std::vector<Tensor> storage;
    // bf16 path: per layer its bf16 output (storage holds them); the stage's input rounded to
    // bf16, and its output widened to fp32.
    std::vector<const Bf16*> out16;
    Tensor in16, out32;
    // A graph stage's entries' values and exits' (fp32); bf16: the entries rounded, the exits widened.
    std::vector<const float*> entries, exits;
    std::vector<Tensor> entry16, exit32;
    int kept = -1;  // backward_data's kept output gradients (kept_), until backward_weights
  };
  enum class Pass { Both, Data, Weights };
  void backward_pass(const float* dy, float* dx, bool accumulate, int slot, const std::function<void(int)>& grads_ready,
                     Pass pass);
  // The slot's set of kept output gradients for a split pass (taken at Data, held until Weights
  // hands it back); nullptr for a whole backward.
  std::vector<Tensor>* kept_set(Slot& slot, int slot_id, Pass pass);
  const float* forward_bf16(const float* x, int64_t batch, int slot);
  // A stage of a net with skips (model_graph.cpp, model_graph_bf16.cpp): plain layouts; a
  // backward pass whole, or its data part keeping each weighted layer's output gradient in `kept`
  // and its weights part from them (graph_pass: the slot's kept set, then the pass).
  const float* forward_graph(const std::vector<const float*>& entries, int64_t batch, int slot);
  void graph_pass(const std::vector<const float*>& exit_grads, const std::vector<float*>& entry_grads, bool accumulate,
                  int slot, const std::function<void(int layer)>& grads_ready, Pass pass);
  void backward_graph(const std::vector<const float*>& exit_grads, const std::vector<float*>& entry_grads,
                      bool accumulate, int slot, const std::function<void(int layer)>& grads_ready, Pass pass,
                      std::vector<Tensor>* kept);
  // The slot sized for `batch` samples of the stage's layers, its entries taken (a graph stage).
  Slot& graph_slot(const std::vector<const float*>& entries, int64_t batch, int slot);
  // Buffer k of graph_back_'s pool, sized for `batch` samples of `dtype`.
  Tensor& graph_buffer(int k, int64_t batch, DType dtype);
  // A bf16 forward's start: the slot sized for `batch`, x rounded into its in16 (returned).
  Bf16* bf16_input(Slot& slot, const float* x, int64_t batch);
  const float* forward_graph_bf16(const std::vector<const float*>& entries, int64_t batch, int slot);
  void backward_graph_bf16(const std::vector<const float*>& exit_grads, const std::vector<float*>& entry_grads,
                           bool accumulate, int slot, const std::function<void(int layer)>& grads_ready, Pass pass,
                           std::vector<Tensor>* kept);
  // bf16: params_ rounded into the bf16 copy (unless use_params16's), which it returns.
  const Bf16* round_weights();
  void backward_bf16(const float* dy, float* dx, bool accumulate, int slot,
                     const std::function<void(int layer)>& grads_ready, Pass pass, std::vector<Tensor>* kept);
  Bf16* grad_scratch_bf16(int i, int64_t n);
  float* grad_scratch(int i, int64_t floats);
  std::vector<ActLayout> layouts(int64_t batch) const;
  ActLayout in_layout(const Slot& s, int j) const { return j == 0 ? ActLayout::Plain : s.layout[j - 1]; }

  const NetPlan& plan_;
  int begin_, end_;
  Backend* backend_;
  bool bf16_;
  bool graph_;  // is_graph_stage: run by forward_graph(_bf16) and backward_graph(_bf16)
  StageBoundary boundary_;
  GraphBackward graph_back_;
  std::shared_ptr<std::vector<Tensor>> graph_pool_ = std::make_shared<std::vector<Tensor>>();  // graph_back_.pool's buffers, kept
  Tensor params_, grads_;
  // bf16 path: params_ rounded to bf16 at every forward (shared: also at every backward).
  std::shared_ptr<Tensor> params16_ = std::make_shared<Tensor>();
  bool params16_shared_ = false;
  const Bf16* ext16_ = nullptr;  // use_params16's
  const Bf16* weights16() const { return ext16_ ? ext16_ : params16_->data_bf16(); }
  std::map<int, Slot> slots_;
  // Sets of per-layer output gradients kept from backward_data to backward_weights; reused.
  std::vector<std::vector<Tensor>> kept_;
  std::vector<int> kept_free_;
  std::shared_ptr<std::array<Tensor, 2>> gbuf_ = std::make_shared<std::array<Tensor, 2>>();
  Tracer* tracer_ = nullptr;
  LayerObserver* observer_ = nullptr;
};

// torch.optim.Adam over one flat buffer.
class Adam {
 public:
  Adam(Backend& backend, int64_t n, const AdamParams& p);
  void step(Tensor& params, const Tensor& grads);
  int64_t steps() const { return t_; }
  // Takes over another optimizer's moments and step count (any device): a replica rejoining.
  void copy_state_from(const Adam& other);
  void set_tracer(Tracer* t) { tracer_ = t; }

 private:
  Backend* backend_;
  AdamParams p_;
  Tensor m_, v_;
  int64_t t_ = 0;
  Tracer* tracer_ = nullptr;
};

}  // namespace pb
