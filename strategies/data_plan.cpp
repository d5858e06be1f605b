// The plans of the strategies whose workers each run the whole net: regular, dp, ddp, fsdp, zero2.
#include <algorithm>

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

std::vector<int> first_workers(int n) {
  std::vector<int> v(n);
  for (int i = 0; i < n; ++i) v[i] = i;
  return v;
}

bool bf16_of(const StrategyOptions& o) { return o.backend.precision == Precision::Bf16; }

// Forward, loss, backward of the whole net on one worker's chunk of n samples (no communication),
// as one Sequential.
struct Whole {
  PlanBuilder& b;
  const NetPlan& net;
  int w;
  int64_t n;
  bool bf16 = false;
  int layers() const { return static_cast<int>(net.layers.size()); }
  int buf(BufferRole role, int64_t values, int index = -1) { return b.buffer(w, role, index, values * kF); }
  // What the Sequential keeps beside its activations: its backward scratch and, under bf16, its
  // parameters' bf16 copy (none on a worker without samples).
  void keeps() {
    const SequentialBuffers s = sequential_buffers(net, 0, layers(), n, bf16);
    if (s.scratch > 0) b.buffer(w, BufferRole::Scratch, -1, s.scratch);
    if (s.param_copy > 0) b.buffer(w, BufferRole::ParamCopy, -1, s.param_copy, DType::Bf16);
  }
  void forward() {
    b.compute(w, ActionKind::Forward, 0, layers(), 0, {buf(BufferRole::Input, n * numel_of(net.input)), params()},
              {acts()}).bytes = n * numel_of(net.output) * kF;
  }
  // The loss over `samples` outputs in buffer `y`.
  void loss(int y, int64_t samples) {
    const int64_t out = samples * numel_of(net.output);
    Action& a = b.compute(w, ActionKind::Loss, -1, -1, 0, {y, buf(BufferRole::Target, out)},
                          {buf(BufferRole::OutputGrad, out), buf(BufferRole::Loss, 1)});
    a.bytes = out * kF, a.samples = samples;
  }
  // Backward over layers [lo, hi): the weight gradients into `grads`, the data gradient on.
  void backward(int lo, int hi, const std::vector<int>& grads) {
    b.compute(w, ActionKind::BackwardWeights, lo, hi, 0, {dy(), acts()}, grads);
    b.compute(w, ActionKind::BackwardData, lo, hi, 0, {dy(), acts(), params()}, {});
  }
  int params() { return buf(BufferRole::Params, net.param_count); }
  int grads() { return buf(BufferRole::Grads, net.param_count); }
  int acts() {  // the model's activations (its own slot)
    return b.buffer(w, BufferRole::Activations, -1, sequential_buffers(net, 0, layers(), n, bf16).activations);
  }
  int dy() { return buf(BufferRole::OutputGrad, n * numel_of(net.output)); }
  int adam(int64_t count) { return buf(BufferRole::AdamState, 2 * count); }
  void optimizer(int params, int grads, int64_t count) {
    b.compute(w, ActionKind::Optimizer, -1, -1, -1, {grads}, {params, adam(count)}).bytes = count * kF;
  }
};

}  // namespace

Plan plan_regular(const NetPlan& net, const StrategyOptions& o, int64_t batch) {
  PlanBuilder b("regular", 1, batch, 1);
  b.plan().replica[0] = 0;
  Whole s{b, net, 0, batch, bf16_of(o)};
  b.at(0, batch);
  s.keeps();
  s.forward();
  s.loss(s.acts(), batch);
  s.backward(0, s.layers(), {s.grads()});
  s.optimizer(s.params(), s.grads(), net.param_count);
  return b.take();
}

Plan plan_dp(const NetPlan& net, const StrategyOptions& o, int64_t batch) {
  const std::vector<int64_t> chunks = chunk_sizes(batch, o.devices), offsets = chunk_offsets(chunks);
  const int used = static_cast<int>(chunks.size());
  PlanBuilder b("dp", o.devices, batch, 1);
  const int world = b.group("world", first_workers(used));
  const int64_t in = numel_of(net.input), out = numel_of(net.output), np = net.param_count;
  for (int i = 0; i < used; ++i) {
    b.plan().replica[i] = i;
    Whole s{b, net, i, chunks[i], bf16_of(o)};
    b.at(i, chunks[i]);
    const int params = s.params();
    s.keeps();
    gradient_staging(b, i, o, np);
    Action& bc = b.collective(i, CollKind::Broadcast, world, np, np * kF, false);
    bc.root = 0;
    (i == 0 ? bc.reads : bc.writes).push_back(params);
    const int x = s.buf(BufferRole::Input, (i == 0 ? batch : chunks[i]) * in);
    if (i == 0)
      for (int j = 1; j < used; ++j) b.p2p(0, ActionKind::Send, world, j, chunks[j] * in, x, false);
    else
      b.p2p(i, ActionKind::Recv, world, 0, chunks[i] * in, x, false);
    s.forward();
    if (i == 0) {
      const int y = s.buf(BufferRole::Output, batch * out), dy = s.buf(BufferRole::OutputGrad, batch * out);
      b.compute(0, ActionKind::Copy, -1, -1, -1, {s.acts()}, {y}).bytes = chunks[0] * out * kF;
      for (int j = 1; j < used; ++j) b.p2p(0, ActionKind::Recv, world, j, chunks[j] * out, y, false);
      s.loss(y, batch);
      for (int j = 1; j < used; ++j) b.p2p(0, ActionKind::Send, world, j, chunks[j] * out, dy, false);
    } else {
      b.p2p(i, ActionKind::Send, world, 0, chunks[i] * out, s.acts(), false);
      b.p2p(i, ActionKind::Recv, world, 0, chunks[i] * out, s.dy(), false);
    }
    s.backward(0, s.layers(), {s.grads()});
    Action& rd = on_wire(b.collective(i, CollKind::Reduce, world, np, np * kF, false), o.reduce_dtype);
    rd.root = 0;
    rd.reads.push_back(s.grads());
    if (i == 0) rd.writes.push_back(s.grads());
    if (i == 0) s.optimizer(params, s.grads(), np);
  }
  for (int i = used; i < o.devices; ++i)  // without a chunk: its replica alone
    b.buffer(i, BufferRole::Params, -1, np * kF), b.buffer(i, BufferRole::Grads, -1, np * kF);
  (void)offsets;
  return b.take();
}

Plan plan_ddp(const NetPlan& net, const StrategyOptions& o, int64_t batch) {
  const std::vector<int64_t> chunks = chunk_sizes(batch, o.devices);
  const int used = static_cast<int>(chunks.size());
  const std::vector<BucketLayout> buckets = ddp_bucket_layout(net, o.first_bucket_bytes, o.bucket_bytes);
  PlanBuilder b("ddp", o.devices, batch, 1);
  const int world = b.group("world", first_workers(used));
  for (int i = 0; i < used; ++i) {
    b.plan().replica[i] = i;
    Whole s{b, net, i, chunks[i], bf16_of(o)};
    b.at(i, chunks[i]);
    s.keeps();
    gradient_staging(b, i, o, net.param_count);
    s.forward();
    s.loss(s.acts(), chunks[i]);
    // Backward down to each bucket's lowest layer, then its all-reduce starts (ddp's callback).
    std::vector<int> starts;
    int top = s.layers();
    for (std::size_t k = 0; k < buckets.size(); ++k) {
      const BucketLayout& bk = buckets[k];
      const int g = s.buf(BufferRole::Grads, bk.end - bk.begin, static_cast<int>(k));
      s.backward(bk.first_layer, top, {g});
      top = bk.first_layer;
      Action& ar = on_wire(b.collective(i, CollKind::AllReduce, world, bk.end - bk.begin, (bk.end - bk.begin) * kF, true),
                           o.reduce_dtype);
      ar.reads.push_back(g), ar.writes.push_back(g);
      starts.push_back(ar.id);
    }
    if (top > 0) s.backward(0, top, {});  // leading layers without parameters
    b.wait(i, starts);
    std::vector<int> grads;
    for (std::size_t k = 0; k < buckets.size(); ++k) grads.push_back(s.buf(BufferRole::Grads, 0, static_cast<int>(k)));
    Action& opt = b.compute(i, ActionKind::Optimizer, -1, -1, -1, grads, {s.params(), s.adam(net.param_count)});
    opt.bytes = net.param_count * kF;
  }
  for (int i = used; i < o.devices; ++i) {  // without a chunk: its replica alone, stepped as the others'
    Whole s{b, net, i, 0};
    s.params(), s.grads(), s.adam(net.param_count);
  }
  return b.take();
}

// fsdp and zero2; with `prefetch` (FSDP2's forward and backward prefetch) each unit's all-gather
// starts on the communication lane before the previous unit's compute and is waited for after it,
// fsdp gathering into two buffers used in turn (the unit computing and the next). hsdp (replicas
// R > 1): worker r shards with the S workers of its group r / S and all-reduces its shard with the
// workers r % S of the other groups.
Plan plan_fsdp(const NetPlan& net, const StrategyOptions& o, int64_t batch, const std::string& name, bool reshard,
               bool prefetch, int replicas) {
  const int n = o.devices;
  PB_CHECK(replicas >= 1 && n % replicas == 0, "{}: {} groups over {} workers", name, replicas, n);
  const int S = n / replicas;  // the workers a unit is sharded over
  std::vector<int64_t> chunks = chunk_sizes(batch, n);
  chunks.resize(n, 0);  // every worker takes part: each holds shards the others need
  const std::vector<FsdpUnit> units = fsdp_units(net, S);
  const StageGradients passed = plan_stage_gradients(net, unit_cuts(units));
  PlanBuilder b(name, n, batch, 1);
  const int world = b.group("world", first_workers(n));
  std::vector<int> shard_group(replicas, world), replicate_group(S, -1);
  if (replicas > 1) {
    for (int d = 0; d < replicas; ++d) {
      std::vector<int> members;
      for (int t = 0; t < S; ++t) members.push_back(d * S + t);
      shard_group[d] = b.group(fmt::format("shard {}", d), members);
    }
    for (int t = 0; t < S; ++t) {
      std::vector<int> members;
      for (int d = 0; d < replicas; ++d) members.push_back(d * S + t);
      replicate_group[t] = b.group(fmt::format("replicate {}", t), members);
    }
  }
  const int nu = static_cast<int>(units.size());
  int64_t total = 0, largest = 0;  // values: a worker's shards, the largest unit's whole parameters
  for (const FsdpUnit& u : units) total += u.shard, largest = std::max(largest, S * u.shard);
  const bool bf16 = bf16_of(o), param16 = o.param_dtype == DType::Bf16, reduce16 = o.reduce_dtype == DType::Bf16;
  // --param-dtype bf16 over several shards: the whole parameters are gathered into bf16 and
  // computed with as they are (one worker's shards are its whole parameters, fp32).
  const DType whole_dtype = S > 1 ? o.param_dtype : DType::F32;
  // The communicator's bf16 staging, in values (engine/comm_wire.cpp): a reduce-scatter's send (a
  // unit) and receive (a shard) slots, an all-gather's the other way round; blocking calls share
  // the slots, fsdp-prefetch's gather holds its own while a reduce-scatter runs. Over several shards
  // a bf16 gather writes the whole parameters in bf16 itself: its send slot only. hsdp: the
  // all-reduce over the groups is another communicator's, with a slot of its own.
  const double L = static_cast<double>(largest), shard = L / S;
  const double gather16 = param16 ? 0.5 * (shard + (S > 1 ? 0 : L)) : 0, reduce_16 = reduce16 ? 0.5 * (L + shard) : 0;
  const double shared = gather16 > 0 && reduce_16 > 0 && S == 1 ? 0.5 * (L - shard) : 0;
  const double staging = (prefetch && reshard ? gather16 + reduce_16 : std::max(gather16, reduce_16) + shared) +
                         (reduce16 && replicas > 1 ? 0.5 * shard : 0);
  for (int r = 0; r < n; ++r) {
    b.plan().replica[r] = chunks[r] > 0 ? r : -1;  // without a chunk: only the collectives
    Whole s{b, net, r, chunks[r], bf16};
    b.at(r, chunks[r]);
    const int64_t c = chunks[r];
    const int group = shard_group[r / S];
    const int shard_params = s.buf(BufferRole::ShardParams, total), shard_grads = s.buf(BufferRole::ShardGrads, total);
    // Made once at setup beyond one worker: the gathered parameters (fsdp: the largest unit's; two
    // with prefetch, the unit computing and the next; zero2: every unit's), one unit's whole
    // gradients; the units' Sequentials share one backward scratch and one bf16 parameter copy
    // (the largest unit's; none where the gathered parameters are bf16 themselves), and two input
    // gradients of the largest unit input pass between them.
    if (staging > 0) b.buffer(r, BufferRole::Staging, -1, std::llround(staging * kF), DType::Bf16);
    if (S > 1) s.buf(BufferRole::UnitGrads, largest);
    std::vector<SequentialBuffers> unit_buffers;
    for (int u = 0; u < nu; ++u) unit_buffers.push_back(sequential_buffers(net, units[u].begin, units[u].end, c, bf16));
    const int64_t scratch = shared_scratch(unit_buffers);
    if (scratch > 0) b.buffer(r, BufferRole::Scratch, -1, scratch);
    if (bf16 && c > 0 && !(param16 && S > 1))
      b.buffer(r, BufferRole::ParamCopy, -1, largest * static_cast<int64_t>(sizeof(Bf16)), DType::Bf16);
    for (std::size_t k = 0; k < passed.pool.size() && c > 0; ++k)
      s.buf(BufferRole::InputGrad, c * passed.pool[k], static_cast<int>(k));
    auto grad_buf = [&](int k) { return k < 0 ? -1 : s.buf(BufferRole::InputGrad, 0, k); };
    auto gathered = [&](int u) {
      const int index = !reshard ? u : prefetch ? u % 2 : -1;  // zero2: a unit's own; fsdp-prefetch: a slot
      const int64_t values = S == 1 ? 0 : reshard ? largest : S * units[u].shard;
      return b.buffer(r, BufferRole::Gathered, index, values * static_cast<int64_t>(dtype_size(whole_dtype)), whole_dtype);
    };
    auto act = [&](int u) {
      return u < 0 ? s.buf(BufferRole::Input, c * numel_of(net.input))
                   : b.buffer(r, BufferRole::Activations, u, sequential_buffers(net, units[u].begin, units[u].end, c, bf16).activations);
    };
    // The activations a unit reads: its entries' makers' (a chain's: the unit before it).
    auto entry_acts = [&](int u) {
      std::vector<int> acts;
      for (const auto& [from, exit] : passed.entry_from[u])
        if (std::find(acts.begin(), acts.end(), act(from)) == acts.end()) acts.push_back(act(from));
      return acts;
    };
    // The unit's communication and Free carry its layers: the executor finds its shard's place by them.
    auto of_unit = [&](Action& a, int u) {
      a.layer_begin = units[u].begin, a.layer_end = units[u].end;
    };
    // An all-gather of unit u; started (async), the id its Wait names.
    auto gather = [&](int u, bool async = false) {
      Action& a =
          on_wire(b.collective(r, CollKind::AllGather, group, units[u].shard, S * units[u].shard * kF, async), o.param_dtype);
      a.reads.push_back(shard_params), a.writes.push_back(gathered(u));
      of_unit(a, u);
      return a.id;
    };
    int pending = -1;  // a started all-gather not yet waited for
    auto settle = [&] {
      if (pending >= 0) b.wait(r, {pending});
      pending = -1;
    };
    for (int u = 0; u < nu; ++u) {
      if (!prefetch || u == 0) gather(u);
      if (prefetch && u + 1 < nu) pending = gather(u + 1, true);
      if (c > 0) {
        std::vector<int> reads = entry_acts(u);
        reads.push_back(gathered(u));
        b.compute(r, ActionKind::Forward, units[u].begin, units[u].end, 0, reads, {act(u)});
      }
      if (reshard) of_unit(b.compute(r, ActionKind::Free, -1, -1, -1, {}, {gathered(u)}), u);
      settle();
    }
    if (prefetch && reshard) pending = gather(nu - 1, true);  // backward's first unit, under the loss
    if (c > 0) s.loss(act(nu - 1), c);
    for (int u = nu - 1; u >= 0; --u) {
      settle();
      if (reshard && !prefetch) gather(u);
      if (reshard && prefetch && u > 0) pending = gather(u - 1, true);
      const int ug = s.buf(BufferRole::UnitGrads, 0);
      // The gradients of its exits (the loss's, or passed from later units) in; of its entries out.
      std::vector<int> dys, dxs;
      for (int k : passed.exit_buf[u]) dys.push_back(k < 0 ? s.dy() : grad_buf(k));
      for (std::size_t k = 0; k < passed.entry_buf[u].size(); ++k)
        for (int at : {passed.entry_buf[u][k], passed.entry_tmp[u][k]})
          if (at >= 0) dxs.push_back(grad_buf(at));
      if (c > 0) {
        std::vector<int> weights_reads = dys, acts = entry_acts(u), data_reads = dys;
        weights_reads.insert(weights_reads.end(), acts.begin(), acts.end());
        data_reads.push_back(gathered(u));
        b.compute(r, ActionKind::BackwardWeights, units[u].begin, units[u].end, 0, weights_reads, {ug});
        b.compute(r, ActionKind::BackwardData, units[u].begin, units[u].end, 0, data_reads, dxs);
      }
      Action& rs = on_wire(b.collective(r, CollKind::ReduceScatter, group, units[u].shard, S * units[u].shard * kF, false),
                           o.reduce_dtype);
      rs.reads.push_back(ug), rs.writes.push_back(shard_grads);
      of_unit(rs, u);
      if (replicas > 1) {  // the group's sum of this shard, summed over the groups
        Action& ar = on_wire(
            b.collective(r, CollKind::AllReduce, replicate_group[r % S], units[u].shard, units[u].shard * kF, false),
            o.reduce_dtype);
        ar.reads.push_back(shard_grads), ar.writes.push_back(shard_grads);
        of_unit(ar, u);
      }
      of_unit(b.compute(r, ActionKind::Free, -1, -1, -1, {}, {gathered(u)}), u);
    }
    b.compute(r, ActionKind::Optimizer, -1, -1, -1, {shard_grads}, {shard_params, s.adam(total)}).bytes =
        total * kF;
  }
  return b.take();
}

}  // namespace pb
