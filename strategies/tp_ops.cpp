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

// Values of the layer's output over k of its channels at batch b.
int64_t slice_numel(const LayerPlan& l, int64_t b, int64_t k) {
  return b * k * (l.spec.type == LayerType::Conv2d ? numel_of(l.out) / l.out[0] : 1);
}

}  // namespace

TpBf16Scratch tp_bf16_scratch(const NetPlan& net, const std::vector<TpSlice>& slices, int r, int64_t b) {
  TpBf16Scratch s;
  for (std::size_t i = 0; i < slices.size(); ++i) {
    if (slices[i].channels == 0) continue;
    s.in = std::max(s.in, b * numel_of(net.layers[i].in));
    s.out = std::max(s.out, b * slices[i].k[r] * slices[i].per_sample);
  }
  return s;
}

void TpLayerOps::reserve(const TpBf16Scratch& s, int64_t params) {
  if (!bf16_) return;
  auto grow = [&](Tensor& t, int64_t n) {
    if (t.defined() && t.numel() >= n) return;
    t = Tensor();  // released before the larger one is taken
    t = Tensor::empty({std::max<int64_t>(n, 1)}, be_.device(), DType::Bf16);
  };
  grow(p16_, params), grow(in16_, s.in), grow(out16_, s.out);
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

void TpLayerOps::forward(const LayerPlan& l, int64_t b, int64_t k, const float* x, const float* w, const float* bias,
                         float* y) {
  const bool conv = l.spec.type == LayerType::Conv2d;
  const int64_t out = slice_numel(l, b, k);
  if (!bf16_) {
    if (conv) be_.conv2d_forward(tp_geom(l, b, k), x, w, bias, y);
    else be_.linear_forward(b, l.in[0], k, x, w, bias, y);
    return;
  }
  // The net's input is rounded here as a stage rounds its input; activations are bf16 values already.
  const Bf16* x16 = rounded(in16_, b * numel_of(l.in), x);
  Bf16* y16 = out16_.data_bf16();
  PB_CHECK(out16_.numel() >= out, "tp: bf16 scratch of {} values for {}", out16_.numel(), out);
  if (conv) be_.conv2d_forward_bf16(tp_geom(l, b, k), x16, w16(w), w16(bias), y16);
  else be_.linear_forward_bf16(b, l.in[0], k, x16, w16(w), w16(bias), y16);
  be_.from_bf16(out, y16, y);
}

void TpLayerOps::backward_weights(const LayerPlan& l, int64_t b, int64_t k, const float* x, const float* dy,
                                  float* dw, float* db) {
  const bool conv = l.spec.type == LayerType::Conv2d;
  if (!bf16_) {
    if (conv) be_.conv2d_backward_weights(tp_geom(l, b, k), x, dy, dw, db, false);
    else be_.linear_backward_weights(b, l.in[0], k, x, dy, dw, db, false);
    return;
  }
  // The output gradient is rounded once here (the loss's fp32 gradient as a stage rounds it; the
  // sum of fp32 partials after their all-reduce), so dy16 is regular's gradient up to that sum's order.
  const Bf16* x16 = rounded(in16_, b * numel_of(l.in), x);
  const Bf16* dy16 = rounded(out16_, slice_numel(l, b, k), dy);
  if (conv) be_.conv2d_backward_weights_bf16(tp_geom(l, b, k), x16, dy16, dw, db, false);
  else be_.linear_backward_weights_bf16(b, l.in[0], k, x16, dy16, dw, db, false);
}

void TpLayerOps::backward_data(const LayerPlan& l, int64_t b, int64_t k, const float* dy, const float* w, float* dx,
                               bool partial) {
  const bool conv = l.spec.type == LayerType::Conv2d;
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

}  // namespace pb
