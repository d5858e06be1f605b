// The plans of tp and dp x tp: tp.cpp's step per layer -- each slice's compute, the activation's
// all-gather and its per-piece layout copies forward; the output-gradient copy, the weight and
// data gradients and the partial sums' all-reduce backward -- from the same slices (tp_slices).
#include <functional>

#include <fmt/format.h>

#include "engine/bf16.h"
#include "engine/check.h"
#include "engine/graph_stage.h"
#include "engine/memory_estimate.h"
#include "strategies/batch.h"
#include "strategies/plan_gen.h"
#include "strategies/rules.h"

namespace pb {

namespace {

constexpr int64_t kF = sizeof(float);

// A worker's forward, loss and backward over a net tp does not run as a chain (rules.h, tp_chain):
// every layer's whole output is an Activations buffer (in-place ReLU and flatten share their
// input's, as in a graph stage), the parameterless layers computed on it by every worker; in
// backward a layer's output gradient is the sum of its readers' contributions in
// plan_graph_backward's pool over the whole net (InputGrad k: pool buffer k). A split layer's
// partial input gradient is all-reduced where it is made, then added to the sum (a Copy into that
// InputGrad, read and written) when another reader wrote it first. Under bf16 (`act`) outputs,
// gathered channels and the pool are bf16: the net's input is rounded once and the loss's gradient
// too; a weighted layer's input gradient is summed in fp32 (a split layer's partial sums,
// all-reduced) and then rounded once into the pool by that Copy (TpGraphScratch, rules.h).
void emit_graph_step(PlanBuilder& b, const NetPlan& net, const std::vector<TpSlice>& slices, int w, int r, int ways,
                     int group, int64_t bsz, int params, int grads, int dy, int64_t total, DType act) {
  using R = BufferRole;
  const int layers = static_cast<int>(net.layers.size());
  const bool bf16 = act == DType::Bf16;
  const int64_t kA = dtype_size(act);
  auto buf = [&](R role, int64_t values, int index = -1) { return b.buffer(w, role, index, values * kF); };
  auto abuf = [&](R role, int64_t values, int index = -1) { return b.buffer(w, role, index, values * kA, act); };
  const GraphBackward back = plan_graph_backward(net, 0, layers);
  const int x = buf(R::Input, bsz * numel_of(net.input));
  const int x16 = bf16 ? abuf(R::Scratch, bsz * numel_of(net.input), kTpInput16) : -1;
  std::function<int(int)> value = [&](int v) {  // the buffer holding layer v's output (kNetInput: the input)
    if (v == kNetInput) return bf16 ? x16 : x;
    if (graph_in_place(net, 0, v)) return value(net.layers[v].inputs[0]);
    return abuf(R::Activations, bsz * numel_of(net.layers[v].out), v);
  };
  int64_t widest_gather = 0, widest_local = 0, widest_partial = 0;
  for (int i = 0; i < layers; ++i)
    if (const TpSlice& s = slices[i]; s.split) {
      widest_gather = std::max(widest_gather, ways * bsz * s.piece * s.per_sample);
      widest_local = std::max(widest_local, bsz * s.piece * s.per_sample);
    }
  for (int i = 0; i < layers; ++i)  // under bf16 every weighted layer's input gradient is summed in fp32 first
    if (slices[i].channels > 0 && net.layers[i].inputs[0] != kNetInput)
      widest_partial = std::max(widest_partial, bsz * numel_of(net.layers[i].in));
  const int gathered = widest_gather > 0 ? abuf(R::Gathered, widest_gather) : -1;
  const int dy_local = widest_local > 0 ? abuf(R::LocalOutputGrad, widest_local) : -1;
  std::vector<int> pool;
  for (std::size_t k = 0; k < back.pool.size(); ++k) pool.push_back(abuf(R::InputGrad, bsz * back.pool[k], static_cast<int>(k)));
  const int64_t out_n = bsz * numel_of(net.output);
  const int dy16 = bf16 ? abuf(R::Scratch, out_n, kTpLossGrad16) : dy;
  const int partial = bf16 && widest_partial > 0 ? buf(R::Scratch, widest_partial, kTpPartial) : -1;
  if (bf16) b.buffer(w, R::ParamCopy, -1, total * kA, DType::Bf16);  // the slices' bf16 copy
  for (int i = 0; i < layers; ++i) {
    const LayerPlan& l = net.layers[i];
    const TpSlice& s = slices[i];
    const int y = value(i);
    std::vector<int> ins;
    for (int v : l.inputs) ins.push_back(value(v));
    if (i == 0 && bf16) ins.insert(ins.begin(), x);  // rounded into x16 first
    Action* f = nullptr;
    if (s.channels == 0) {  // parameterless: on the whole inputs, on every worker (flatten: a view, no work)
      f = &b.compute(w, ActionKind::Forward, i, i + 1, 0, ins, {});
      if (l.spec.type != LayerType::Flatten) f->writes.push_back(y), f->bytes = bsz * numel_of(l.out) * kA;
    } else {
      ins.push_back(params);
      f = &b.compute(w, ActionKind::Forward, i, i + 1, 0, ins, {s.split ? gathered : y});
      f->bytes = bsz * s.k[r] * s.per_sample * kA, f->part = static_cast<double>(s.k[r]) / static_cast<double>(s.channels);
    }
    if (i == 0 && bf16) f->writes.push_back(x16);
    if (!s.split) continue;
    const int64_t piece = bsz * s.piece * s.per_sample;
    Action& ag = on_wire(b.collective(w, CollKind::AllGather, group, piece, ways * piece * kF, false), act);
    ag.reads.push_back(gathered), ag.writes.push_back(gathered);
    ag.layer_begin = i, ag.layer_end = i + 1;
    for (int q = 0; q < ways; ++q) b.compute(w, ActionKind::Copy, i, i + 1, 0, {gathered}, {y}).bytes = bsz * s.k[q] * s.per_sample * kA;
  }
  {
    Action& loss = b.compute(w, ActionKind::Loss, -1, -1, 0, {value(layers - 1), buf(R::Target, out_n)}, {dy, buf(R::Loss, 1)});
    loss.bytes = out_n * kF;
    if (bf16) loss.writes.push_back(buf(R::Output, out_n)), loss.writes.push_back(dy16);  // widened for it; its gradient rounded
  }
  for (int i = layers - 1; i >= 0; --i) {
    const LayerPlan& l = net.layers[i];
    const TpSlice& s = slices[i];
    PB_CHECK((back.grad_of[i] < 0) == (i == layers - 1), "tp: layer {} of {} is read by no later layer", i, layers);
    const int gout = back.grad_of[i] < 0 ? dy16 : pool[back.grad_of[i]];
    const std::vector<GraphBackward::Write>& writes = back.writes[i];
    auto target = [&](const GraphBackward::Write& wr) { return wr.target < 0 ? -1 : pool[wr.buf]; };
    if (s.channels == 0) {  // every input's gradient made (or passed on) and summed in, in one call
      Action& a = b.compute(w, ActionKind::BackwardData, i, i + 1, 0, {gout}, {});
      for (int v : l.inputs) a.reads.push_back(value(v));
      if (l.spec.type == LayerType::ReLU) a.reads.push_back(value(i));
      for (const GraphBackward::Write& wr : writes)
        if (const int t = target(wr); t >= 0) {
          a.writes.push_back(t);
          if (!wr.first) a.reads.push_back(t);
          if (wr.tmp >= 0) a.writes.push_back(pool[wr.tmp]);
        }
      a.bytes = bsz * numel_of(l.out) * kA;
      continue;
    }
    int dyk = gout;
    if (s.split) {
      b.compute(w, ActionKind::Copy, i, i + 1, 0, {gout}, {dy_local}).bytes = bsz * s.k[r] * s.per_sample * kA;
      dyk = dy_local;
    }
    const double part = static_cast<double>(s.k[r]) / static_cast<double>(s.channels);
    b.compute(w, ActionKind::BackwardWeights, i, i + 1, 0, {value(l.inputs[0]), dyk}, {grads}).part = part;
    const GraphBackward::Write& wr = writes.at(0);
    const int to = target(wr), into = to < 0 ? -1 : wr.first ? to : pool[wr.tmp];
    // Where the input gradient is made: under bf16 in fp32 (a split layer's partial sums), rounded by
    // the Copy after -- a whole layer too, as the memory estimate's probe of tp's calls makes it.
    const int made = into < 0 ? -1 : bf16 ? partial : into;
    b.compute(w, ActionKind::BackwardData, i, i + 1, 0, {dyk, params}, made >= 0 ? std::vector<int>{made} : std::vector<int>{})
        .part = part;
    if (made < 0) continue;
    if (s.split) {  // the partial sums over the channel slices
      Action& ar = b.collective(w, CollKind::AllReduce, group, bsz * numel_of(l.in), bsz * numel_of(l.in) * kF, false);
      ar.reads.push_back(made), ar.writes.push_back(made);
    }
    if (made == into && wr.first) continue;
    Action& add = b.compute(w, ActionKind::Copy, i, i + 1, 0, {made}, {});  // rounded, and/or added in
    if (made != into) add.writes.push_back(into);
    if (!wr.first) add.reads.push_back(to), add.writes.push_back(to);
    add.bytes = bsz * numel_of(l.in) * kA;
  }
}

}  // namespace

Plan plan_tp(const NetPlan& net, const StrategyOptions& o, int64_t batch, const std::string& name, int replicas) {
  PB_CHECK(replicas >= 1 && o.devices % replicas == 0, "{}: {} replicas over {} workers", name, replicas, o.devices);
  const int workers = o.devices, ways = workers / replicas;
  const std::vector<TpSlice> slices = tp_slices(net, ways, name);
  const std::vector<int64_t> pieces = replica_pieces(batch, replicas, name);
  const int layers = static_cast<int>(net.layers.size());
  // The layers' outputs and their gathered pieces are kept in the compute dtype (bf16 under autocast,
  // as a Sequential keeps its activations); gradients stay fp32 (tp_ops.h).
  const DType act_dtype = o.backend.precision == Precision::Bf16 ? DType::Bf16 : DType::F32;
  const bool graph = workers > 1 && !tp_chain(net);
  const int64_t kA = dtype_size(act_dtype);
  PlanBuilder b(name, workers, batch, 1);
  std::vector<int> all(workers), tp_group(replicas), dp_group(ways, -1);
  for (int r = 0; r < workers; ++r) all[r] = r;
  const int world = b.group("world", all);
  for (int d = 0; d < replicas; ++d) {
    std::vector<int> members;
    for (int t = 0; t < ways; ++t) members.push_back(d * ways + t);
    tp_group[d] = replicas == 1 ? world : b.group(fmt::format("tp {}", d), members);
  }
  if (replicas > 1)
    for (int t = 0; t < ways; ++t) {
      std::vector<int> members;
      for (int d = 0; d < replicas; ++d) members.push_back(d * ways + t);
      dp_group[t] = b.group(fmt::format("dp {}", t), members);
    }
  // Which layers write an output of their own: Flatten is a view of its input, and a ReLU runs in
  // place on its producer's output (never on the net's input), as in tp.cpp's load_worker.
  std::vector<char> owned(layers, 0);
  bool any_owned = false;
  for (int i = 0; i < layers; ++i) {
    const LayerType t = net.layers[i].spec.type;
    owned[i] = !(t == LayerType::Flatten || (t == LayerType::ReLU && any_owned));
    any_owned = any_owned || owned[i];
  }
  for (int w = 0; w < workers; ++w) {
    const int r = w % ways, d = w / ways, c = tp_group[d];
    const int64_t bsz = pieces[d];
    b.plan().replica[w] = w;
    b.at(w, bsz);
    using R = BufferRole;
    auto buf = [&](R role, int64_t values, int index = -1) { return b.buffer(w, role, index, values * kF); };
    auto act = [&](R role, int64_t values, int index = -1) { return b.buffer(w, role, index, values * kA, act_dtype); };
    int64_t total = 0;
    for (const TpSlice& s : slices)
      if (s.channels > 0) total += s.k[r] * (s.fan + 1);
    const int params = buf(R::Params, total), grads = buf(R::Grads, total);
    const int64_t out_n = numel_of(net.output);
    const int dy = buf(R::OutputGrad, bsz * out_n);
    auto optimizer = [&] {
      b.compute(w, ActionKind::Optimizer, -1, -1, -1, {grads}, {params, buf(R::AdamState, 2 * total)}).bytes = total * kF;
    };
    auto tail = [&] {  // dp x tp: the slices' gradients summed over the replicas; then Adam
      if (replicas > 1) {
        Action& ar = on_wire(b.collective(w, CollKind::AllReduce, dp_group[r], total, total * kF, false), o.reduce_dtype);
        ar.reads.push_back(grads), ar.writes.push_back(grads);
      }
      optimizer();
    };
    if (workers == 1) {  // one worker: regular's step, the whole net as one Sequential
      const SequentialBuffers sb = sequential_buffers(net, 0, layers, bsz, act_dtype == DType::Bf16);
      if (sb.scratch > 0) b.buffer(w, R::Scratch, -1, sb.scratch);
      if (sb.param_copy > 0) b.buffer(w, R::ParamCopy, -1, sb.param_copy, DType::Bf16);
      const int x = buf(R::Input, bsz * numel_of(net.input)), acts = b.buffer(w, R::Activations, -1, sb.activations);
      b.compute(w, ActionKind::Forward, 0, layers, 0, {x, params}, {acts});
      b.compute(w, ActionKind::Loss, -1, -1, 0, {acts, buf(R::Target, bsz * out_n)}, {dy, buf(R::Loss, 1)});
      b.compute(w, ActionKind::BackwardWeights, 0, layers, 0, {dy, acts}, {grads});
      b.compute(w, ActionKind::BackwardData, 0, layers, 0, {dy, acts, params}, {});
      optimizer();
      continue;
    }
    if (graph) {
      if (replicas > 1) gradient_staging(b, w, o, total);
      emit_graph_step(b, net, slices, w, r, ways, c, bsz, params, grads, dy, total, act_dtype);
      tail();
      continue;
    }
    auto out_of = [&](int i) {  // a layer's whole output (Flatten, in-place ReLU: their input's)
      while (i >= 0 && !owned[i]) --i;
      return i < 0 ? buf(R::Input, bsz * numel_of(net.input)) : act(R::Activations, bsz * numel_of(net.layers[i].out), i);
    };
    // Made once: the gathered pieces of the widest split layer (compute dtype) and its own channels
    // of the output gradient, two input gradients of the widest input used in turn; bf16: the
    // weights' bf16 copy, the output widened for the loss, and the rounded input and output-gradient
    // scratch of the widest layer (tp_ops.h); --reduce-dtype bf16 over replicas: the gradients' staging.
    int64_t widest_gather = 0, widest_local = 0, widest_in = 0, in16 = 0, out16 = 0;
    for (int i = 0; i < layers; ++i) {
      const TpSlice& s = slices[i];
      widest_in = std::max(widest_in, bsz * numel_of(net.layers[i].in));
      if (s.channels == 0) continue;
      in16 = std::max(in16, bsz * numel_of(net.layers[i].in)), out16 = std::max(out16, bsz * s.k[r] * s.per_sample);
      if (!s.split) continue;
      widest_gather = std::max(widest_gather, ways * bsz * s.piece * s.per_sample);
      widest_local = std::max(widest_local, bsz * s.piece * s.per_sample);
    }
    const int gathered = act(R::Gathered, widest_gather), dy_local = buf(R::LocalOutputGrad, widest_local);
    for (int k = 0; k < 2; ++k) buf(R::InputGrad, widest_in, k);
    if (act_dtype == DType::Bf16) {
      b.buffer(w, R::ParamCopy, -1, total * kA, DType::Bf16);
      buf(R::Output, bsz * out_n);
      b.buffer(w, R::Scratch, -1, (in16 + out16) * kA, DType::Bf16);
    }
    if (replicas > 1) gradient_staging(b, w, o, total);
    for (int i = 0; i < layers; ++i) {
      const LayerPlan& l = net.layers[i];
      const TpSlice& s = slices[i];
      const int x = out_of(i - 1), y = out_of(i);
      if (s.channels == 0) {  // ReLU (in place or not) or Flatten (a view: no work)
        Action& a = b.compute(w, ActionKind::Forward, i, i + 1, 0, {x}, {});
        if (l.spec.type == LayerType::ReLU) a.writes.push_back(y), a.bytes = bsz * numel_of(l.out) * kA;
        continue;
      }
      const int64_t piece = bsz * s.piece * s.per_sample;
      const double part = static_cast<double>(s.k[r]) / static_cast<double>(s.channels);  // its slice's share
      Action& f = b.compute(w, ActionKind::Forward, i, i + 1, 0, {x, params}, {s.split ? gathered : y});
      f.bytes = bsz * s.k[r] * s.per_sample * kA, f.part = part;
      if (!s.split) continue;
      Action& ag = on_wire(b.collective(w, CollKind::AllGather, c, piece, ways * piece * kF, false), act_dtype);
      ag.reads.push_back(gathered), ag.writes.push_back(gathered);  // its own piece, then the whole
      ag.layer_begin = i, ag.layer_end = i + 1;  // whose slice: where the executor finds the piece
      for (int q = 0; q < ways; ++q)  // [worker][sample][its channels] -> [sample][channel]
        b.compute(w, ActionKind::Copy, i, i + 1, 0, {gathered}, {y}).bytes = bsz * s.k[q] * s.per_sample * kA;
    }
    b.compute(w, ActionKind::Loss, -1, -1, 0, {out_of(layers - 1), buf(R::Target, bsz * out_n)}, {dy, buf(R::Loss, 1)}).bytes =
        bsz * out_n * kF;
    int gout = dy, next = 0;
    for (int i = layers - 1; i >= 0; --i) {
      const LayerPlan& l = net.layers[i];
      const TpSlice& s = slices[i];
      if (l.spec.type == LayerType::Flatten) {  // same layout: the gradient passes through
        b.compute(w, ActionKind::BackwardData, i, i + 1, 0, {}, {});
        continue;
      }
      if (l.spec.type == LayerType::ReLU) {
        Action& a = b.compute(w, ActionKind::BackwardData, i, i + 1, 0, {}, {});
        if (i > 0) a.reads = {out_of(i), gout}, a.writes = {gout}, a.bytes = bsz * numel_of(l.out) * kF;
        continue;
      }
      const int x = out_of(i - 1);
      int dyk = gout;
      if (s.split) {  // this worker's channels of the output gradient
        b.compute(w, ActionKind::Copy, i, i + 1, 0, {gout}, {dy_local}).bytes = bsz * s.k[r] * s.per_sample * kF;
        dyk = dy_local;
      }
      const int dx = i > 0 ? buf(R::InputGrad, 0, next) : -1;
      const double part = static_cast<double>(s.k[r]) / static_cast<double>(s.channels);
      b.compute(w, ActionKind::BackwardWeights, i, i + 1, 0, {x, dyk}, {grads}).part = part;
      b.compute(w, ActionKind::BackwardData, i, i + 1, 0, {dyk, params}, dx >= 0 ? std::vector<int>{dx} : std::vector<int>{})
          .part = part;
      if (dx < 0) continue;
      if (s.split) {  // the partial sums over the channel slices
        Action& ar = b.collective(w, CollKind::AllReduce, c, bsz * numel_of(l.in), bsz * numel_of(l.in) * kF, false);
        ar.reads.push_back(dx), ar.writes.push_back(dx);
      }
      gout = dx;
      next = 1 - next;
    }
    tail();
  }
  return b.take();
}

}  // namespace pb
