// Sequential stage forward/backward and the Adam optimizer.
#include "engine/model.h"

#include "engine/check.h"
#include "engine/model_detail.h"

namespace pb {


using namespace model_detail;

Sequential::Sequential(const NetPlan& plan, int begin, int end, Backend& backend)
    : plan_(plan), begin_(begin), end_(end), backend_(&backend), bf16_(backend.precision() == Precision::Bf16) {
  PB_CHECK(0 <= begin && begin < end && end <= static_cast<int>(plan.layers.size()),
           "stage [{}, {}) of a {}-layer net", begin, end, plan.layers.size());
  graph_ = is_graph_stage(plan, begin, end);
  if (graph_ && bf16_)
    if (const std::string why = bf16_graph_refusal(plan); !why.empty()) throw UsageError(fmt::format("precision bf16: {}", why));
  boundary_ = stage_boundary(plan, begin, end);
  if (graph_) graph_back_ = plan_graph_backward(plan, begin, end, bf16_);
  int64_t n = 0;
  for (int i = begin; i < end; ++i) n += plan.layers[i].weight_numel + plan.layers[i].bias_numel;
  params_ = Tensor::zeros({n}, backend);
  grads_ = Tensor::zeros({n}, backend);
}

LayerWork layer_work(const LayerPlan& l, int64_t batch, LayerPass pass, int act_bytes, int weight_bytes, double part) {
  const double in = static_cast<double>(batch * numel_of(l.in)), all_out = static_cast<double>(batch * numel_of(l.out));
  const double share = has_weights(l.spec.type) ? part : 1;
  const double out = all_out * share;
  const double w = static_cast<double>(l.weight_numel) * share, b = static_cast<double>(l.bias_numel) * share;
  LayerWork work;
  switch (l.spec.type) {
    case LayerType::Conv2d:
    case LayerType::ConvTranspose2d:
    case LayerType::Linear:
      work.flops = l.forward_flops * static_cast<double>(batch) * share;
      if (pass == LayerPass::Forward) work.bytes = (in + out) * act_bytes + (w + b) * weight_bytes;
      else if (pass == LayerPass::BackwardData) work.bytes = (out + in) * act_bytes + w * weight_bytes;
      else work.bytes = (in + out) * act_bytes + (w + b) * sizeof(float);  // x and dy in, dw and db out
      break;
    case LayerType::ReLU:  // forward: x in, y out; backward: y and dy in, dx out
      work.flops = out;
      work.bytes = (pass == LayerPass::Forward ? 2 : 3) * out * act_bytes;
      break;
    case LayerType::Flatten: break;  // a view
    case LayerType::MaxPool2d:  // forward: a window's 4 in, 1 out; backward: x and dy in, dx out
      work.flops = 3 * out;
      work.bytes = (pass == LayerPass::Forward ? in + out : 2 * in + out) * act_bytes;
      break;
    case LayerType::Upsample:  // forward: x in, 4 copies out; backward: 4 dy in, their sum out
      work.flops = pass == LayerPass::Forward ? 0 : 3 * in;
      work.bytes = (in + out) * act_bytes;
      break;
    case LayerType::Add:  // forward: a and b in, y out; backward: dy in, to each input
      work.flops = pass == LayerPass::Forward ? out : 0;
      work.bytes = 3 * out * act_bytes;
      break;
    case LayerType::Concat:  // copies: every input value in and out once
      work.bytes = 2 * out * act_bytes;
      break;
  }
  return work;
}

double Sequential::forward_flops_per_sample() const {
  double f = 0;
  for (int i = begin_; i < end_; ++i) f += plan_.layers[i].forward_flops;
  return f;
}

void Sequential::load_params(const std::vector<float>& full) {
  PB_CHECK(static_cast<int64_t>(full.size()) == plan_.param_count, "{} parameters for a net of {}",
           full.size(), plan_.param_count);
  if (params_.numel() > 0) params_.copy_from_host(full.data() + plan_.layers[begin_].param_offset, params_.numel());
}

void Sequential::store_params(std::vector<float>& full) const {
  PB_CHECK(static_cast<int64_t>(full.size()) == plan_.param_count, "{} parameters for a net of {}",
           full.size(), plan_.param_count);
  std::vector<float> mine = params_.to_host();
  std::copy(mine.begin(), mine.end(), full.begin() + plan_.layers[begin_].param_offset);
}

std::vector<ActLayout> Sequential::layouts(int64_t batch) const {
  // A conv's output, through the ReLU after it (in place), into the next conv: the backend may
  // keep it in its own layout, which nothing outside the two convs' calls reads.
  std::vector<ActLayout> out(end_ - begin_, ActLayout::Plain);
  for (int i = begin_; i < end_; ++i) {
    if (plan_.layers[i].spec.type != LayerType::Conv2d) continue;
    int next = i + 1;
    if (next < end_ && plan_.layers[next].spec.type == LayerType::ReLU) ++next;
    if (next >= end_ || plan_.layers[next].spec.type != LayerType::Conv2d) continue;
    if (!backend_->conv_keeps_blocked(geom(plan_.layers[i], batch), geom(plan_.layers[next], batch))) continue;
    for (int j = i; j < next; ++j) out[j - begin_] = ActLayout::Blocked;
  }
  return out;
}

const float* Sequential::forward(const std::vector<const float*>& entries, int64_t batch, int slot_id) {
  PB_CHECK(entries.size() == boundary_.entries.size(), "stage [{}, {}) takes {} entries, got {}", begin_, end_,
           boundary_.entries.size(), entries.size());
  if (graph_) return bf16_ ? forward_graph_bf16(entries, batch, slot_id) : forward_graph(entries, batch, slot_id);
  const float* y = forward(entries[0], batch, slot_id);
  slots_[slot_id].exits = {y};
  return y;
}

const float* Sequential::exit_value(std::size_t k, int slot_id) const {
  auto it = slots_.find(slot_id);
  PB_CHECK(it != slots_.end() && k < it->second.exits.size(), "stage [{}, {}): exit {} before forward in slot {}",
           begin_, end_, k, slot_id);
  return it->second.exits[k];
}

namespace {
void check_boundary_grads(const StageBoundary& b, int begin, int end, std::size_t exits, std::size_t entries) {
  PB_CHECK(exits == b.exits.size() && entries == b.entries.size(),
           "stage [{}, {}) takes {} exit gradients and gives {} entry gradients, got {} and {}", begin, end,
           b.exits.size(), b.entries.size(), exits, entries);
}
}  // namespace

void Sequential::backward(const std::vector<const float*>& exit_grads, const std::vector<float*>& entry_grads,
                          bool accumulate, int slot_id, const std::function<void(int)>& grads_ready) {
  check_boundary_grads(boundary_, begin_, end_, exit_grads.size(), entry_grads.size());
  if (!graph_) return backward(exit_grads[0], entry_grads[0], accumulate, slot_id, grads_ready);
  graph_pass(exit_grads, entry_grads, accumulate, slot_id, grads_ready, Pass::Both);
}

void Sequential::backward_data(const std::vector<const float*>& exit_grads, const std::vector<float*>& entry_grads,
                               int slot_id) {
  check_boundary_grads(boundary_, begin_, end_, exit_grads.size(), entry_grads.size());
  if (!graph_) return backward_data(exit_grads[0], entry_grads[0], slot_id);
  graph_pass(exit_grads, entry_grads, false, slot_id, {}, Pass::Data);
}

void Sequential::graph_pass(const std::vector<const float*>& exit_grads, const std::vector<float*>& entry_grads,
                            bool accumulate, int slot_id, const std::function<void(int)>& grads_ready, Pass pass) {
  auto it = slots_.find(slot_id);
  PB_CHECK(it != slots_.end() && it->second.input != nullptr, "backward before forward in slot {}", slot_id);
  std::vector<Tensor>* kept = kept_set(it->second, slot_id, pass);
  if (bf16_) backward_graph_bf16(exit_grads, entry_grads, accumulate, slot_id, grads_ready, pass, kept);
  else backward_graph(exit_grads, entry_grads, accumulate, slot_id, grads_ready, pass, kept);
  if (pass == Pass::Weights) kept_free_.push_back(it->second.kept), it->second.kept = -1;
}

const float* Sequential::forward(const float* x, int64_t batch, int slot_id) {
  if (graph_) return forward(std::vector<const float*>{x}, batch, slot_id);
  if (bf16_) return forward_bf16(x, batch, slot_id);
  Slot& slot = slots_[slot_id];
  if (slot.batch != batch) {
    // Buffers kept: a slot that serves micro-batches of two sizes in turn (uneven splits) keeps
    // the larger one's rather than reallocating at every change.
    slot.storage.resize(end_ - begin_);
    slot.out.assign(end_ - begin_, nullptr);
    slot.layout = layouts(batch);
    slot.batch = batch;
  }
  slot.input = x;
  Tracer::Scope span = call_span(tracer_, Phase::Forward, slot_id);
  Backend& be = *backend_;
  const int64_t base = plan_.layers[begin_].param_offset;
  const float* cur = x;
  bool cur_owned = false;  // cur is this stage's own buffer, not the caller's input
  bool relu_done = false;  // the previous layer, a conv, already applied this layer's ReLU
  for (int i = begin_; i < end_; ++i) {
    const LayerPlan& l = plan_.layers[i];
    const int j = i - begin_;
    const int64_t out_n = batch * numel_of(l.out);
    // ReLU runs in place on its producer's output (never on the caller's input); flatten is a view.
    const bool alias = l.spec.type == LayerType::Flatten || (l.spec.type == LayerType::ReLU && cur_owned);
    Tensor& own = slot.storage[j];
    if (!alias && (!own.defined() || own.numel() < out_n)) own = Tensor::empty({out_n}, be.device());
    float* y = alias ? const_cast<float*>(cur) : own.data();
    const float* w = params_.data() + (l.param_offset - base);
    Tracer::Scope layer = layer_span(tracer_, Phase::Forward, slot_id, l);
    const LayerPass fwd = LayerPass::Forward;
    relu_done = relu_done && l.spec.type == LayerType::ReLU;
    switch (l.spec.type) {
      case LayerType::Conv2d: {
        // A ReLU right after a conv runs in place on the conv's output anyway: fused, it is done
        // here (its backward reads the same y), and its own step below is skipped.
        const bool fuse = i + 1 < end_ && plan_.layers[i + 1].spec.type == LayerType::ReLU;
        const ConvLayouts io{in_layout(slot, j), slot.layout[j]};
        observed_layer(observer_, tracer_, l, batch, bf16_, fwd, [&] {
          relu_done = fuse && be.conv2d_relu_forward_in(geom(l, batch), io, cur, w, w + l.weight_numel, y);
          if (!relu_done) be.conv2d_forward_in(geom(l, batch), io, cur, w, w + l.weight_numel, y);
        });
        break;
      }
      case LayerType::ConvTranspose2d:
        observed_layer(observer_, tracer_, l, batch, bf16_, fwd,
                       [&] { be.conv_transpose2d_forward(transposed_geom(l, batch), cur, w, w + l.weight_numel, y); });
        break;
      case LayerType::Linear:
        observed_layer(observer_, tracer_, l, batch, bf16_, fwd, [&] { be.linear_forward(batch, l.in[0], l.out[0], cur, w, w + l.weight_numel, y); });
        break;
      case LayerType::ReLU:  // element-wise: the same in either layout
        if (!relu_done) observed_layer(observer_, tracer_, l, batch, bf16_, fwd, [&] { be.relu_forward(out_n, cur, y); });
        break;
      case LayerType::Flatten: break;
      case LayerType::MaxPool2d:
        observed_layer(observer_, tracer_, l, batch, bf16_, fwd, [&] { be.max_pool2x2_forward(planes(l, batch), cur, y); });
        break;
      case LayerType::Upsample:
        observed_layer(observer_, tracer_, l, batch, bf16_, fwd, [&] { be.upsample2x_forward(planes(l, batch), cur, y); });
        break;
      case LayerType::Add:
      case LayerType::Concat: PB_CHECK(false, "layer {} ({}) in a chain", i, layer_type_name(l.spec.type));
    }
    slot.out[j] = y;
    cur_owned = cur_owned || !alias;
    cur = y;
  }
  return cur;
}

float* Sequential::grad_scratch(int i, int64_t floats) {
  Tensor& b = (*gbuf_)[i];
  // Taken at a backward's start, holding nothing yet: the old one goes before the larger is made.
  if (!b.defined() || b.dtype() != DType::F32 || b.numel() < floats) b = Tensor(), b = Tensor::empty({floats}, backend_->device());
  return b.data();
}

std::pair<int64_t, int64_t> Sequential::layer_grad_range(int i) const {
  PB_CHECK(begin_ <= i && i < end_, "layer {} outside stage [{}, {})", i, begin_, end_);
  const LayerPlan& l = plan_.layers[i];
  const int64_t lo = l.param_offset - plan_.layers[begin_].param_offset;
  return {lo, lo + l.weight_numel + l.bias_numel};
}

void Sequential::backward(const float* dy, float* dx, bool accumulate, int slot_id,
                          const std::function<void(int)>& grads_ready) {
  backward_pass(dy, dx, accumulate, slot_id, grads_ready, Pass::Both);
}

void Sequential::backward_data(const float* dy, float* dx, int slot_id) {
  backward_pass(dy, dx, false, slot_id, {}, Pass::Data);
}

void Sequential::backward_weights(bool accumulate, int slot_id) {
  backward_pass(nullptr, nullptr, accumulate, slot_id, {}, Pass::Weights);
}

void Sequential::backward_pass(const float* dy, float* dx, bool accumulate, int slot_id,
                               const std::function<void(int)>& grads_ready, Pass pass) {
  auto it = slots_.find(slot_id);
  PB_CHECK(it != slots_.end() && it->second.input != nullptr, "backward before forward in slot {}", slot_id);
  if (graph_) {
    if (pass == Pass::Weights) return graph_pass({}, {}, accumulate, slot_id, {}, pass);
    if (pass == Pass::Data) return backward_data(std::vector<const float*>{dy}, std::vector<float*>{dx}, slot_id);
    return backward(std::vector<const float*>{dy}, std::vector<float*>{dx}, accumulate, slot_id, grads_ready);
  }
  std::vector<Tensor>* kept = kept_set(it->second, slot_id, pass);  // the output gradients W reads, kept from B
  if (bf16_) return backward_bf16(dy, dx, accumulate, slot_id, grads_ready, pass, kept);
  Slot& slot = it->second;
  const int64_t batch = slot.batch;
  Tracer::Scope span = call_span(tracer_, Phase::Backward, slot_id);
  Backend& be = *backend_;
  const int64_t base = plan_.layers[begin_].param_offset;
  const bool data = pass != Pass::Weights, weights = pass != Pass::Data;
  int64_t max_act = 0;
  for (int i = begin_; i < end_; ++i) max_act = std::max(max_act, batch * numel_of(plan_.layers[i].in));
  float* bufs[2] = {nullptr, nullptr};
  if (data) bufs[0] = grad_scratch(0, max_act), bufs[1] = grad_scratch(1, max_act);
  const float* gout = dy;
  for (int i = end_ - 1; i >= begin_; --i) {
    const LayerPlan& l = plan_.layers[i];
    const int j = i - begin_;
    const float* xin = j == 0 ? slot.input : slot.out[j - 1];
    const bool need_dx = data && (i > begin_ || dx != nullptr);
    float* gin = nullptr;
    if (need_dx) gin = i == begin_ ? dx : (gout == bufs[0] ? bufs[1] : bufs[0]);
    float* w = params_.data() + (l.param_offset - base);
    float* gw = grads_.data() + (l.param_offset - base);
    Tracer::Scope layer = layer_span(tracer_, Phase::Backward, slot_id, l);
    if (has_weights(l.spec.type) && kept) {
      Tensor& k = (*kept)[j];
      const int64_t n = batch * numel_of(l.out);
      if (pass == Pass::Data) {  // a copy: gout lives in scratch (or the caller's dy) that later layers reuse
        if (!k.defined() || k.numel() < n) k = Tensor::empty({n}, be.device());
        be.copy(be.device(), k.data(), be.device(), gout, static_cast<std::size_t>(n) * sizeof(float));
      } else {
        gout = k.data();
      }
    }
    switch (l.spec.type) {
      case LayerType::Conv2d: {
        const ConvGeom g = geom(l, batch);
        const ConvLayouts io{in_layout(slot, j), slot.layout[j]};
        if (weights)
          observed_layer(observer_, tracer_, l, batch, bf16_, LayerPass::BackwardWeights,
                   [&] { be.conv2d_backward_weights_in(g, io, xin, gout, gw, gw + l.weight_numel, accumulate); });
        // Weight gradients first and announced before dx: a bucket's all-reduce can then run
        // alongside the rest of backward.
        if (grads_ready) grads_ready(i);
        if (need_dx)
          observed_layer(observer_, tracer_, l, batch, bf16_, LayerPass::BackwardData, [&] { be.conv2d_backward_data_in(g, io, gout, w, gin); });
        break;
      }
      case LayerType::ConvTranspose2d: {
        const ConvGeom g = transposed_geom(l, batch);
        if (weights)
          observed_layer(observer_, tracer_, l, batch, bf16_, LayerPass::BackwardWeights,
                         [&] { be.conv_transpose2d_backward_weights(g, xin, gout, gw, gw + l.weight_numel, accumulate); });
        if (grads_ready) grads_ready(i);
        if (need_dx)
          observed_layer(observer_, tracer_, l, batch, bf16_, LayerPass::BackwardData,
                         [&] { be.conv_transpose2d_backward_data(g, gout, w, gin); });
        break;
      }
      case LayerType::Linear:
        if (weights)
          observed_layer(observer_, tracer_, l, batch, bf16_, LayerPass::BackwardWeights, [&] {
            be.linear_backward_weights(batch, l.in[0], l.out[0], xin, gout, gw, gw + l.weight_numel, accumulate);
          });
        if (grads_ready) grads_ready(i);
        if (need_dx)
          observed_layer(observer_, tracer_, l, batch, bf16_, LayerPass::BackwardData,
                   [&] { be.linear_backward_data(batch, l.in[0], l.out[0], gout, w, gin); });
        break;
      case LayerType::ReLU:
        if (grads_ready) grads_ready(i);
        if (need_dx)
          observed_layer(observer_, tracer_, l, batch, bf16_, LayerPass::BackwardData,
                   [&] { be.relu_backward(batch * numel_of(l.out), slot.out[j], gout, gin); });
        break;
      case LayerType::Flatten:
        if (grads_ready) grads_ready(i);
        // Same memory layout: the gradient passes through, copied only into the caller's dx (on
        // the compute queue: no host wait, and on a shared GPU no wait for other workers).
        if (i == begin_ && dx != nullptr)
          be.copy(be.device(), dx, be.device(), gout, static_cast<std::size_t>(batch * numel_of(l.out)) * sizeof(float));
        if (i > begin_) continue;
        break;
      case LayerType::MaxPool2d:
        if (grads_ready) grads_ready(i);
        if (need_dx)
          observed_layer(observer_, tracer_, l, batch, bf16_, LayerPass::BackwardData,
                         [&] { be.max_pool2x2_backward(planes(l, batch), xin, gout, gin); });
        break;
      case LayerType::Upsample:
        if (grads_ready) grads_ready(i);
        if (need_dx)
          observed_layer(observer_, tracer_, l, batch, bf16_, LayerPass::BackwardData,
                         [&] { be.upsample2x_backward(planes(l, batch), gout, gin); });
        break;
      case LayerType::Add:
      case LayerType::Concat: PB_CHECK(false, "layer {} ({}) in a chain", i, layer_type_name(l.spec.type));
    }
    gout = gin;
  }
  if (pass == Pass::Weights) kept_free_.push_back(slot.kept), slot.kept = -1;
}

std::vector<Tensor>* Sequential::kept_set(Slot& slot, int slot_id, Pass pass) {
  if (pass == Pass::Data) {
    PB_CHECK(slot.kept < 0, "backward_data twice in slot {} without backward_weights", slot_id);
    if (kept_free_.empty()) kept_free_.push_back(static_cast<int>(kept_.size())), kept_.emplace_back(end_ - begin_);
    slot.kept = kept_free_.back();
    kept_free_.pop_back();
  } else if (pass == Pass::Weights) {
    PB_CHECK(slot.kept >= 0, "backward_weights before backward_data in slot {}", slot_id);
  }
  return pass == Pass::Both ? nullptr : &kept_[slot.kept];
}

Adam::Adam(Backend& backend, int64_t n, const AdamParams& p)
    : backend_(&backend), p_(p), m_(Tensor::zeros({n}, backend)), v_(Tensor::zeros({n}, backend)) {}

void Adam::step(Tensor& params, const Tensor& grads) {
  PB_CHECK(params.numel() == m_.numel() && grads.numel() == m_.numel(), "Adam over {} values, got {} and {}",
           m_.numel(), params.numel(), grads.numel());
  ++t_;
  Tracer::Scope span = tracer_ ? tracer_->compute(Phase::Optimizer, -1, [] { return std::string("adam"); }) : Tracer::Scope{};
  if (m_.numel() > 0) backend_->adam_step(m_.numel(), params.data(), grads.data(), m_.data(), v_.data(), p_, t_);
}

void Adam::copy_state_from(const Adam& other) {
  PB_CHECK(other.m_.numel() == m_.numel(), "Adam state of {} values into one of {}", other.m_.numel(), m_.numel());
  if (m_.numel() > 0) {
    m_.copy_from(other.m_);
    v_.copy_from(other.v_);
  }
  t_ = other.t_;
}

}  // namespace pb
