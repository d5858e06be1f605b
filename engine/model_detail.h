// Helpers shared by Sequential's fp32 (model.cpp) and bf16 (model_bf16.cpp) paths.
#pragma once

#include <string>
#include <type_traits>
#include <utility>

#include <fmt/format.h>

#include "engine/backend.h"
#include "engine/check.h"
#include "engine/graph_stage.h"
#include "engine/model.h"

namespace pb::model_detail {

// A span for the whole call (phase level), or for one layer when the tracer keeps detail.
inline Tracer::Scope call_span(Tracer* t, Phase p, int micro) {
  if (!t || t->detail()) return {};
  return t->compute(p, micro, [&] { return std::string(phase_name(p)); });
}
inline Tracer::Scope layer_span(Tracer* t, Phase p, int micro, const LayerPlan& l) {
  if (!t || !t->detail()) return {};
  return t->compute(p, micro, [&] { return fmt::format("L{} {}", l.index, layer_type_name(l.spec.type)); });
}

// A traced step: the layer's pass `pass` goes to its open span's work.
inline void traced_work(Tracer* t, const LayerPlan& l, int64_t batch, LayerPass pass, bool bf16) {
  if (!t || !t->detail()) return;
  const LayerWork w = layer_work(l, batch, pass, bf16 ? 2 : 4, bf16 ? 2 : 4);
  t->add_work(w.flops, w.bytes);
}

// Runs one backend call of a layer, with the observer (when any) around it.
template <class Call>
void observed(LayerObserver* o, int layer, LayerPass pass, Call&& call) {
  if (o) o->before(layer, pass);
  call();
  if (o) o->after(layer, pass);
}
// The same for layer l at `batch` samples; in a traced step its work goes to the layer's span.
template <class Call>
void observed_layer(LayerObserver* o, Tracer* t, const LayerPlan& l, int64_t batch, bool bf16, LayerPass pass, Call&& call) {
  observed(o, l.index, pass, std::forward<Call>(call));
  traced_work(t, l, batch, pass, bf16);
}

inline ConvGeom geom(const LayerPlan& l, int64_t batch) {
  ConvGeom g;
  g.n = batch;
  g.c = l.in[0], g.h = l.in[1], g.w = l.in[2];
  g.k = l.spec.out_channels, g.r = l.spec.kernel_h, g.s = l.spec.kernel_w;
  g.stride_h = l.spec.stride_h, g.stride_w = l.spec.stride_w;
  g.pad_h = l.spec.pad_h, g.pad_w = l.spec.pad_w;
  return g;
}

// A conv_transpose2d layer as the convolution it is the adjoint of (Backend::conv_transpose2d_*):
// that convolution's input is the layer's output, and its output the layer's input.
inline ConvGeom transposed_geom(const LayerPlan& l, int64_t batch) {
  ConvGeom g;
  g.n = batch;
  g.c = l.out[0], g.h = l.out[1], g.w = l.out[2];
  g.k = l.in[0], g.r = l.spec.kernel_h, g.s = l.spec.kernel_w;
  g.stride_h = l.spec.stride_h, g.stride_w = l.spec.stride_w;
  g.pad_h = l.spec.pad_h, g.pad_w = l.spec.pad_w;
  return g;
}

// Per-sample values of layer src's output (kNetInput: the net's input).
inline int64_t output_numel(const NetPlan& plan, int src) { return numel_of(src == kNetInput ? plan.input : plan.layers[src].out); }

// Layer l's input gradients in a graph stage, where plan_graph_backward put them (its `writes`):
// `target(w)` is where input w's gradient goes (null: not asked for). Add and flatten pass their
// output gradient on (`copy` at the first write, `add` after it); the other layers make their
// share with `make(k, into, n, at)` (input k, n values; at: its channels' offset in a concat's
// sample), straight into the target at the first write, else into `scratch(w.tmp)`, then added.
template <class T, class Target, class Scratch, class Copy, class Add, class Make>
void input_gradients(const NetPlan& plan, const LayerPlan& l, const std::vector<GraphBackward::Write>& writes, int64_t batch,
                     const T* gout, Target&& target, Scratch&& scratch, Copy&& copy, Add&& add, Make&& make) {
  const bool passes = l.spec.type == LayerType::Add || l.spec.type == LayerType::Flatten;
  int64_t at = 0;
  for (std::size_t k = 0; k < l.inputs.size(); ++k) {
    const GraphBackward::Write& w = writes[k];
    const int64_t part = output_numel(plan, l.inputs[k]), n = batch * part;
    if (T* to = target(w)) {
      if (passes && w.first) {
        copy(to, gout, n);
      } else if (passes) {
        add(n, to, gout);
      } else {
        T* into = w.first ? to : scratch(w.tmp);
        make(k, into, n, at);
        if (!w.first) add(n, to, into);
      }
    }
    at += part;
  }
}

// A pooling or upsampling layer's input, as the backend ops take it.
inline Planes planes(const LayerPlan& l, int64_t batch) { return {batch, l.in[0], l.in[1], l.in[2]}; }

// A parameterless layer's forward (flatten: nothing, a view) in fp32 or, T = Bf16, autocast's
// bf16 (each value computed in fp32 and rounded once): `in(k)` is its input k. The graph stages
// (model_graph*.cpp) and tp's graph step (strategies/tp.cpp) make these calls.
template <class T, class In>
void parameterless_forward(Backend& be, const NetPlan& plan, const LayerPlan& l, int64_t batch, In&& in, T* y) {
  constexpr bool half = std::is_same_v<T, Bf16>;
  const int64_t n = batch * numel_of(l.out);
  switch (l.spec.type) {
    case LayerType::ReLU:
      if constexpr (half) be.relu_forward_bf16(n, in(0), y);
      else be.relu_forward(n, in(0), y);
      break;
    case LayerType::Flatten: break;
    case LayerType::MaxPool2d:
      if constexpr (half) be.max_pool2x2_forward_bf16(planes(l, batch), in(0), y);
      else be.max_pool2x2_forward(planes(l, batch), in(0), y);
      break;
    case LayerType::Upsample:
      if constexpr (half) be.upsample2x_forward_bf16(planes(l, batch), in(0), y);
      else be.upsample2x_forward(planes(l, batch), in(0), y);
      break;
    case LayerType::Add:
      if constexpr (half) be.add_bf16(n, in(0), in(1), y);
      else be.add(n, in(0), in(1), y);
      break;
    case LayerType::Concat: {  // each input's samples into their channels of every output sample
      int64_t at = 0;
      for (std::size_t k = 0; k < l.inputs.size(); ++k) {
        const int64_t part = output_numel(plan, l.inputs[k]);
        if constexpr (half) be.copy_2d_bf16(y + at, numel_of(l.out), in(k), part, part, batch);
        else be.copy_2d(y + at, numel_of(l.out), in(k), part, part, batch);
        at += part;
      }
      break;
    }
    default: PB_CHECK(false, "layer {} ({}) has weights", l.index, layer_type_name(l.spec.type));
  }
}

// The share of a parameterless layer's input k (n values; at: its channels' offset in a concat's
// sample) of the output gradient `gout`, into `into` (input_gradients' `make`); y is the layer's
// output, x its input k.
template <class T>
void parameterless_backward_data(Backend& be, const LayerPlan& l, int64_t batch, std::size_t k, const T* y, const T* x,
                                 const T* gout, T* into, int64_t n, int64_t at) {
  constexpr bool half = std::is_same_v<T, Bf16>;
  switch (l.spec.type) {
    case LayerType::ReLU:
      if constexpr (half) be.relu_backward_bf16(n, y, gout, into);
      else be.relu_backward(n, y, gout, into);
      break;
    case LayerType::MaxPool2d:
      if constexpr (half) be.max_pool2x2_backward_bf16(planes(l, batch), x, gout, into);
      else be.max_pool2x2_backward(planes(l, batch), x, gout, into);
      break;
    case LayerType::Upsample:
      if constexpr (half) be.upsample2x_backward_bf16(planes(l, batch), gout, into);
      else be.upsample2x_backward(planes(l, batch), gout, into);
      break;
    case LayerType::Concat:
      if constexpr (half) be.copy_2d_bf16(into, n / batch, gout + at, numel_of(l.out), n / batch, batch);
      else be.copy_2d(into, n / batch, gout + at, numel_of(l.out), n / batch, batch);
      break;
    default: PB_CHECK(false, "layer {} ({}): input {} has no backward", l.index, layer_type_name(l.spec.type), k);
  }
}

}  // namespace pb::model_detail
