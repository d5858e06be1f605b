// tp: tensor parallelism over output channels (Megatron's column split, for convolutions and
// linear layers). Every worker has the whole batch and holds a slice of each layer's output
// channels (weight rows and bias); it computes its channels, and the full activation is
// all-gathered before the next layer. In backward each worker computes its slice's weight
// gradients and a partial input gradient, which is all-reduced. Layers with fewer outputs than
// workers stay whole on every worker (replicated, computed redundantly). Transposed convs split
// the same way (their weights [in, out, kh, kw]: the slice is the same columns of every row).
//
// A net that is not a chain of conv, linear, ReLU and flatten layers (skips, pooling, upsampling,
// transposed convs; rules.h, tp_chain) runs as a graph: every layer reads the whole outputs
// it names, the parameterless ones computed on every worker, and backward sums each output's
// gradient over its readers where plan_graph_backward says (tp_plan.cpp, emit_graph_step).
//
// dp x tp hybrids (dp<D>xtp<T>): D replicas of a T-way tp group, worker r being tp rank r % T of
// replica r / T. Each replica takes its torch.chunk piece of the batch; its collectives run on
// the replica's communicator, and after backward each worker's slice gradients are all-reduced
// (summed) among the D workers of its tp rank.
//
// Under --precision bf16 the layers make autocast's calls (strategies/tp_ops.h): activations are
// kept and all-gathered in bf16, the partial input gradients are summed in fp32 and rounded once
// after (docs/bf16.md, "tp across workers").
#include <algorithm>
#include <functional>
#include <optional>
#include <type_traits>

#include "engine/check.h"
#include "engine/graph_stage.h"
#include "engine/model.h"
#include "engine/model_detail.h"
#include "engine/process.h"
#include "strategies/batch.h"
#include "strategies/executor.h"
#include "strategies/group.h"
#include "strategies/plan_gen.h"
#include "strategies/registry.h"
#include "strategies/rules.h"
#include "strategies/tp_ops.h"

namespace pb {

namespace {

using Slice = TpSlice;

class TensorParallel final : public GroupStrategy {
 public:
  TensorParallel(const StrategyOptions& o, const std::string& name, int replicas)
      : GroupStrategy(o, name, true, /*replicas=*/false), replicas_(replicas) {
    PB_CHECK(replicas_ >= 1 && o.devices % replicas_ == 0, "{}: {} replicas over {} workers", name, replicas_, o.devices);
  }

  // Replica 0's slices placed into the whole vector, whole layers from worker 0 only; the sum
  // over the job is then exact.
  std::vector<float> params() override {
    std::vector<float> full(static_cast<std::size_t>(plan().param_count), 0.0f);
    for (int r = 0; r < ways(); ++r) {
      if (!group().is_local(r)) continue;
      const std::vector<float> mine = state_.at(r).params.to_host();
      for (std::size_t i = 0; i < slices_.size(); ++i) {
        const Slice& s = slices_[i];
        const LayerPlan& l = plan().layers[i];
        if (s.channels == 0 || (!s.split && r != 0)) continue;
        const float* w = mine.data() + s.at[r];
        weight_runs(l, s, r, [&](int64_t whole, int64_t n, int64_t slice) {
          std::copy(w + slice, w + slice + n, full.begin() + l.param_offset + whole);
        });
        const int64_t k = s.k[r];
        std::copy(w + k * s.fan, w + k * s.fan + k, full.begin() + l.param_offset + l.weight_numel + s.lo[r]);
      }
    }
    world_sum(full.data(), static_cast<int64_t>(full.size()));
    return full;
  }

 protected:
  void plan_workers() override {
    slices_ = tp_slices(plan(), ways(), name());
    graph_ = workers() > 1 && !tp_chain(plan());
    if (graph_) back_ = plan_graph_backward(plan(), 0, static_cast<int>(plan().layers.size()));
    state_.clear();
    state_.resize(workers());
  }

  void setup_worker(Worker& w, const std::vector<float>& params, const AdamParams& adam) override {
    const int r = tp_rank(w.rank);
    int64_t total = 0;
    std::vector<float> mine;
    for (std::size_t i = 0; i < slices_.size(); ++i) {
      const Slice& s = slices_[i];
      if (s.channels == 0) continue;
      const LayerPlan& l = plan().layers[i];
      const auto w0 = params.begin() + l.param_offset, b0 = w0 + l.weight_numel;
      const std::size_t at = mine.size();
      mine.resize(at + static_cast<std::size_t>(s.k[r] * s.fan));
      weight_runs(l, s, r, [&](int64_t whole, int64_t n, int64_t slice) {
        std::copy(w0 + whole, w0 + whole + n, mine.begin() + static_cast<std::ptrdiff_t>(at) + slice);
      });
      mine.insert(mine.end(), b0 + s.lo[r], b0 + s.lo[r] + s.k[r]);
      total += s.k[r] * (s.fan + 1);
    }
    PB_CHECK(static_cast<int64_t>(mine.size()) == total, "{}: worker {} holds {} of {} values", name(), w.rank,
             mine.size(), total);
    State& st = state_[w.rank];
    if (workers() == 1) {
      // One worker splits nothing: every layer whole, in the net's own parameter order, so the
      // whole net runs as one Sequential (the backend's blocked layouts and fused ReLUs between
      // layers, regular's buffers), its parameters and gradients the worker's slices.
      w.model = std::make_unique<Sequential>(plan(), 0, static_cast<int>(slices_.size()), w.be());
      w.model->set_tracer(&w.tracer);
      w.model->load_params(params);
      PB_CHECK(w.model->params().to_host() == mine, "{}: one worker's slices are not the net's parameters", name());
      st.params = w.model->params();
      st.grads = w.model->grads();
    } else {
      st.params = Tensor::from_host({total}, mine, w.device);
      st.grads = Tensor::zeros({total}, w.be());
      st.ops = std::make_unique<TpLayerOps>(w.be());
    }
    w.adam = std::make_unique<Adam>(w.be(), total, adam);
  }

  // The whole batch on every worker, or its replica's piece.
  int plan_batch(int64_t batch) override {
    piece_ = replica_pieces(batch, replicas_, name());
    piece_offset_ = chunk_offsets(piece_);
    if (replicas_ > 1) {  // each replica's tp group, and the workers of each tp rank
      std::vector<std::vector<int>> groups(replicas_), ranks(ways());
      for (int r = 0; r < workers(); ++r) {
        groups[replica_of(r)].push_back(r);
        ranks[tp_rank(r)].push_back(r);
      }
      group().connect_parts("tp", groups);
      group().connect_parts("dp", ranks);
    }
    plan_ = plan_tp(plan(), opts_, batch, name(), replicas_);
    group_part_.clear();
    for (const PlanGroup& pg : plan_.groups)
      group_part_.push_back(pg.name.rfind("tp ", 0) == 0 ? "tp" : pg.name.rfind("dp ", 0) == 0 ? "dp" : "");
    return workers();
  }

  void load_worker(Worker& w, const std::vector<float>& x, const std::vector<float>& t) override {
    const int d = replica_of(w.rank);
    const int64_t b = piece_[d], at = piece_offset_[d];
    const int64_t in = numel_of(plan().input), out_n = numel_of(plan().output);
    w.x = Tensor::from_host({b * in}, std::vector<float>(x.begin() + at * in, x.begin() + (at + b) * in), w.device);
    w.t = Tensor::from_host({b * out_n}, std::vector<float>(t.begin() + at * out_n, t.begin() + (at + b) * out_n), w.device);
    w.dy = Tensor::empty({b * numel_of(plan().output)}, w.device);
    w.loss = Tensor::zeros({1}, w.be());
    State& st = state_[w.rank];
    st.acts.clear();
    if (w.model) return;  // one worker: the Sequential holds its activations and scratch
    if (graph_) return load_graph(st, w.device, b);
    const DType kept = st.ops->bf16() ? DType::Bf16 : DType::F32;  // the activations' dtype
    int64_t gathered = 1, local = 1, act = 1;
    for (std::size_t i = 0; i < slices_.size(); ++i) {
      const LayerPlan& l = plan().layers[i];
      const Slice& s = slices_[i];
      // Flatten is a view of its input, and a ReLU runs in place on its producer's output (never
      // on the net's input), as in a Sequential; every other layer has its own output.
      const bool view = l.spec.type == LayerType::Flatten || (l.spec.type == LayerType::ReLU && !st.acts.empty() &&
                                                              out_owned(st.acts));
      st.acts.push_back(view ? Tensor() : Tensor::empty({b * numel_of(l.out)}, w.device, kept));
      act = std::max(act, b * numel_of(l.in));
      if (s.split) {
        gathered = std::max(gathered, ways() * b * s.piece * s.per_sample);
        local = std::max(local, b * s.piece * s.per_sample);
      }
    }
    st.gathered = Tensor::empty({gathered}, w.device, kept);
    st.dy_local = Tensor::empty({local}, w.device);
    st.y32 = kept == DType::Bf16 ? Tensor::empty({b * out_n}, w.device) : Tensor();  // the loss's fp32 input
    for (Tensor& g : st.dx) g = Tensor::empty({act}, w.device);
    st.ops->reserve(tp_bf16_scratch(plan(), slices_, tp_rank(w.rank), b), st.params.numel());
  }

  // The worker's plan (plan_tp) run by the executor; each layer's computations here.
  void step(Worker& w, Group& g) override {
    const int r = tp_rank(w.rank);  // also the worker's rank in its tp communicator
    const int64_t b = piece_[replica_of(w.rank)];
    Backend& be = w.be();
    State& st = state_[w.rank];
    const int64_t out = numel_of(plan().output);
    PlanExecutor::Binding bind;
    bind.tracer = &w.tracer;
    bind.comm = [&](int group) -> std::pair<Communicator*, int> {
      if (group_part_[group].empty()) return {&g.comm(), w.rank};
      return {&g.part_comm(group_part_[group], w.rank), g.part_rank(group_part_[group], w.rank)};
    };
    if (w.model) {  // one worker: regular's step
      Sequential& m = *w.model;
      const float* y = nullptr;
      bind.at = [&](const Action& a, int, bool) -> float* {
        PB_CHECK(false, "{}: one worker does not communicate ({})", name(), describe(plan_, w.rank, a.id));
        return nullptr;
      };
      bind.compute = [&](const Action& a) {
        switch (a.kind) {
          case ActionKind::Forward: y = m.forward(w.x.data(), b); break;
          case ActionKind::Loss: {
            auto loss_span = w.tracer.compute(Phase::Loss, 0, [] { return std::string("mse loss"); });
            be.mse_loss_grad(m.out_numel(b), y, w.t.data(), grad_scale(), w.dy.data(), w.loss.data());
            break;
          }
          case ActionKind::BackwardWeights: break;  // one call computes both backwards
          case ActionKind::BackwardData: m.backward(w.dy.data(), nullptr, false); break;
          case ActionKind::Optimizer: w.adam->step(st.params, st.grads); break;
          default: PB_CHECK(false, "{}: worker {} cannot run {}", name(), w.rank, describe(plan_, w.rank, a.id));
        }
      };
      PlanExecutor(plan_, w.rank, std::move(bind)).run();
      w.stats.samples = b;
      return;
    }
    if (graph_) return step_graph(w, std::move(bind), b);
    const bool bf16 = st.ops->bf16();
    // Which layer's buffer holds a layer's whole output (Flatten, in-place ReLU: their input's); -1:
    // the net's fp32 input.
    auto owner = [&](int i) {
      while (i >= 0 && !st.acts[i].defined()) --i;
      return i;
    };
    auto act_of = [&](int i) -> TpLayerOps::Act {
      const int o = owner(i);
      if (o < 0) return {w.x.data(), nullptr};
      return bf16 ? TpLayerOps::Act{nullptr, st.acts[o].data_bf16()} : TpLayerOps::Act{st.acts[o].data(), nullptr};
    };
    // A split layer's piece of the gathered buffer: its channels of every sample, computed in place.
    auto piece_of = [&](const Slice& s) { return b * s.piece * s.per_sample; };
    auto gathered_at = [&](const Action& a, bool write) { return write ? 0 : r * piece_of(slices_.at(a.layer_begin)); };
    bind.at16 = [&](const Action& a, int buf, bool write) -> Bf16* {
      PB_CHECK(plan_.buffers[buf].role == BufferRole::Gathered, "{}: worker {} keeps no {} in bf16", name(), w.rank,
               buffer_label(plan_.buffers[buf]));
      return st.gathered.data_bf16() + gathered_at(a, write);
    };
    bind.at = [&](const Action& a, int buf, bool write) -> float* {
      const PlanBuffer& pb = plan_.buffers[buf];
      if (pb.role == BufferRole::Gathered) return st.gathered.data() + gathered_at(a, write);
      if (pb.role == BufferRole::Grads) return st.grads.data();
      PB_CHECK(pb.role == BufferRole::InputGrad && pb.index >= 0 && pb.index < 2, "{}: worker {} has no buffer {}", name(),
               w.rank, buffer_label(pb));
      return st.dx[pb.index].data();
    };
    std::optional<Tracer::Scope> fwd_span, bwd_span;  // one span each over the layers' calls, as a Sequential's
    float* gout = w.dy.data();
    const float* dy = gout;
    int next = 0, copies = 0;  // which dx buffer the next input gradient goes to; the layer's piece copies so far
    bool backward = false;     // past the loss
    // A traced step (detail): a span per computation, each with its action's id, for project
    // --validate's comparison action by action; else one per phase (fewer spans in a timed step).
    const bool each = w.tracer.detail();
    auto backward_span = [&] {  // opened by the first backward computation, so it carries its id
      if (!bwd_span && !each) bwd_span.emplace(w.tracer.compute(Phase::Backward, 0, [] { return std::string("backward"); }));
    };
    bind.compute = [&](const Action& a) {
      const int i = a.layer_begin;
      std::optional<Tracer::Scope> own;
      if (each && a.kind != ActionKind::Loss && a.kind != ActionKind::Optimizer)
        own.emplace(w.tracer.compute(backward ? Phase::Backward : Phase::Forward, 0,
                                     [&] { return fmt::format("{} layer {}", action_kind_name(a.kind), i); }));
      const LayerPlan* l = i >= 0 ? &plan().layers[i] : nullptr;
      const Slice* s = i >= 0 ? &slices_[i] : nullptr;
      // A traced step: the work of this worker's share of the layer (its channels of K) to its span.
      auto traced = [&](LayerPass pass) {
        if (!own || !l) return;
        const double part = s->channels > 0 ? static_cast<double>(s->k[r]) / static_cast<double>(s->channels) : 1;
        const LayerWork wk = layer_work(*l, b, pass, bf16 ? 2 : 4, bf16 ? 2 : 4, part);
        w.tracer.add_work(wk.flops, wk.bytes);
      };
      switch (a.kind) {
        case ActionKind::Forward: {
          if (!fwd_span && !backward && !each)
            fwd_span.emplace(w.tracer.compute(Phase::Forward, 0, [] { return std::string("forward"); }));
          const TpLayerOps::Act x = act_of(i - 1);
          copies = 0;
          if (i == 0) st.ops->begin_step(st.params.data(), st.params.numel());
          if (l->spec.type == LayerType::ReLU) {  // into its own output, or in place on its producer's
            const int64_t n = b * numel_of(l->out);
            const Tensor& y = st.acts[owner(i)];
            if (!bf16) {
              be.relu_forward(n, x.f32, y.data());
            } else {
              if (x.f32) be.to_bf16(n, x.f32, y.data_bf16());  // the net's input, rounded as a stage rounds it
              be.relu_forward_bf16(n, x.b16 ? x.b16 : y.data_bf16(), y.data_bf16());
            }
            traced(LayerPass::Forward);
          }
          if (s->channels == 0) break;
          const float* wt = st.params.data() + s->at[r];
          const int64_t at = s->split ? r * piece_of(*s) : 0;
          const Tensor& y = s->split ? st.gathered : st.acts[i];
          const TpLayerOps::Out mine = bf16 ? TpLayerOps::Out{nullptr, y.data_bf16() + at} : TpLayerOps::Out{y.data() + at, nullptr};
          st.ops->forward(*l, b, s->k[r], x, wt, wt + s->k[r] * s->fan, mine);
          traced(LayerPass::Forward);
          break;
        }
        case ActionKind::Copy:
          if (!backward) {  // piece q of [worker][sample][its channels] into [sample][channel], on the compute stream
            const int q = copies++;
            const int64_t to = s->lo[q] * s->per_sample, from = q * piece_of(*s), width = s->k[q] * s->per_sample;
            if (bf16)
              be.copy_2d_bf16(st.acts[i].data_bf16() + to, s->channels * s->per_sample, st.gathered.data_bf16() + from, width,
                              width, b);
            else
              be.copy_2d(st.acts[i].data() + to, s->channels * s->per_sample, st.gathered.data() + from, width, width, b);
          } else {  // this worker's channels of the output gradient, [sample][its channels]
            backward_span();
            const int64_t k = s->k[r];
            be.copy_2d(st.dy_local.data(), k * s->per_sample, gout + s->lo[r] * s->per_sample,
                       s->channels * s->per_sample, k * s->per_sample, b);
            dy = st.dy_local.data();
          }
          break;
        case ActionKind::Loss: {
          fwd_span.reset();
          {
            auto loss_span = w.tracer.compute(Phase::Loss, 0, [] { return std::string("mse loss"); });
            const TpLayerOps::Act y = act_of(static_cast<int>(slices_.size()) - 1);
            if (y.b16) be.from_bf16(b * out, y.b16, st.y32.data());  // the loss in fp32
            be.mse_loss_grad(b * out, y.b16 ? st.y32.data() : y.f32, w.t.data(), grad_scale(), w.dy.data(), w.loss.data());
          }
          backward = true;
          break;
        }
        case ActionKind::BackwardWeights: {
          backward_span();
          float* gw = st.grads.data() + s->at[r];
          const int64_t k = s->k[r];
          if (!s->split) dy = gout;
          st.ops->backward_weights(*l, b, k, act_of(i - 1), dy, gw, gw + k * s->fan);
          traced(LayerPass::BackwardWeights);
          break;
        }
        case ActionKind::BackwardData: {
          backward_span();
          if (l->spec.type == LayerType::ReLU && i > 0) {
            const int64_t n = b * numel_of(l->out);
            const TpLayerOps::Act y = act_of(i);
            // bf16: its output widened into the input-gradient buffer the next layer writes (free until then).
            if (y.b16) be.from_bf16(n, y.b16, st.dx[next].data());
            be.relu_backward(n, y.b16 ? st.dx[next].data() : y.f32, gout, gout);
            traced(LayerPass::BackwardData);
          }
          if (l->spec.type == LayerType::Conv2d || l->spec.type == LayerType::Linear) {
            const int64_t k = s->k[r];
            const float* wt = st.params.data() + s->at[r];
            float* dx = i > 0 ? st.dx[next].data() : nullptr;
            if (dx) {
              st.ops->backward_data(*l, b, k, dy, wt, dx, s->split);
              traced(LayerPass::BackwardData);
              gout = dx;  // a split layer's partial sums: their all-reduce, next in the plan, completes it
              next = 1 - next;
            }
          }
          if (i == 0) bwd_span.reset();
          break;
        }
        case ActionKind::Optimizer: w.adam->step(st.params, st.grads); break;
        default: PB_CHECK(false, "{}: worker {} cannot run {}", name(), w.rank, describe(plan_, w.rank, a.id));
      }
    };
    PlanExecutor(plan_, w.rank, std::move(bind)).run();
    w.stats.samples = b;
  }

  // Every worker of a replica computes its whole loss; it is counted once.
  double loss_sum(Worker& w) override { return tp_rank(w.rank) == 0 ? GroupStrategy::loss_sum(w) : 0.0; }

 public:
  const Plan* step_plan() const override { return &plan_; }

 private:
  struct State {
    Tensor params, grads;  // this worker's slices of every layer: weight rows then bias, layer by layer
    std::vector<Tensor> acts;  // per layer: its whole output (undefined for Flatten)
    Tensor gathered, dy_local, dx[2];
    Tensor y32;  // bf16: the net's output widened for the loss
    std::unique_ptr<TpLayerOps> ops;  // several workers: the layers' calls, fp32 or bf16
    std::vector<Tensor> pool;         // a net run as a graph: backward's gradient buffers (back_.pool)
    Tensor x16, dy16, partial;        // and under bf16: the rounded input and loss gradient, fp32 partial sums
  };

  // Calls f(offset in the layer's weights, count, offset in the slice) for each run of worker r's
  // slice of layer l's weights: rows [lo, lo + k) of conv2d and linear weights; of a transposed
  // conv's ([in, out, kh, kw]) the same k output channels of every input channel.
  template <class F>
  static void weight_runs(const LayerPlan& l, const Slice& s, int r, F&& f) {
    if (l.spec.type != LayerType::ConvTranspose2d) return f(s.lo[r] * s.fan, s.k[r] * s.fan, int64_t{0});
    const int64_t kk = l.spec.kernel_h * l.spec.kernel_w;
    for (int64_t c = 0; c < l.in[0]; ++c) f((c * s.channels + s.lo[r]) * kk, s.k[r] * kk, c * s.k[r] * kk);
  }

  // A net run as a graph: each layer's own output (in-place ReLU and flatten: none, as in a graph
  // stage), the gathered channels and the own channels of an output gradient of the widest split
  // layer, and backward's pool, in the compute dtype; under bf16 also the rounded input and loss
  // gradient and the fp32 partial input gradients (tp_plan.cpp).
  void load_graph(State& st, Device device, int64_t b) {
    const NetPlan& net = plan();
    const DType act = st.ops->bf16() ? DType::Bf16 : DType::F32;
    int64_t gathered = 0, local = 0, partial = 0;
    for (std::size_t i = 0; i < slices_.size(); ++i) {
      const LayerPlan& l = net.layers[i];
      st.acts.push_back(graph_in_place(net, 0, static_cast<int>(i)) ? Tensor() : Tensor::empty({b * numel_of(l.out)}, device, act));
      if (const Slice& s = slices_[i]; s.split) {
        gathered = std::max(gathered, ways() * b * s.piece * s.per_sample);
        local = std::max(local, b * s.piece * s.per_sample);
      }
      if (slices_[i].channels > 0 && l.inputs[0] != kNetInput) partial = std::max(partial, b * numel_of(l.in));
    }
    if (gathered > 0) st.gathered = Tensor::empty({gathered}, device, act), st.dy_local = Tensor::empty({local}, device, act);
    st.pool.clear();
    for (int64_t per_sample : back_.pool) st.pool.push_back(Tensor::empty({b * per_sample}, device, act));
    if (act == DType::Bf16) {
      const int64_t out_n = b * numel_of(net.output);
      st.x16 = Tensor::empty({b * numel_of(net.input)}, device, act);
      st.dy16 = Tensor::empty({out_n}, device, act);
      st.y32 = Tensor::empty({out_n}, device);
      if (partial > 0) st.partial = Tensor::empty({partial}, device);
    }
    st.ops->reserve({}, st.params.numel());
  }

  // A net run as a graph (tp_plan.cpp, emit_graph_step): a split layer as a chain's, the
  // parameterless ones on the whole outputs, and each output's gradient summed over its readers;
  // fp32, or bf16 values with fp32 partial sums.
  void step_graph(Worker& w, PlanExecutor::Binding bind, int64_t b) {
    const int r = tp_rank(w.rank);
    Backend& be = w.be();
    State& st = state_[w.rank];
    const NetPlan& net = plan();
    const bool bf16 = st.ops->bf16();
    const int L = static_cast<int>(slices_.size());
    // Layer v's output (kNetInput: the input, rounded under bf16), in the compute dtype.
    std::function<const Tensor*(int)> value = [&](int v) -> const Tensor* {
      if (v == kNetInput) return bf16 ? &st.x16 : &w.x;
      return st.acts[v].defined() ? &st.acts[v] : value(net.layers[v].inputs[0]);
    };
    auto f32 = [&](int v) { return value(v)->data(); };
    auto b16 = [&](int v) { return value(v)->data_bf16(); };
    const Tensor* no_grad = nullptr;
    auto gout = [&](int i) -> const Tensor& {
      if (back_.grad_of[i] >= 0) return st.pool[back_.grad_of[i]];
      return bf16 ? st.dy16 : w.dy;
    };
    auto target = [&](const GraphBackward::Write& wr) { return wr.target < 0 ? no_grad : &st.pool[wr.buf]; };
    auto piece_of = [&](const Slice& s) { return b * s.piece * s.per_sample; };
    bind.at = [&](const Action& a, int buf, bool write) -> float* {
      const PlanBuffer& pb = plan_.buffers[buf];
      if (pb.role == BufferRole::Gathered) return st.gathered.data() + (write ? 0 : r * piece_of(slices_.at(a.layer_begin)));
      if (pb.role == BufferRole::Grads) return st.grads.data();
      if (pb.role == BufferRole::Scratch && pb.index == kTpPartial) return st.partial.data();
      PB_CHECK(pb.role == BufferRole::InputGrad && pb.index >= 0 && pb.index < static_cast<int>(st.pool.size()),
               "{}: worker {} has no buffer {}", name(), w.rank, buffer_label(pb));
      return st.pool[pb.index].data();
    };
    bind.at16 = [&](const Action& a, int buf, bool write) -> Bf16* {
      PB_CHECK(plan_.buffers[buf].role == BufferRole::Gathered, "{}: worker {} keeps no {} in bf16", name(), w.rank,
               buffer_label(plan_.buffers[buf]));
      return st.gathered.data_bf16() + (write ? 0 : r * piece_of(slices_.at(a.layer_begin)));
    };
    // A parameterless layer's input gradients, made (or passed on) and summed in, in the compute
    // dtype T (float or Bf16), as a graph stage's backward makes them.
    auto parameterless_backward = [&](int i, auto* type) {
      const LayerPlan& l = net.layers[i];
      const int x = l.inputs[0];
      using T = std::remove_pointer_t<decltype(type)>;
      constexpr bool half = std::is_same_v<T, Bf16>;
      auto at = [](const Tensor& t) -> T* {
        if constexpr (half) return t.data_bf16();
        else return t.data();
      };
      const T *y = at(*value(i)), *xin = at(*value(x)), *g = at(gout(i));
      model_detail::input_gradients<T>(
          net, l, back_.writes[i], b, g, [&](const GraphBackward::Write& wr) { return target(wr) ? at(*target(wr)) : nullptr; },
          [&](int k) { return at(st.pool.at(k)); },
          [&](T* to, const T* from, int64_t n) { be.copy(be.device(), to, be.device(), from, static_cast<std::size_t>(n) * sizeof(T)); },
          [&](int64_t n, T* to, const T* from) {
            if constexpr (half) be.add_bf16(n, to, from, to);
            else be.add(n, to, from, to);
          },
          [&](std::size_t k, T* into, int64_t n, int64_t o) {
            model_detail::parameterless_backward_data(be, l, b, k, y, xin, g, into, n, o);
          });
    };
    std::optional<Tracer::Scope> fwd_span, bwd_span;
    const bool each = w.tracer.detail();  // a traced step: a span per computation (project --validate)
    int copies = 0;
    bool backward = false;
    bind.compute = [&](const Action& a) {
      const int i = a.layer_begin;
      if (a.kind == ActionKind::Optimizer) return w.adam->step(st.params, st.grads);
      if (a.kind == ActionKind::Loss) {
        fwd_span.reset();
        auto loss_span = w.tracer.compute(Phase::Loss, 0, [] { return std::string("mse loss"); });
        const int64_t n = b * numel_of(net.output);
        if (bf16) be.from_bf16(n, b16(L - 1), st.y32.data());  // the loss in fp32
        be.mse_loss_grad(n, bf16 ? st.y32.data() : f32(L - 1), w.t.data(), grad_scale(), w.dy.data(), w.loss.data());
        if (bf16) be.to_bf16(n, w.dy.data(), st.dy16.data_bf16());  // autocast's cast of it back to bf16
        backward = true;
        return;
      }
      PB_CHECK(i >= 0, "{}: worker {} cannot run {}", name(), w.rank, describe(plan_, w.rank, a.id));
      if (!each && !backward && !fwd_span) fwd_span.emplace(w.tracer.compute(Phase::Forward, 0, [] { return std::string("forward"); }));
      if (!each && backward && !bwd_span) bwd_span.emplace(w.tracer.compute(Phase::Backward, 0, [] { return std::string("backward"); }));
      std::optional<Tracer::Scope> own;
      if (each)
        own.emplace(w.tracer.compute(backward ? Phase::Backward : Phase::Forward, 0,
                                     [&] { return fmt::format("{} layer {}", action_kind_name(a.kind), i); }));
      const LayerPlan& l = net.layers[i];
      const Slice& s = slices_[i];
      const int x = l.inputs[0];
      auto traced = [&](LayerPass pass) {
        if (!own) return;
        const double part = s.channels > 0 ? static_cast<double>(s.k[r]) / static_cast<double>(s.channels) : 1;
        const int bytes = bf16 ? 2 : 4;
        const LayerWork wk = layer_work(l, b, pass, bytes, bytes, part);
        w.tracer.add_work(wk.flops, wk.bytes);
      };
      float* wt = st.params.data() + s.at[r];
      float* gw = st.grads.data() + s.at[r];
      const Tensor& dyk = s.split ? st.dy_local : gout(i);
      switch (a.kind) {
        case ActionKind::Forward: {
          copies = 0;
          if (i == 0) {
            st.ops->begin_step(st.params.data(), st.params.numel());
            if (bf16) be.to_bf16(w.x.numel(), w.x.data(), st.x16.data_bf16());  // rounded once, as a stage's input
          }
          const int64_t at = s.split ? r * piece_of(s) : 0;
          if (s.channels > 0 && bf16) {
            Bf16* mine = (s.split ? st.gathered.data_bf16() : st.acts[i].data_bf16()) + at;
            st.ops->forward(l, b, s.k[r], {nullptr, b16(x)}, wt, wt + s.k[r] * s.fan, {nullptr, mine});
          } else if (s.channels > 0) {
            float* mine = (s.split ? st.gathered.data() : st.acts[i].data()) + at;
            st.ops->forward(l, b, s.k[r], {f32(x), nullptr}, wt, wt + s.k[r] * s.fan, {mine, nullptr});
          } else if (bf16) {
            model_detail::parameterless_forward(be, net, l, b, [&](std::size_t k) { return b16(l.inputs[k]); },
                                                     const_cast<Bf16*>(b16(i)));
          } else {
            model_detail::parameterless_forward(be, net, l, b, [&](std::size_t k) { return f32(l.inputs[k]); }, f32(i));
          }
          traced(LayerPass::Forward);
          break;
        }
        case ActionKind::Copy:
          if (!backward) {  // piece q of [worker][sample][its channels] into [sample][channel]
            const int q = copies++;
            const int64_t to = s.lo[q] * s.per_sample, from = q * piece_of(s), width = s.k[q] * s.per_sample;
            if (bf16) be.copy_2d_bf16(st.acts[i].data_bf16() + to, s.channels * s.per_sample, st.gathered.data_bf16() + from, width, width, b);
            else be.copy_2d(st.acts[i].data() + to, s.channels * s.per_sample, st.gathered.data() + from, width, width, b);
          } else if (plan_.buffers.at(a.writes.at(0)).role == BufferRole::LocalOutputGrad) {  // its channels of dy
            const int64_t from = s.lo[r] * s.per_sample, pitch = s.channels * s.per_sample, width = s.k[r] * s.per_sample;
            if (bf16) be.copy_2d_bf16(st.dy_local.data_bf16(), width, gout(i).data_bf16() + from, pitch, width, b);
            else be.copy_2d(st.dy_local.data(), width, gout(i).data() + from, pitch, width, b);
          } else {  // the input gradient: the all-reduced partials rounded (bf16), added to its other readers' sum
            finish_input_grad(be, st, l, back_.writes[i][0], b, bf16);
          }
          break;
        case ActionKind::BackwardWeights:
          if (bf16) st.ops->backward_weights16(l, b, s.k[r], b16(x), dyk.data_bf16(), gw, gw + s.k[r] * s.fan);
          else st.ops->backward_weights(l, b, s.k[r], {f32(x), nullptr}, dyk.data(), gw, gw + s.k[r] * s.fan);
          traced(LayerPass::BackwardWeights);
          break;
        case ActionKind::BackwardData: {
          if (s.channels > 0) {
            const GraphBackward::Write& wr = back_.writes[i][0];
            if (const Tensor* to = target(wr)) {
              const Tensor& into = wr.first ? *to : st.pool[wr.tmp];
              if (bf16) st.ops->backward_data_unrounded(l, b, s.k[r], dyk.data_bf16(), wt, st.partial.data());
              else st.ops->backward_data(l, b, s.k[r], dyk.data(), wt, into.data(), s.split);
            }
          } else if (bf16) {
            parameterless_backward(i, static_cast<Bf16*>(nullptr));
          } else {
            parameterless_backward(i, static_cast<float*>(nullptr));
          }
          traced(LayerPass::BackwardData);
          if (i == 0) bwd_span.reset();
          break;
        }
        default: PB_CHECK(false, "{}: worker {} cannot run {}", name(), w.rank, describe(plan_, w.rank, a.id));
      }
    };
    PlanExecutor(plan_, w.rank, std::move(bind)).run();
    w.stats.samples = b;
  }

  // A weighted layer's input gradient once made: under bf16 its fp32 sum (a split layer's all-reduced
  // partials) rounded once into the target (or, where another reader wrote first, its tmp); then a
  // tmp is added to the target.
  static void finish_input_grad(Backend& be, State& st, const LayerPlan& l, const GraphBackward::Write& wr, int64_t b,
                                bool rounded) {
    const int64_t n = b * numel_of(l.in);
    Tensor& to = st.pool[wr.buf];
    if (rounded) be.to_bf16(n, st.partial.data(), (wr.first ? to : st.pool[wr.tmp]).data_bf16());
    if (wr.first) return;
    const Tensor& tmp = st.pool[wr.tmp];
    if (to.dtype() == DType::Bf16) be.add_bf16(n, to.data_bf16(), tmp.data_bf16(), to.data_bf16());
    else be.add(n, to.data(), tmp.data(), to.data());
  }

  // Whether the output of the last of these layers is a buffer of this worker's (not the input).
  static bool out_owned(const std::vector<Tensor>& acts) {
    for (const Tensor& a : acts)
      if (a.defined()) return true;
    return false;
  }
  int ways() const { return workers() / replicas_; }
  int tp_rank(int rank) const { return rank % ways(); }
  int replica_of(int rank) const { return rank / ways(); }

  int replicas_;
  std::vector<Slice> slices_;  // per layer, over the ways() workers of a replica
  bool graph_ = false;         // several workers on a net not run as a chain (rules.h, tp_chain)
  GraphBackward back_;         // then: where backward sums each output's gradient
  std::vector<State> state_;   // per worker
  std::vector<int64_t> piece_, piece_offset_;  // per replica: its samples, and where they start
  Plan plan_;                                  // the step, every worker's actions
  std::vector<std::string> group_part_;        // per plan group: its partition ("tp", "dp"; "": the world)
};

}  // namespace

std::unique_ptr<Strategy> make_tp(const StrategyOptions& o) { return std::make_unique<TensorParallel>(o, "tp", 1); }

std::string dptp_name(int dp, int tp) { return fmt::format("dp{}xtp{}", dp, tp); }

bool parse_dptp_name(const std::string& name, int* dp, int* tp) {
  int d = 0, t = 0;
  std::size_t used = 0;
  if (!parse_factor_name(name, "dp", "xtp", &d, &t, &used) || used != name.size()) return false;
  if (name != dptp_name(d, t)) return false;  // "dp02xtp2", trailing text: not a name this program writes
  *dp = d, *tp = t;
  return true;
}

std::unique_ptr<Strategy> make_dptp(const StrategyOptions& o, int dp, int tp) {
  const std::string name = dptp_name(dp, tp);
  if (o.devices != dp * tp)
    throw UsageError(fmt::format("{}: {} replicas of a {}-way tp group run on {} devices, got --devices {}", name, dp,
                                 tp, dp * tp, o.devices));
  return std::make_unique<TensorParallel>(o, name, dp);
}

}  // namespace pb
