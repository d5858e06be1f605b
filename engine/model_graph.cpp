// Sequential over a stage of a net with skips: each layer reads the outputs its `inputs` name, and
// backward sums each output's gradient over its readers (engine/graph_stage.h says where).
#include "engine/check.h"
#include "engine/model.h"
#include "engine/model_detail.h"

namespace pb {

using namespace model_detail;

Sequential::Slot& Sequential::graph_slot(const std::vector<const float*>& entries, int64_t batch, int slot_id) {
  Slot& slot = slots_[slot_id];
  if (slot.batch != batch) {
    slot.storage.resize(end_ - begin_);
    slot.out.assign(end_ - begin_, nullptr);
    slot.out16.assign(end_ - begin_, nullptr);
    slot.layout.assign(end_ - begin_, ActLayout::Plain);
    slot.batch = batch;
  }
  slot.entries = entries;
  slot.input = entries.front();
  slot.exits.assign(boundary_.exits.size(), nullptr);
  return slot;
}

const float* Sequential::forward_graph(const std::vector<const float*>& entries, int64_t batch, int slot_id) {
  Slot& slot = graph_slot(entries, batch, slot_id);
  Tracer::Scope span = call_span(tracer_, Phase::Forward, slot_id);
  Backend& be = *backend_;
  const int64_t base = plan_.layers[begin_].param_offset;
  const ConvLayouts plain{};
  for (int i = begin_; i < end_; ++i) {
    const LayerPlan& l = plan_.layers[i];
    const int j = i - begin_;
    auto in = [&](std::size_t k) {
      return l.inputs[k] < begin_ ? slot.entries[boundary_.entry_of(l.inputs[k])] : slot.out[l.inputs[k] - begin_];
    };
    const float* cur = in(0);
    const int64_t out_n = batch * numel_of(l.out);
    const bool alias = graph_in_place(plan_, begin_, i);
    Tensor& own = slot.storage[j];
    if (!alias && (!own.defined() || own.numel() < out_n)) own = Tensor::empty({out_n}, be.device());
    float* y = alias ? const_cast<float*>(cur) : own.data();
    const float* w = params_.data() + (l.param_offset - base);
    Tracer::Scope layer = layer_span(tracer_, Phase::Forward, slot_id, l);
    const LayerPass fwd = LayerPass::Forward;
    auto run = [&](auto&& call) { observed_layer(observer_, tracer_, l, batch, false, fwd, call); };
    switch (l.spec.type) {
      case LayerType::Conv2d: run([&] { be.conv2d_forward_in(geom(l, batch), plain, cur, w, w + l.weight_numel, y); }); break;
      case LayerType::ConvTranspose2d:
        run([&] { be.conv_transpose2d_forward(transposed_geom(l, batch), cur, w, w + l.weight_numel, y); });
        break;
      case LayerType::Linear: run([&] { be.linear_forward(batch, l.in[0], l.out[0], cur, w, w + l.weight_numel, y); }); break;
      case LayerType::Flatten: break;
      default: run([&] { parameterless_forward(be, plan_, l, batch, in, y); }); break;
    }
    slot.out[j] = y;
    if (graph_back_.exit_of[j] >= 0) slot.exits[graph_back_.exit_of[j]] = y;
  }
  return slot.out.back();
}

Tensor& Sequential::graph_buffer(int k, int64_t batch, DType dtype) {
  std::vector<Tensor>& pool = *graph_pool_;
  if (pool.size() < graph_back_.pool.size()) pool.resize(graph_back_.pool.size());
  Tensor& t = pool[k];
  const int64_t n = graph_back_.pool[k] * batch;
  // Nothing in it outlives a backward: the old one goes before the larger is made.
  if (!t.defined() || t.dtype() != dtype || t.numel() < n) t = Tensor(), t = Tensor::empty({n}, backend_->device(), dtype);
  return t;
}

void Sequential::backward_graph(const std::vector<const float*>& exit_grads, const std::vector<float*>& entry_grads,
                                bool accumulate, int slot_id, const std::function<void(int)>& grads_ready, Pass pass,
                                std::vector<Tensor>* kept) {
  Slot& slot = slots_.at(slot_id);
  const int64_t batch = slot.batch;
  Tracer::Scope span = call_span(tracer_, Phase::Backward, slot_id);
  Backend& be = *backend_;
  const int64_t base = plan_.layers[begin_].param_offset;
  const ConvLayouts plain{};
  auto pool = [&](int k) { return k < 0 ? nullptr : graph_buffer(k, batch, DType::F32).data(); };
  for (int i = end_ - 1; i >= begin_; --i) {
    const LayerPlan& l = plan_.layers[i];
    const int j = i - begin_;
    if (pass == Pass::Weights && !has_weights(l.spec.type)) continue;
    const int exit = graph_back_.exit_of[j];
    float* own = pass == Pass::Weights ? nullptr : pool(graph_back_.grad_of[j]);
    const float* gout = pass == Pass::Weights ? (*kept)[j].data() : own ? own : exit_grads[exit];
    const float* xin = l.inputs[0] < begin_ ? slot.entries[boundary_.entry_of(l.inputs[0])] : slot.out[l.inputs[0] - begin_];
    float* w = params_.data() + (l.param_offset - base);
    float* gw = grads_.data() + (l.param_offset - base);
    Tracer::Scope layer = layer_span(tracer_, Phase::Backward, slot_id, l);
    auto run = [&](LayerPass pass, auto&& call) { observed_layer(observer_, tracer_, l, batch, false, pass, call); };
    // An exit's gradient from later stages: added to the sum of its readers here, or the whole of it.
    if (exit >= 0 && own && pass != Pass::Weights)
      run(LayerPass::BackwardData, [&] { be.add(batch * numel_of(l.out), own, exit_grads[exit], own); });
    if (pass == Pass::Data && has_weights(l.spec.type)) {  // for the weights pass: the pool and exits are reused
      Tensor& k = (*kept)[j];
      const int64_t n = batch * numel_of(l.out);
      if (!k.defined() || k.numel() < n) k = Tensor::empty({n}, be.device());
      be.copy(be.device(), k.data(), be.device(), gout, static_cast<std::size_t>(n) * sizeof(float));
    }
    if (pass != Pass::Data) switch (l.spec.type) {
      case LayerType::Conv2d:
        run(LayerPass::BackwardWeights,
            [&] { be.conv2d_backward_weights_in(geom(l, batch), plain, xin, gout, gw, gw + l.weight_numel, accumulate); });
        break;
      case LayerType::ConvTranspose2d:
        run(LayerPass::BackwardWeights, [&] {
          be.conv_transpose2d_backward_weights(transposed_geom(l, batch), xin, gout, gw, gw + l.weight_numel, accumulate);
        });
        break;
      case LayerType::Linear:
        run(LayerPass::BackwardWeights, [&] {
          be.linear_backward_weights(batch, l.in[0], l.out[0], xin, gout, gw, gw + l.weight_numel, accumulate);
        });
        break;
      default: break;
    }
    if (grads_ready) grads_ready(i);
    if (pass == Pass::Weights) continue;
    input_gradients<float>(
        plan_, l, graph_back_.writes[j], batch, gout,
        [&](const GraphBackward::Write& wr) { return wr.target < 0 ? entry_grads[wr.entry] : pool(wr.buf); }, pool,
        [&](float* to, const float* from, int64_t n) { be.copy(be.device(), to, be.device(), from, static_cast<std::size_t>(n) * sizeof(float)); },
        [&](int64_t n, float* to, const float* from) { run(LayerPass::BackwardData, [&] { be.add(n, to, from, to); }); },
        [&](std::size_t k, float* into, int64_t n, int64_t at) {
          run(LayerPass::BackwardData, [&] {
            switch (l.spec.type) {
              case LayerType::Conv2d: be.conv2d_backward_data_in(geom(l, batch), plain, gout, w, into); break;
              case LayerType::ConvTranspose2d: be.conv_transpose2d_backward_data(transposed_geom(l, batch), gout, w, into); break;
              case LayerType::Linear: be.linear_backward_data(batch, l.in[0], l.out[0], gout, w, into); break;
              default: parameterless_backward_data(be, l, batch, k, slot.out[j], xin, gout, into, n, at);
            }
          });
        });
  }
}

}  // namespace pb
