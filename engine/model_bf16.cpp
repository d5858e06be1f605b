// Sequential under autocast (Precision::Bf16): convolutions and linear layers in bf16 with fp32
// accumulation, on a bf16 copy of the fp32 parameters made at every forward; bf16 activations and
// activation gradients between layers; fp32 at the stage's edges, so the loss, its gradient and
// whatever travels between stages stay fp32 (bf16 values widen exactly, so splitting a net into
// stages changes nothing); weight gradients written (and accumulated) in fp32.
#include "engine/check.h"
#include "engine/model.h"
#include "engine/model_detail.h"

namespace pb {

using namespace model_detail;

Bf16* Sequential::grad_scratch_bf16(int i, int64_t n) {
  Tensor& b = (*gbuf_)[i];
  // Taken at a backward's start, holding nothing yet: the old one goes before the larger is made.
  if (!b.defined() || b.dtype() != DType::Bf16 || b.numel() < n) b = Tensor(), b = Tensor::empty({n}, backend_->device(), DType::Bf16);
  return b.data_bf16();
}

const Bf16* Sequential::round_weights() {
  if (!ext16_) {
    Tensor& p16 = *params16_;  // shared: grown to the largest stage, then kept
    if (!p16.defined() || p16.numel() < params_.numel() || (!params16_shared_ && p16.numel() != params_.numel())) {
      p16 = Tensor();
      p16 = Tensor::empty({params_.numel()}, backend_->device(), DType::Bf16);
    }
    // The master weights may have changed since the last forward (an optimizer step, a load).
    if (params_.numel() > 0) backend_->to_bf16(params_.numel(), params_.data(), p16.data_bf16());
  }
  return weights16();
}

Bf16* Sequential::bf16_input(Slot& slot, const float* x, int64_t batch) {
  Backend& be = *backend_;
  if (slot.batch != batch) {
    slot.storage.resize(end_ - begin_);
    slot.out16.assign(end_ - begin_, nullptr);
    slot.layout = layouts(batch);
    slot.batch = batch;
  }
  slot.input = x;
  const int64_t in_n = in_numel(batch), out_n = out_numel(batch);
  if (!slot.in16.defined() || slot.in16.numel() < in_n) slot.in16 = Tensor::empty({in_n}, be.device(), DType::Bf16);
  if (!slot.out32.defined() || slot.out32.numel() < out_n) slot.out32 = Tensor::empty({out_n}, be.device());
  be.to_bf16(in_n, x, slot.in16.data_bf16());
  return slot.in16.data_bf16();
}

const float* Sequential::forward_bf16(const float* x, int64_t batch, int slot_id) {
  Slot& slot = slots_[slot_id];
  Backend& be = *backend_;
  Tracer::Scope span = call_span(tracer_, Phase::Forward, slot_id);
  const int64_t out_n = out_numel(batch);
  const Bf16* w16 = round_weights();
  Bf16* cur = bf16_input(slot, x, batch);
  const int64_t base = plan_.layers[begin_].param_offset;
  for (int i = begin_; i < end_; ++i) {
    const LayerPlan& l = plan_.layers[i];
    const int j = i - begin_;
    const int64_t n = batch * numel_of(l.out);
    // ReLU runs in place (every bf16 buffer here is the stage's own); flatten is a view.
    const bool alias = l.spec.type == LayerType::Flatten || l.spec.type == LayerType::ReLU;
    Tensor& own = slot.storage[j];
    if (!alias && (!own.defined() || own.numel() < n)) own = Tensor::empty({n}, be.device(), DType::Bf16);
    Bf16* y = alias ? cur : own.data_bf16();
    const Bf16* w = w16 + (l.param_offset - base);
    Tracer::Scope layer = layer_span(tracer_, Phase::Forward, slot_id, l);
    const LayerPass fwd = LayerPass::Forward;
    switch (l.spec.type) {
      case LayerType::Conv2d:
        observed_layer(observer_, tracer_, l, batch, bf16_, fwd, [&] {
          be.conv2d_forward_bf16_in(geom(l, batch), {in_layout(slot, j), slot.layout[j]}, cur, w, w + l.weight_numel, y);
        });
        break;
      case LayerType::ConvTranspose2d:
        observed_layer(observer_, tracer_, l, batch, bf16_, fwd,
                       [&] { be.conv_transpose2d_forward_bf16(transposed_geom(l, batch), cur, w, w + l.weight_numel, y); });
        break;
      case LayerType::Linear:
        observed_layer(observer_, tracer_, l, batch, bf16_, fwd,
                 [&] { be.linear_forward_bf16(batch, l.in[0], l.out[0], cur, w, w + l.weight_numel, y); });
        break;
      case LayerType::ReLU: observed_layer(observer_, tracer_, l, batch, bf16_, fwd, [&] { be.relu_forward_bf16(n, cur, y); }); break;
      case LayerType::Flatten: break;
      case LayerType::MaxPool2d:
        observed_layer(observer_, tracer_, l, batch, bf16_, fwd, [&] { be.max_pool2x2_forward_bf16(planes(l, batch), cur, y); });
        break;
      case LayerType::Upsample:
        observed_layer(observer_, tracer_, l, batch, bf16_, fwd, [&] { be.upsample2x_forward_bf16(planes(l, batch), cur, y); });
        break;
      case LayerType::Add:
      case LayerType::Concat: PB_CHECK(false, "layer {} ({}) in a chain", i, layer_type_name(l.spec.type));
    }
    slot.out16[j] = y;
    cur = y;
  }
  be.from_bf16(out_n, cur, slot.out32.data());
  return slot.out32.data();
}

void Sequential::backward_bf16(const float* dy, float* dx, bool accumulate, int slot_id,
                               const std::function<void(int)>& grads_ready, Pass pass, std::vector<Tensor>* kept) {
  Slot& slot = slots_.at(slot_id);
  const bool data = pass != Pass::Weights, weights = pass != Pass::Data;
  const int64_t batch = slot.batch;
  Tracer::Scope span = call_span(tracer_, Phase::Backward, slot_id);
  Backend& be = *backend_;
  const int64_t base = plan_.layers[begin_].param_offset;
  int64_t max_act = out_numel(batch);
  for (int i = begin_; i < end_; ++i) max_act = std::max(max_act, batch * numel_of(plan_.layers[i].in));
  Bf16* bufs[2] = {nullptr, nullptr};
  const Bf16* gout = nullptr;
  if (data) {
    bufs[0] = grad_scratch_bf16(0, max_act), bufs[1] = grad_scratch_bf16(1, max_act);
    // The loss gradient arrives in fp32 and is rounded once, as autocast's cast back to bf16 does.
    be.to_bf16(out_numel(batch), dy, bufs[0]);
    gout = bufs[0];
    // A shared copy holds the stage forwarded last: round this stage's weights again.
    if (!ext16_ && params16_shared_ && params_.numel() > 0) be.to_bf16(params_.numel(), params_.data(), params16_->data_bf16());
  }
  for (int i = end_ - 1; i >= begin_; --i) {
    const LayerPlan& l = plan_.layers[i];
    const int j = i - begin_;
    const Bf16* xin = j == 0 ? slot.in16.data_bf16() : slot.out16[j - 1];
    const bool need_dx = data && (i > begin_ || dx != nullptr);
    Bf16* gin = gout == bufs[0] ? bufs[1] : bufs[0];
    const Bf16* w = weights16() + (l.param_offset - base);
    float* gw = grads_.data() + (l.param_offset - base);
    Tracer::Scope layer = layer_span(tracer_, Phase::Backward, slot_id, l);
    if (has_weights(l.spec.type) && kept) {
      Tensor& k = (*kept)[j];
      const int64_t n = batch * numel_of(l.out);
      if (pass == Pass::Data) {  // a copy: gout lives in scratch that later layers reuse
        if (!k.defined() || k.dtype() != DType::Bf16 || k.numel() < n) k = Tensor::empty({n}, be.device(), DType::Bf16);
        be.copy(be.device(), k.data_bf16(), be.device(), gout, static_cast<std::size_t>(n) * sizeof(Bf16));
      } else {
        gout = k.data_bf16();
      }
    }
    switch (l.spec.type) {
      case LayerType::Conv2d: {
        const ConvGeom g = geom(l, batch);
        const ConvLayouts io{in_layout(slot, j), slot.layout[j]};
        if (weights)
          observed_layer(observer_, tracer_, l, batch, bf16_, LayerPass::BackwardWeights,
                   [&] { be.conv2d_backward_weights_bf16_in(g, io, xin, gout, gw, gw + l.weight_numel, accumulate); });
        if (grads_ready) grads_ready(i);
        if (need_dx)
          observed_layer(observer_, tracer_, l, batch, bf16_, LayerPass::BackwardData,
                         [&] { be.conv2d_backward_data_bf16_in(g, io, gout, w, gin); });
        break;
      }
      case LayerType::ConvTranspose2d: {
        const ConvGeom g = transposed_geom(l, batch);
        if (weights)
          observed_layer(observer_, tracer_, l, batch, bf16_, LayerPass::BackwardWeights,
                         [&] { be.conv_transpose2d_backward_weights_bf16(g, xin, gout, gw, gw + l.weight_numel, accumulate); });
        if (grads_ready) grads_ready(i);
        if (need_dx)
          observed_layer(observer_, tracer_, l, batch, bf16_, LayerPass::BackwardData,
                         [&] { be.conv_transpose2d_backward_data_bf16(g, gout, w, gin); });
        break;
      }
      case LayerType::Linear:
        if (weights)
          observed_layer(observer_, tracer_, l, batch, bf16_, LayerPass::BackwardWeights, [&] {
            be.linear_backward_weights_bf16(batch, l.in[0], l.out[0], xin, gout, gw, gw + l.weight_numel, accumulate);
          });
        if (grads_ready) grads_ready(i);
        if (need_dx)
          observed_layer(observer_, tracer_, l, batch, bf16_, LayerPass::BackwardData,
                   [&] { be.linear_backward_data_bf16(batch, l.in[0], l.out[0], gout, w, gin); });
        break;
      case LayerType::ReLU:
        if (grads_ready) grads_ready(i);
        if (need_dx)
          observed_layer(observer_, tracer_, l, batch, bf16_, LayerPass::BackwardData,
                   [&] { be.relu_backward_bf16(batch * numel_of(l.out), slot.out16[j], gout, gin); });
        break;
      case LayerType::Flatten:
        if (grads_ready) grads_ready(i);
        gin = const_cast<Bf16*>(gout);  // same memory layout: the gradient passes through
        break;
      case LayerType::MaxPool2d:
        if (grads_ready) grads_ready(i);
        if (need_dx)
          observed_layer(observer_, tracer_, l, batch, bf16_, LayerPass::BackwardData,
                         [&] { be.max_pool2x2_backward_bf16(planes(l, batch), xin, gout, gin); });
        break;
      case LayerType::Upsample:
        if (grads_ready) grads_ready(i);
        if (need_dx)
          observed_layer(observer_, tracer_, l, batch, bf16_, LayerPass::BackwardData,
                         [&] { be.upsample2x_backward_bf16(planes(l, batch), gout, gin); });
        break;
      case LayerType::Add:
      case LayerType::Concat: PB_CHECK(false, "layer {} ({}) in a chain", i, layer_type_name(l.spec.type));
    }
    gout = gin;
  }
  // The stage's input gradient leaves in fp32 (exact: a bf16 value widened).
  if (data && dx != nullptr) be.from_bf16(in_numel(batch), gout, dx);
  if (pass == Pass::Weights) kept_free_.push_back(slot.kept), slot.kept = -1;
}

}  // namespace pb
