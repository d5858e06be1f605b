// The per-configuration memory estimate (strategies/memory_estimate.h): what the strategies
// allocate, in the layout their registry lines give.
#include "strategies/memory_estimate.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "engine/check.h"
#include "engine/tensor.h"
#include "strategies/plan_gen.h"
#include "strategies/rules.h"
#include "strategies/sweep.h"

namespace pb {

namespace {
double numel_d(const Shape& s) { return static_cast<double>(numel_of(s)); }
}  // namespace

namespace {

// What the strategies allocate, in floats, mirrored from strategies/*.cpp: a Sequential over
// layers [b, e) and its buffers for a batch of n, and torch.chunk's split.
struct Layers {
  const NetPlan& plan;
  const std::function<double(const std::vector<LayerPlan>&, int64_t)>& measured;  // may be empty
  const std::function<double(const std::vector<LayerPlan>&, int64_t)>& measured_seq;  // may be empty
  bool bf16 = false;
  double params(int b, int e) const {
    double n = 0;
    for (int i = b; i < e; ++i) n += static_cast<double>(plan.layers[i].weight_numel + plan.layers[i].bias_numel);
    return n;
  }
  double in(int i) const { return numel_d(plan.layers[i].in); }
  double out(int i) const { return numel_d(plan.layers[i].out); }
  // Every layer's output, except in-place ReLUs after a layer of the stage and flatten views.
  double acts(int b, int e, double n) const {
    double keep = 0;
    bool owned = false;
    for (int i = b; i < e; ++i) {
      const LayerType t = plan.layers[i].spec.type;
      const bool alias = t == LayerType::Flatten || (t == LayerType::ReLU && owned);
      if (!alias) keep += out(i);
      owned = owned || !alias;
    }
    return keep * n;
  }
  // Backward's two input-gradient scratch buffers of the stage's largest input.
  double grad_scratch(int b, int e, double n) const {
    double m = 0;
    for (int i = b; i < e; ++i) m = std::max(m, in(i));
    return 2 * m * n;
  }
  // What a Sequential over [b, e) keeps per slot for a batch of n (model.cpp, model_bf16.cpp).
  // bf16 (in floats; a bf16 value is half of one): every layer's output but the ReLUs (in place)
  // and flatten views, its input rounded to bf16 and its output widened to fp32.
  double seq_acts(int b, int e, double n) const {
    if (!bf16) return acts(b, e, n);
    double keep = 0;
    for (int i = b; i < e; ++i) {
      const LayerType t = plan.layers[i].spec.type;
      if (t != LayerType::Flatten && t != LayerType::ReLU) keep += out(i);
    }
    return 0.5 * (keep + in(b)) * n + out(e - 1) * n;
  }
  // Its two input-gradient scratch buffers: bf16 ones also hold the output's gradient.
  double seq_scratch(int b, int e, double n) const {
    if (!bf16) return grad_scratch(b, e, n);
    double m = out(e - 1);
    for (int i = b; i < e; ++i) m = std::max(m, in(i));
    return m * n;
  }
  // Its parameters: bf16 adds their bf16 copy, made at its first forward.
  double seq_params(int b, int e) const { return (bf16 ? 1.5 : 1.0) * params(b, e); }
  // Library scratch (bytes) of a backend that runs `layers` at a batch of n.
  double workspace(const std::vector<LayerPlan>& layers, double n) const {
    if (n <= 0) return 0;
    if (measured) return measured(layers, static_cast<int64_t>(n));
    double w = 0;  // im2col unfolds one sample at a time, into one buffer for every layer
    for (const LayerPlan& l : layers)
      if (l.spec.type == LayerType::Conv2d)
        w = std::max(w, static_cast<double>(l.in[0]) * l.spec.kernel_h * l.spec.kernel_w * numel_d(l.out) /
                            static_cast<double>(l.out[0]) * sizeof(float));
    return w;
  }
  double workspace(int b, int e, double n) const {
    return workspace(std::vector<LayerPlan>(plan.layers.begin() + b, plan.layers.begin() + e), n);
  }
  // Layers [b, e) run as one Sequential.
  double sequential_workspace(int b, int e, double n) const {
    if (n <= 0 || !measured_seq) return workspace(b, e, n);
    return measured_seq(std::vector<LayerPlan>(plan.layers.begin() + b, plan.layers.begin() + e), static_cast<int64_t>(n));
  }
};

// Under bf16 a pipeline's activations and gradients travel in bf16 through the communicator's
// staging, sized before the step from the plan (strategies/pipeline.cpp): per worker, in floats.
std::vector<double> p2p_staging(const NetPlan& net, int64_t batch, const std::vector<std::pair<int, int>>& ranges,
                                const std::vector<std::vector<int64_t>>& micro_sizes, Schedule schedule, bool recompute,
                                int virtual_stages, const std::string& name) {
  StrategyOptions o;
  o.backend.precision = Precision::Bf16;
  o.schedule = schedule, o.recompute = recompute, o.virtual_stages = virtual_stages;
  const Plan p = plan_stage_steps(net, o, batch, name, ranges, micro_sizes);
  std::vector<double> out;
  for (int w = 0; w < p.workers; ++w) {
    double values = 0;
    for (int64_t n : transfer_staging(p, w)) values += static_cast<double>(n);
    out.push_back(0.5 * values);
  }
  return out;
}

std::vector<int64_t> chunks(int64_t batch, int n) {  // torch.chunk: ceil(B / N) each, the last shorter
  std::vector<int64_t> out;
  const int64_t c = (batch + n - 1) / n;
  for (int64_t at = 0; at < batch; at += c) out.push_back(std::min(c, batch - at));
  return out;
}

// One worker's buffers, in floats except workspace (bytes); state: gradients and Adam's moments.
struct Worker {
  double params = 0, state = 0, acts = 0, workspace = 0;
  double bytes() const { return (params + state + acts) * sizeof(float) + workspace; }
};

}  // namespace

MemoryEstimate estimate_memory(const NetPlan& plan, int64_t global_batch, const MemoryConfig& c) {
  MemoryEstimate out = estimate_memory(plan, global_batch);
  const int N = std::max(1, c.devices), L = static_cast<int>(plan.layers.size());
  const Layers ly{plan, c.workspace, c.sequential_workspace, c.bf16};
  const double in = numel_d(plan.input), outn = numel_d(plan.output), P = ly.params(0, L);
  std::vector<Worker> w(N);
  // The strategy's layout (its registry line), and a family member's shape: D groups of S workers.
  const MemoryModel& model = memory_model_of(c.strategy);
  const std::string& s = c.strategy;
  const ProjectionFacts& facts = *projection_facts_of(s);
  const auto spec = parse_strategy(s);
  const bool member = spec && spec->member(), staged = spec && spec->member_of(kHybridFamily);
  const int D = member ? spec->first : 1, S = member ? spec->second : N;
  // What a variant's name stands for, or a dp x pp member's suffix.
  const Schedule schedule = staged ? spec->schedule : facts.projected.schedule;
  const bool recompute = staged ? spec->recompute : facts.projected.recompute;
  MemoryModel::Layout layout = model.layout;
  const bool sharded = layout == MemoryModel::Layout::Shards, prefetch = s == "fsdp-prefetch";
  // A sharded strategy's bf16 staging, in floats (largest: the largest unit, padded to W shards):
  // a reduce-scatter's send (a unit) and receive (a shard) slots, a gather's the other way round;
  // blocking calls share the slots, fsdp-prefetch's gather holds its own while a reduce-scatter
  // runs. hsdp: the all-reduce over the groups is another communicator's, with a slot of its own.
  // Over several shards a bf16 gather writes the whole parameters in bf16 itself: its send slot only.
  auto shard_staging = [&](double largest, double W) {
    const bool direct = W > 1;
    const double g = c.param_bf16 ? 0.5 * (largest / W + (direct ? 0 : largest)) : 0,
                 r = c.reduce_bf16 ? 0.5 * (largest + largest / W) : 0;
    const double shared = g > 0 && r > 0 && !direct ? 0.5 * (largest - largest / W) : 0;
    return (prefetch ? g + r : std::max(g, r) + shared) + (c.reduce_bf16 && D > 1 ? 0.5 * largest / W : 0);
  };
  // A sharded strategy over groups of one, or a sliced one on one worker, runs the whole net as
  // one Sequential on every worker: the replicas' buffers.
  if ((layout == MemoryModel::Layout::Shards && S == 1) || (layout == MemoryModel::Layout::Slices && N == 1))
    layout = MemoryModel::Layout::Replicas;
  if (layout == MemoryModel::Layout::Replicas) {
    const std::vector<int64_t> ch = chunks(global_batch, facts.single_device ? 1 : N);
    for (int i = 0; i < N; ++i) {
      const double n = i < static_cast<int>(ch.size()) ? static_cast<double>(ch[i]) : 0;
      const bool root = !model.root || i == 0;  // the state, the batch and its output on device 0
      w[i].params = P;
      w[i].state = root ? 3 * P : P;  // gradients, and on a worker that steps Adam's moments
      if (sharded) w[i].state += shard_staging(P, 1);  // in groups of one: the net is one unit (rules.cpp)
      if (n == 0) continue;  // a worker without a chunk holds its replica alone
      // dp, ddp: the bf16 copy of every gradient (ddp's buckets are all in flight at once).
      if (!sharded && !facts.single_device && c.reduce_bf16) w[i].state += 0.5 * P;
      w[i].params = ly.seq_params(0, L);
      const double b = model.root && i == 0 ? static_cast<double>(global_batch) : n;
      w[i].acts = b * in + (model.root ? (i == 0 ? 3 : 1) : 2) * b * outn + (root ? 1 : 0) + ly.seq_acts(0, L, n) +
                  ly.seq_scratch(0, L, n);
      w[i].workspace = ly.sequential_workspace(0, L, n);
    }
  } else if (layout == MemoryModel::Layout::Stages) {
    PB_CHECK(D * S == N, "memory estimate: {} on {} devices", s, N);
    const bool one_f_one_b = schedule == Schedule::OneFOneB || schedule == Schedule::Interleaved;  // its one stage
    const bool zb = schedule == Schedule::ZeroBubble;  // ZB-H1: P slots; stage k > 0 keeps up to k + 1 B's output gradients for W
    // Interleaved 1F1B: worker k holds stages k, S + k, ... (V chunks), each its own buffers; one
    // backward scratch serves them all, and the backend's workspace what the chunks' layers need
    // run apart (several Sequentials on one backend: measured as the layers alone).
    const int V = schedule == Schedule::Interleaved && S > 1 ? std::max(1, c.virtual_stages) : 1;  // pipeline_chunks
    std::vector<std::pair<int, int>> st = c.stages;
    if (st.empty())
      for (int k = 0; k < V * S; ++k) st.push_back({k * L / (V * S), (k + 1) * L / (V * S)});
    PB_CHECK(static_cast<int>(st.size()) == V * S, "memory estimate: {} stages for {}", st.size(), s);
    const std::vector<int64_t> pieces = chunks(global_batch, D);
    std::vector<std::vector<int64_t>> micro_sizes;
    for (int64_t piece : pieces) micro_sizes.push_back(chunks(piece, model.one_micro ? 1 : c.micro_batches));
    const bool staged = c.bf16 && c.bf16_activation_wire && S > 1 && static_cast<int>(pieces.size()) == D;
    const std::vector<double> staging =
        staged ? p2p_staging(plan, global_batch, st, micro_sizes, schedule, recompute, V, s) : std::vector<double>(N, 0.0);
    for (int d = 0; d < D && d < static_cast<int>(pieces.size()); ++d) {
      const std::vector<int64_t>& mb = micro_sizes[d];
      const int M = static_cast<int>(mb.size());
      const double most = static_cast<double>(mb[0]), piece = static_cast<double>(pieces[d]);
      for (int k = 0; k < S; ++k) {
        Worker& x = w[d * S + k];
        const std::vector<PipeOp> ops = V > 1 ? interleaved_ops(S, V, k, M, s) : std::vector<PipeOp>{};
        double scratch = 0, workspace = 0;
        std::vector<LayerPlan> mine;  // every chunk's layers
        for (int chunk = 0; chunk < V; ++chunk) {
          const int g = chunk * S + k;  // the chunk's stage
          const auto [b, e] = st[g];
          const double sp = ly.params(b, e), sin = ly.in(b), sout = ly.out(e - 1);
          const int in_flight = V > 1 ? interleaved_slots(ops, chunk)
                                      : zb ? std::min(M, S) : one_f_one_b ? std::min(M, S - k) : M;
          double kept = 0;  // per sample: the weighted layers' outputs (model.cpp backward_data)
          for (int i = b; i < e && zb && k > 0 && M > 1; ++i)
            if (ly.params(i, i + 1) > 0) kept += (c.bf16 ? 0.5 : 1) * ly.out(i) * static_cast<double>(std::min(M, k + 1));
          // Micro-batch j runs in activation slot j % slots, each slot as large as the largest it
          // serves; torch.chunk's sizes do not grow, so slot j's is micro-batch j's (pipeline.cpp).
          const int slots = recompute ? 1 : in_flight;
          double slot_samples = 0;
          for (int j = 0; j < slots; ++j) slot_samples += static_cast<double>(mb[j]);
          // GPipe's first backward is the last micro-batch: a shorter one sizes the input-gradient
          // scratch, which the next backward outgrows, both alive for a moment.
          const double last = static_cast<double>(mb[M - 1]);
          const double regrow = V == 1 && !one_f_one_b && !zb && last < most ? ly.seq_scratch(b, e, last) / 2 : 0;
          x.params += ly.seq_params(b, e), x.state += 3 * sp + (c.reduce_bf16 && D > 1 ? 0.5 * sp : 0);
          x.acts += (g == 0 ? piece * sin : in_flight * most * sin + 2 * most * sin) + most * sout +
                    (g == V * S - 1 ? piece * sout + M : 0) + ly.seq_acts(b, e, slot_samples) + regrow + kept * most;
          scratch = std::max(scratch, ly.seq_scratch(b, e, most));
          workspace = std::max(workspace, ly.sequential_workspace(b, e, most));
          for (int i = b; i < e; ++i) mine.push_back(plan.layers[i]);
        }
        x.acts += scratch + staging[d * S + k];
        x.workspace = V > 1 ? std::max(workspace, ly.workspace(mine, most)) : workspace;
      }
    }
  } else if (layout == MemoryModel::Layout::Shards) {
    // Units: a layer with parameters and the parameterless ones after it (strategies/fsdp.cpp),
    // each padded to W equal shards (the workers of its group).
    PB_CHECK(D * S == N, "memory estimate: {} on {} devices", s, N);
    const int W = S;
    std::vector<std::pair<int, int>> units;
    std::vector<double> padded;
    for (int i = 0; i < L; ++i) {
      const double n = ly.params(i, i + 1);
      if (units.empty() || (n > 0 && padded.back() > 0)) {
        units.push_back({i, i + 1});
        padded.push_back(std::ceil(n / W) * W);
      } else {
        units.back().second = i + 1;
        if (n > 0) padded.back() = std::ceil(n / W) * W;
      }
    }
    double shard = 0, all = 0, largest = 0;
    for (double u : padded) shard += u / W, all += u, largest = std::max(largest, u);
    const double whole = W > 1 ? 1 : 0;  // a group of one computes in its shards: no whole buffers
    std::vector<int64_t> ch = chunks(global_batch, N);
    ch.resize(N, 0);
    for (int i = 0; i < N; ++i) {
      const double n = static_cast<double>(ch[i]);
      double acts = 0, scratch = 0, max_in = 0;
      for (std::size_t u = 0; u < units.size(); ++u) {
        acts += ly.seq_acts(units[u].first, units[u].second, n);
        scratch = std::max(scratch, ly.seq_scratch(units[u].first, units[u].second, n));
        if (u > 0) max_in = std::max(max_in, ly.in(units[u].first) * n);
      }
      const double ws = ly.workspace(0, L, n);  // one backend runs every unit
      // The shard's parameters, gradients and Adam moments, the gathered parameters (fsdp: one
      // unit's, two with prefetch, the unit computing and the next; zero2: every unit's from
      // forward to backward; hsdp as fsdp) and one unit's full gradients, made once at setup.
      // bf16: the units share one bf16 copy of their parameters, the largest unit's, made at the
      // first forward (a worker without a chunk runs none); with --param-dtype bf16 over several
      // shards the gathered parameters are bf16 themselves, and no copy is made.
      const bool gathered16 = c.param_bf16 && W > 1;
      w[i].params = shard + whole * (gathered16 ? 0.5 : 1) * (model.gathered == 0 ? all : model.gathered * largest) +
                    (c.bf16 && n > 0 && !gathered16 ? 0.5 * largest : 0);
      w[i].state = 3 * shard + whole * largest + shard_staging(largest, W);
      w[i].acts = n * in + 2 * n * outn + 1 + acts + scratch + 2 * max_in;
      w[i].workspace = ws;
    }
  } else {
    const int T = S;
    PB_CHECK(D * T == N, "memory estimate: {} on {} devices", s, N);
    const std::vector<int64_t> pieces = chunks(global_batch, D);
    for (int d = 0; d < D && d < static_cast<int>(pieces.size()); ++d) {
      const double b = static_cast<double>(pieces[d]);
      for (int r = 0; r < T; ++r) {
        // Its slices of each conv / linear layer's output channels (the first K % T one more;
        // a layer of fewer than T channels whole), every layer's whole output for the batch, the
        // gathered pieces of the widest split layer and two input-gradient buffers.
        // Flatten is a view and a ReLU runs in place on an output the worker owns (strategies/tp.cpp);
        // on one way of several workers every layer is whole, computed straight into its output.
        double mine = 0, acts = 0, gathered = 1, local = 1, dx = 1, in16 = 0, out16 = 0;
        bool owned = false;
        std::vector<LayerPlan> slices;  // the worker's channels of each layer, as it runs them
        for (int i = 0; i < L; ++i) {
          const LayerPlan& l = plan.layers[i];
          const bool view = l.spec.type == LayerType::Flatten || (l.spec.type == LayerType::ReLU && owned);
          if (!view) acts += b * ly.out(i), owned = true;
          dx = std::max(dx, b * ly.in(i));
          if (l.spec.type != LayerType::Conv2d && l.spec.type != LayerType::Linear) continue;
          const int64_t K = l.out[0];
          const bool split = T > 1 && K >= T;
          const double fan = static_cast<double>(l.weight_numel / K), per_sample = ly.out(i) / static_cast<double>(K);
          const double k = split ? static_cast<double>(K / T + (r < K % T ? 1 : 0)) : static_cast<double>(K);
          mine += k * (fan + 1);
          in16 = std::max(in16, b * ly.in(i)), out16 = std::max(out16, b * k * per_sample);
          if (split) {
            const double piece = std::ceil(static_cast<double>(K) / T);
            gathered = std::max(gathered, T * b * piece * per_sample);
            local = std::max(local, b * piece * per_sample);
          }
          LayerPlan slice = l;
          slice.out[0] = static_cast<int64_t>(k);
          (l.spec.type == LayerType::Conv2d ? slice.spec.out_channels : slice.spec.out_features) = static_cast<int64_t>(k);
          slice.weight_numel = static_cast<int64_t>(k * fan), slice.bias_numel = static_cast<int64_t>(k);
          slices.push_back(slice);
        }
        Worker& x = w[d * T + r];
        x.params = mine, x.state = 3 * mine + (c.reduce_bf16 && D > 1 ? 0.5 * mine : 0);
        // bf16 (strategies/tp_ops.h): the activations and their gathered pieces at half the bytes,
        // the output widened for the loss, the weights' bf16 copy, and the rounded input and output
        // gradient scratch.
        const double kept = c.bf16 ? 0.5 : 1.0;
        x.acts = b * in + 2 * b * outn + 1 + kept * (acts + gathered) + local + 2 * dx;
        if (c.bf16) {
          x.params += 0.5 * mine;
          x.acts += b * outn + 0.5 * (std::max(in16, 1.0) + std::max(out16, 1.0));
        }
        x.workspace = c.bf16 && c.tp_workspace && b > 0 ? c.tp_workspace(slices, static_cast<int64_t>(b)) : ly.workspace(slices, b);
      }
    }
  }
  std::size_t top = 0;
  for (std::size_t i = 0; i < w.size(); ++i) {
    out.per_worker.push_back(w[i].bytes());
    if (w[i].bytes() > w[top].bytes()) top = i;
  }
  out.params = w[top].params * sizeof(float);
  out.grads_and_moments = w[top].state * sizeof(float);
  out.activations = w[top].acts * sizeof(float);
  out.workspace = w[top].workspace;
  return out;
}


}  // namespace pb
