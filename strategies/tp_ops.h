// A tp worker's layer computations (strategies/tp.cpp): the backend's fp32 calls, or under
// --precision bf16 autocast's (docs/bf16.md, "tp across workers"): the step's weights rounded once
// from the fp32 master slices, activations kept in bf16 (the net's fp32 input rounded as a stage
// rounds it), output gradients fp32 between layers and rounded to bf16 before each call, weight
// gradients fp32, and a split layer's partial input gradient kept fp32 until its all-reduce.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/backend.h"
#include "engine/net.h"
#include "engine/tensor.h"
#include "strategies/rules.h"

namespace pb {

// The bf16 scratch a tp worker (rank r of its group, batch b) holds, in bf16 values: the rounded
// net input (and a replicated layer's input gradient), and the output gradients of its channels.
// The memory estimate counts the same.
struct TpBf16Scratch {
  int64_t in = 0, out = 0;
};
TpBf16Scratch tp_bf16_scratch(const NetPlan& net, const std::vector<TpSlice>& slices, int r, int64_t b);

class TpLayerOps {
 public:
  explicit TpLayerOps(Backend& be) : be_(be), bf16_(be.precision() == Precision::Bf16) {}
  // Allocates the scratch (bf16 only; kept while large enough, so a step allocates nothing).
  void reserve(const TpBf16Scratch& s, int64_t params);
  // Before the step's first forward: the weights' bf16 copy (bf16 only). `params` is the buffer the
  // calls' w and bias point into.
  void begin_step(const float* params, int64_t n);
  // A layer's input or output: fp32 (the fp32 calls; under bf16, only the net's input) or bf16.
  struct Act {
    const float* f32 = nullptr;
    const Bf16* b16 = nullptr;
  };
  struct Out {
    float* f32 = nullptr;
    Bf16* b16 = nullptr;
  };
  bool bf16() const { return bf16_; }
  // A conv, linear or (fp32) transposed conv layer over k of its output channels.
  void forward(const LayerPlan& l, int64_t b, int64_t k, Act x, const float* w, const float* bias, Out y);
  void backward_weights(const LayerPlan& l, int64_t b, int64_t k, Act x, const float* dy, float* dw, float* db);
  // partial: dx is this worker's term of a sum over channel slices, all-reduced next; under bf16 it
  // stays fp32 (rounded once, by the next layer's call, after the sum), else it is rounded here.
  void backward_data(const LayerPlan& l, int64_t b, int64_t k, const float* dy, const float* w, float* dx,
                     bool partial);
  // A net run as a graph under bf16 (it rounds nothing itself): bf16 inputs and output gradients,
  // fp32 weight gradients, and the input gradient in fp32, unrounded (a split layer's partial sums,
  // all-reduced before they are rounded once; a whole layer's rounded once too, by the caller).
  void backward_weights16(const LayerPlan& l, int64_t b, int64_t k, const Bf16* x, const Bf16* dy, float* dw, float* db);
  void backward_data_unrounded(const LayerPlan& l, int64_t b, int64_t k, const Bf16* dy, const float* w, float* dx);

 private:
  const Bf16* w16(const float* w) const { return p16_.data_bf16() + (w - params_); }
  Bf16* rounded(Tensor& scratch, int64_t n, const float* src);
  const Bf16* input16(const LayerPlan& l, int64_t b, Act x);  // x in bf16, the net's input rounded

  Backend& be_;
  bool bf16_;
  const float* params_ = nullptr;
  Tensor p16_, in16_, out16_;
};

}  // namespace pb
