// Sequential over a stage of a net with skips under autocast (Precision::Bf16): bf16 outputs and
// output gradients, the adds and copies of model_graph.cpp on them, fp32 at the stage's edges as
// model_bf16.cpp's chains (the stage's input rounded once, its output widened).
#include "engine/check.h"
#include "engine/model.h"
#include "engine/model_detail.h"

namespace pb {

using namespace model_detail;

namespace {
// t, grown to hold n values of dtype where it holds fewer (kept between calls).
Tensor& grown(Tensor& t, int64_t n, Device d, DType dtype) {
  if (!t.defined() || t.dtype() != dtype || t.numel() < n) t = Tensor::empty({n}, d, dtype);
  return t;
}
}  // namespace

const float* Sequential::forward_graph_bf16(const std::vector<const float*>& entries, int64_t batch, int slot_id) {
  Slot& slot = graph_slot(entries, batch, slot_id);
  Backend& be = *backend_;
  Tracer::Scope span = call_span(tracer_, Phase::Forward, slot_id);
  const Bf16* w16 = round_weights();
  // Each entry rounded once at the stage's edge, each exit widened there.
  const StageBoundary& sb = boundary_;
  slot.entry16.resize(sb.entries.size());
  for (std::size_t k = 0; k < sb.entries.size(); ++k) {
    const int64_t n = batch * output_numel(plan_, sb.entries[k]);
    be.to_bf16(n, entries[k], grown(slot.entry16[k], n, be.device(), DType::Bf16).data_bf16());
  }
  slot.exit32.resize(sb.exits.size());
  const int64_t base = plan_.layers[begin_].param_offset;
  for (int i = begin_; i < end_; ++i) {
    const LayerPlan& l = plan_.layers[i];
    const int j = i - begin_;
    auto in = [&](std::size_t k) -> const Bf16* {
      return l.inputs[k] < begin_ ? slot.entry16[sb.entry_of(l.inputs[k])].data_bf16() : slot.out16[l.inputs[k] - begin_];
    };
    const Bf16* cur = in(0);
    const int64_t n = batch * numel_of(l.out);
    // In place only on an output of the stage's own (graph_in_place), never the caller's.
    const bool alias = graph_in_place(plan_, begin_, i);
    Bf16* y = alias ? const_cast<Bf16*>(cur) : grown(slot.storage[j], n, be.device(), DType::Bf16).data_bf16();
    const Bf16* w = w16 + (l.param_offset - base);
    Tracer::Scope layer = layer_span(tracer_, Phase::Forward, slot_id, l);
    auto run = [&](auto&& call) { observed_layer(observer_, tracer_, l, batch, true, LayerPass::Forward, call); };
    switch (l.spec.type) {
      case LayerType::Conv2d: run([&] { be.conv2d_forward_bf16(geom(l, batch), cur, w, w + l.weight_numel, y); }); break;
      case LayerType::ConvTranspose2d:
        run([&] { be.conv_transpose2d_forward_bf16(transposed_geom(l, batch), cur, w, w + l.weight_numel, y); });
        break;
      case LayerType::Linear: run([&] { be.linear_forward_bf16(batch, l.in[0], l.out[0], cur, w, w + l.weight_numel, y); }); break;
      case LayerType::Flatten: break;
      default: run([&] { parameterless_forward(be, plan_, l, batch, in, y); }); break;
    }
    slot.out16[j] = y;
  }
  for (std::size_t k = 0; k < sb.exits.size(); ++k) {
    const int64_t n = batch * numel_of(plan_.layers[sb.exits[k]].out);
    slot.exits[k] = grown(slot.exit32[k], n, be.device(), DType::F32).data();
    be.from_bf16(n, slot.out16[sb.exits[k] - begin_], const_cast<float*>(slot.exits[k]));
  }
  return slot.exits.back();
}

void Sequential::backward_graph_bf16(const std::vector<const float*>& exit_grads, const std::vector<float*>& entry_grads,
                                     bool accumulate, int slot_id, const std::function<void(int)>& grads_ready, Pass pass,
                                     std::vector<Tensor>* kept) {
  Slot& slot = slots_.at(slot_id);
  const int64_t batch = slot.batch;
  Tracer::Scope span = call_span(tracer_, Phase::Backward, slot_id);
  Backend& be = *backend_;
  const int64_t base = plan_.layers[begin_].param_offset;
  const Device d = be.device();
  // Layer l's input (bf16) and its weight gradients from its output gradient `gout`.
  auto input16 = [&](const LayerPlan& l) {
    return l.inputs[0] < begin_ ? slot.entry16[boundary_.entry_of(l.inputs[0])].data_bf16() : slot.out16[l.inputs[0] - begin_];
  };
  auto weight_grads = [&](const LayerPlan& l, const Bf16* gout) {
    const Bf16* xin = input16(l);
    float* gw = grads_.data() + (l.param_offset - base);
    observed_layer(observer_, tracer_, l, batch, true, LayerPass::BackwardWeights, [&] {
      if (l.spec.type == LayerType::Conv2d)
        be.conv2d_backward_weights_bf16(geom(l, batch), xin, gout, gw, gw + l.weight_numel, accumulate);
      else if (l.spec.type == LayerType::ConvTranspose2d)
        be.conv_transpose2d_backward_weights_bf16(transposed_geom(l, batch), xin, gout, gw, gw + l.weight_numel, accumulate);
      else
        be.linear_backward_weights_bf16(batch, l.in[0], l.out[0], xin, gout, gw, gw + l.weight_numel, accumulate);
    });
  };
  if (pass == Pass::Weights) {  // from the output gradients the data pass kept
    for (int i = end_ - 1; i >= begin_; --i) {
      const LayerPlan& l = plan_.layers[i];
      if (!has_weights(l.spec.type)) continue;
      Tracer::Scope layer = layer_span(tracer_, Phase::Backward, slot_id, l);
      weight_grads(l, (*kept)[i - begin_].data_bf16());
    }
    return;
  }
  // The output's gradient rounded once (autocast's cast back to bf16) into backward's scratch, the
  // other exits' where the pool says; the entries' made in bf16 in the pool, widened at the end.
  Bf16* dy16 = grad_scratch_bf16(0, out_numel(batch));
  be.to_bf16(out_numel(batch), exit_grads.back(), dy16);
  if (!ext16_ && params16_shared_ && params_.numel() > 0) be.to_bf16(params_.numel(), params_.data(), params16_->data_bf16());
  auto pool = [&](int k) { return k < 0 ? nullptr : graph_buffer(k, batch, DType::Bf16).data_bf16(); };
  for (int i = end_ - 1; i >= begin_; --i) {
    const LayerPlan& l = plan_.layers[i];
    const int j = i - begin_;
    const int exit = graph_back_.exit_of[j];
    const Bf16* gout = i == end_ - 1 ? dy16 : pool(graph_back_.grad_of[j]);
    const Bf16* xin = input16(l);
    const Bf16* w = weights16() + (l.param_offset - base);
    Tracer::Scope layer = layer_span(tracer_, Phase::Backward, slot_id, l);
    auto run = [&](LayerPass pass, auto&& call) { observed_layer(observer_, tracer_, l, batch, true, pass, call); };
    if (exit >= 0 && i < end_ - 1) {  // an exit's gradient from later stages, rounded (exact: bf16 values)
      const int64_t n = batch * numel_of(l.out);
      const int tmp = graph_back_.exit_tmp[j];
      Bf16* into = tmp < 0 ? const_cast<Bf16*>(gout) : pool(tmp);
      be.to_bf16(n, exit_grads[exit], into);
      if (tmp >= 0) run(LayerPass::BackwardData, [&] { be.add_bf16(n, const_cast<Bf16*>(gout), into, const_cast<Bf16*>(gout)); });
    }
    if (pass == Pass::Data && has_weights(l.spec.type)) {  // for the weights pass: the pool and scratch are reused
      Tensor& k = (*kept)[j];
      const int64_t n = batch * numel_of(l.out);
      if (!k.defined() || k.numel() < n || k.dtype() != DType::Bf16) k = Tensor::empty({n}, d, DType::Bf16);
      be.copy(d, k.data_bf16(), d, gout, static_cast<std::size_t>(n) * sizeof(Bf16));
    }
    if (pass != Pass::Data && has_weights(l.spec.type)) weight_grads(l, gout);
    if (grads_ready) grads_ready(i);
    input_gradients<Bf16>(
        plan_, l, graph_back_.writes[j], batch, gout,
        [&](const GraphBackward::Write& wr) { return wr.target < 0 && !entry_grads[wr.entry] ? nullptr : pool(wr.buf); },
        pool,
        [&](Bf16* to, const Bf16* from, int64_t n) { be.copy(d, to, d, from, static_cast<std::size_t>(n) * sizeof(Bf16)); },
        [&](int64_t n, Bf16* to, const Bf16* from) { run(LayerPass::BackwardData, [&] { be.add_bf16(n, to, from, to); }); },
        [&](std::size_t k, Bf16* into, int64_t n, int64_t at) {
          run(LayerPass::BackwardData, [&] {
            switch (l.spec.type) {
              case LayerType::Conv2d: be.conv2d_backward_data_bf16(geom(l, batch), gout, w, into); break;
              case LayerType::ConvTranspose2d: be.conv_transpose2d_backward_data_bf16(transposed_geom(l, batch), gout, w, into); break;
              case LayerType::Linear: be.linear_backward_data_bf16(batch, l.in[0], l.out[0], gout, w, into); break;
              default: parameterless_backward_data(be, l, batch, k, slot.out16[j], xin, gout, into, n, at);
            }
          });
        });
  }
  for (std::size_t k = 0; k < entry_grads.size(); ++k)
    if (entry_grads[k])
      be.from_bf16(batch * output_numel(plan_, boundary_.entries[k]), pool(graph_back_.entry_buf[k]), entry_grads[k]);
}

}  // namespace pb
