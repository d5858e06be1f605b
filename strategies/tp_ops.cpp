#include "strategies/tp_ops.h"

#include <algorithm>

#include "engine/check.h"
#include "engine/model_detail.h"

namespace pb {

namespace {

// The layer's convolution over k of its output channels.
ConvGeom tp_geom(const LayerPlan& l, int64_t batch, int64_t k) {
  ConvGeom g = model_detail::geom(l, batch);
  g.k = k;
  return g;
}

// The transposed convolution over k of its output channels (the geometry's c).
ConvGeom tp_transposed_geom(const LayerPlan& l, int64_t batch, int64_t k) {
  ConvGeom g = model_detail::transposed_geom(l, batch);
  g.c = k;
  return g;
}

// Values of the layer's output over k of its channels at batch b.
int64_t slice_numel(const LayerPlan& l, int64_t b, int64_t k) {
  return b * k * (l.spec.type == LayerType::Linear ? 1 : numel_of(l.out) / l.out[0]);
}

}  // namespace

TpBf16Scratch tp_bf16_scratch(const NetPlan& net, const std::vector<TpSlice>& slices, int r, int64_t b) {
  TpBf16Scratch s;
  for (std::size_t i = 0; i < slices.size(); ++i) {
    if (slices[i].channels == 0) continue;
    s.in = std::max(s.in, b * numel_of(net.layers[i].in));
    s.out = std::max(s.out, b * slices[i].k[r] * slices[i].per_sample);  // an output gradient, rounded
  }
  return s;
}

void TpLayerOps::reserve(const TpBf16Scratch& s, int64_t params) {
  if (!bf16_) return;
  auto grow = [&](Tensor& t, int64_t n, DType dtype) {
    if (n <= 0 || (t.defined() && t.numel() >= n)) return;  // a net run as a graph rounds nothing here
    t = Tensor();  // released before the larger one is taken
    t = Tensor::empty({n}, be_.device(), dtype);
  };
  grow(p16_, std::max<int64_t>(params, 1), DType::Bf16), grow(in16_, s.in, DType::Bf16), grow(out16_, s.out, DType::Bf16);
}

void TpLayerOps::begin_step(const float* params, int64_t n) {
  params_ = params;
  // The master weights change at every optimizer step: rounded again, once, as a Sequential does.
  if (bf16_ && n > 0) be_.to_bf16(n, params, p16_.data_bf16());
}

Bf16* TpLayerOps::rounded(Tensor& scratch, int64_t n, const float* src) {
  PB_CHECK(scratch.numel() >= n, "tp: bf16 scratch of {} values for {}", scratch.numel(), n);
  be_.to_bf16(n, src, scratch.data_bf16());
  return scratch.data_bf16();
}

// The net's input is rounded here as a stage rounds its input; activations are bf16 already.
const Bf16* TpLayerOps::input16(const LayerPlan& l, int64_t b, Act x) {
  PB_CHECK((x.b16 != nullptr) != (x.f32 != nullptr), "tp: layer {}'s input is one of fp32 or bf16", l.index);
  return x.b16 ? x.b16 : rounded(in16_, b * numel_of(l.in), x.f32);
}

void TpLayerOps::forward(const LayerPlan& l, int64_t b, int64_t k, Act x, const float* w, const float* bias, Out y) {
  const bool conv = l.spec.type == LayerType::Conv2d;
  if (l.spec.type == LayerType::ConvTranspose2d) {
    if (!bf16_) return be_.conv_transpose2d_forward(tp_transposed_geom(l, b, k), x.f32, w, bias, y.f32);
    PB_CHECK(x.b16 && y.b16, "tp: transposed conv layer {} on fp32 buffers under bf16", l.index);
    return be_.conv_transpose2d_forward_bf16(tp_transposed_geom(l, b, k), x.b16, w16(w), w16(bias), y.b16);
  }
  if (!bf16_) {
    PB_CHECK(x.f32 && y.f32, "tp: an fp32 layer {} on bf16 buffers", l.index);
    if (conv) be_.conv2d_forward(tp_geom(l, b, k), x.f32, w, bias, y.f32);
    else be_.linear_forward(b, l.in[0], k, x.f32, w, bias, y.f32);
    return;
  }
  PB_CHECK(y.b16, "tp: layer {}'s bf16 output into an fp32 buffer", l.index);
  const Bf16* x16 = input16(l, b, x);
  if (conv) be_.conv2d_forward_bf16(tp_geom(l, b, k), x16, w16(w), w16(bias), y.b16);
  else be_.linear_forward_bf16(b, l.in[0], k, x16, w16(w), w16(bias), y.b16);
}

void TpLayerOps::backward_weights(const LayerPlan& l, int64_t b, int64_t k, Act x, const float* dy, float* dw,
                                  float* db) {
  const bool conv = l.spec.type == LayerType::Conv2d;
  if (l.spec.type == LayerType::ConvTranspose2d) {
    PB_CHECK(!bf16_ && x.f32, "tp: transposed conv layer {}: bf16 runs it as a graph (backward_weights16)", l.index);
    return be_.conv_transpose2d_backward_weights(tp_transposed_geom(l, b, k), x.f32, dy, dw, db, false);
  }
  if (!bf16_) {
    PB_CHECK(x.f32, "tp: an fp32 layer {} on bf16 buffers", l.index);
    if (conv) be_.conv2d_backward_weights(tp_geom(l, b, k), x.f32, dy, dw, db, false);
    else be_.linear_backward_weights(b, l.in[0], k, x.f32, dy, dw, db, false);
    return;
  }
  // The output gradient is rounded once here (the loss's fp32 gradient as a stage rounds it; the
  // sum of fp32 partials after their all-reduce), so dy16 is regular's gradient up to that sum's order.
  const Bf16* x16 = input16(l, b, x);
  const Bf16* dy16 = rounded(out16_, slice_numel(l, b, k), dy);
  if (conv) be_.conv2d_backward_weights_bf16(tp_geom(l, b, k), x16, dy16, dw, db, false);
  else be_.linear_backward_weights_bf16(b, l.in[0], k, x16, dy16, dw, db, false);
}

void TpLayerOps::backward_data(const LayerPlan& l, int64_t b, int64_t k, const float* dy, const float* w, float* dx,
                               bool partial) {
  const bool conv = l.spec.type == LayerType::Conv2d;
  if (l.spec.type == LayerType::ConvTranspose2d) {
    PB_CHECK(!bf16_, "tp: transposed conv layer {}: bf16 runs it as a graph (backward_data_unrounded)", l.index);
    return be_.conv_transpose2d_backward_data(tp_transposed_geom(l, b, k), dy, w, dx);
  }
  if (!bf16_) {
    if (conv) be_.conv2d_backward_data(tp_geom(l, b, k), dy, w, dx);
    else be_.linear_backward_data(b, l.in[0], k, dy, w, dx);
    return;
  }
  const Bf16* dy16 = rounded(out16_, slice_numel(l, b, k), dy);
  if (partial) {
    if (conv) be_.conv2d_backward_data_bf16_f32(tp_geom(l, b, k), dy16, w16(w), dx);
    else be_.linear_backward_data_bf16_f32(b, l.in[0], k, dy16, w16(w), dx);
    return;
  }
  // A whole layer: one rounding, as regular's, then widened into the fp32 buffer.
  const int64_t n = b * numel_of(l.in);
  Bf16* dx16 = in16_.data_bf16();
  if (conv) be_.conv2d_backward_data_bf16(tp_geom(l, b, k), dy16, w16(w), dx16);
  else be_.linear_backward_data_bf16(b, l.in[0], k, dy16, w16(w), dx16);
  be_.from_bf16(n, dx16, dx);
}

void TpLayerOps::backward_weights16(const LayerPlan& l, int64_t b, int64_t k, const Bf16* x, const Bf16* dy, float* dw,
                                    float* db) {
  switch (l.spec.type) {
    case LayerType::Conv2d: return be_.conv2d_backward_weights_bf16(tp_geom(l, b, k), x, dy, dw, db, false);
    case LayerType::ConvTranspose2d:
      return be_.conv_transpose2d_backward_weights_bf16(tp_transposed_geom(l, b, k), x, dy, dw, db, false);
    default: return be_.linear_backward_weights_bf16(b, l.in[0], k, x, dy, dw, db, false);
  }
}

void TpLayerOps::backward_data_unrounded(const LayerPlan& l, int64_t b, int64_t k, const Bf16* dy, const float* w,
                                         float* dx) {
  switch (l.spec.type) {
    case LayerType::Conv2d: return be_.conv2d_backward_data_bf16_f32(tp_geom(l, b, k), dy, w16(w), dx);
    case LayerType::ConvTranspose2d:
      return be_.conv_transpose2d_backward_data_bf16_f32(tp_transposed_geom(l, b, k), dy, w16(w), dx);
    default: return be_.linear_backward_data_bf16_f32(b, l.in[0], k, dy, w16(w), dx);
  }
}

}  // namespace pb
