// pipeline: the layer list in contiguous stages, one per worker (as mp), and the batch in M
// torch.chunk micro-batches, stages running concurrently on their own threads and accumulating
// gradients. Schedules: GPipe fill-drain (every forward, then every backward in reverse) or 1F1B
// (PipeDream-flush, as Megatron: stage s runs min(P-1-s, M) warm-up forwards, then one forward
// and one backward alternately, then the remaining backwards), which holds at most P-s
// micro-batches' activations where GPipe holds M. With recompute a stage keeps only its inputs
// and runs each micro-batch's forward again just before its backward. ZB-H1 (pipeline-zb) runs
// each backward as two actions, the input gradient (B) and later the weight gradients (W), from
// the output gradients B keeps (Sequential::backward_data / backward_weights).
//
// A step runs the stage's plan (strategies/pipeline_plan.cpp, made at load_batch), one call per
// action. Sends are started and waited for only when their buffer is needed again, so a stage
// goes on with its next micro-batch while its output travels; receives complete when their
// values are needed (on GPUs the wait orders the stream, the host does not block). The sends that
// end a compute and the receive that starts the next go out as one group
// (Communicator::group_start), as Megatron's batched p2p: under 1F1B a stage sends an activation
// and receives a gradient while its peer sends that gradient and receives the next activation,
// which on one NCCL stream in any other grouping would wait on each other
// (tests/test_nccl_order.cpp).
//
// Chunked schedules (strategies/rules.h: interleaved 1F1B, Megatron's virtual stages, and any
// other): the net in V * P stages, worker r holding the V its schedule places there as chunks
// (w.model and w.chunks), each with its own slots, buffers and Adam, the plan naming a chunk's
// buffers "c<c>/...". A chunk whose neighbour stage is on its own worker reads that stage's output
// (or input gradient) in place.
//
// A net with skips (every schedule, dp x pp): each stage receives every value it reads from the
// stage that makes it, in input slots of its own per micro-batch in flight, sends each of its exits
// to every later stage reading one, and gets back each exit's gradient from each reader, summed
// before its backward (strategies/stages.h, StageLinks; docs/architecture.md). Under a chunked
// schedule a value made by a chunk of the same worker is read from that chunk's slot (or copied
// from it: the plan's Copy); its buffers are the plan's, laid out one after another per role.
//
// dp x pp hybrids (dp<D>xpp<P>): D replicas of the P-stage pipeline, worker r being stage r % P
// of replica r / P. Each replica takes its torch.chunk piece of the batch and cuts it into
// micro-batches; after its last backward, each stage's gradients are all-reduced (summed) among
// the D workers that hold it (a communicator per stage), and every worker steps its stage.
#include <algorithm>
#include <optional>

#include "engine/check.h"
#include "strategies/batch.h"
#include "strategies/executor.h"
#include "plan/plan.h"
#include "strategies/group.h"
#include "strategies/plan_gen.h"
#include "strategies/registry.h"
#include "strategies/rules.h"
#include "strategies/stages.h"

namespace pb {

namespace {

class Staged final : public GroupStrategy {
 public:
  Staged(const StrategyOptions& o, const std::string& name, int micro_batches, int replicas,
         std::optional<ChunkSchedule> sched = std::nullopt)
      : GroupStrategy(o, name, true, /*replicas=*/false), micro_(micro_batches), replicas_(replicas),
        split_(o.schedule == Schedule::ZeroBubble), sched_(std::move(sched)) {
    if (o.schedule == Schedule::Interleaved && !sched_) sched_ = interleaved_schedule(o);
    if (sched_ && o.plan)
      throw UsageError(fmt::format("{}: runs its own plan (--plan takes mp, GPipe, 1F1B and dp x pp plans)", name));
    if (o.schedule == Schedule::Interleaved && o.virtual_stages < 2)
      throw UsageError(fmt::format("{}: --virtual-stages must be at least 2, got {}", name, o.virtual_stages));
    PB_CHECK(!sched_ || replicas == 1, "{}: a chunked schedule has no dp x pp form", name);
    if (micro_ < 1) throw UsageError(fmt::format("{}: --micro-batches must be at least 1, got {}", name, micro_));
    PB_CHECK(replicas_ >= 1 && o.devices % replicas_ == 0, "{}: {} replicas over {} workers", name, replicas_, o.devices);
  }

  std::vector<float> params() override { return group().params_from_pieces(plan().param_count, stages()); }

 protected:
  void plan_workers() override {
    // By time: profiled at one micro-batch of one replica's piece.
    // One worker: its chunks would only hand over to each other, so the net runs as one stage (as
    // 1F1B for interleaved, whose o.schedule says so; as GPipe for another schedule).
    if (stages() == 1) sched_.reset();
    chunks_ = sched_ ? sched_->chunks : 1;
    ranges_ = stage_ranges(plan(), stages() * chunks_, opts_, micro_ * replicas_, group().first_local().device, name());
    chunk_.clear();
    chunk_.resize(workers());
    for (auto& ch : chunk_) ch.resize(chunks_);
    staged_ = true;
    if (chunks_ > 1) chunk_stages_ = ranges_;
    links_.clear();
    for (int st = 0; st < static_cast<int>(ranges_.size()) && plan().has_skips(); ++st)
      links_.push_back(stage_links(plan(), ranges_, st));
    for (int r = 0; r < workers(); ++r) {
      group().worker(r).stats.layer_begin = ranges_[stage_at(r, 0)].first;
      group().worker(r).stats.layer_end = ranges_[stage_at(r, 0)].second;
    }
  }

  void setup_worker(Worker& w, const std::vector<float>& params, const AdamParams& adam) override {
    const auto [begin, end] = ranges_[stage_at(w.rank, 0)];
    w.chunks.clear();
    auto& ch = chunk_[w.rank];
    for (Chunk& c : ch) c = Chunk{};
    w.model = std::make_unique<Sequential>(plan(), begin, end, w.be());
    w.model->load_params(params);
    w.adam = std::make_unique<Adam>(w.be(), w.model->params().numel(), adam);  // its own slice
    ch[0].model = w.model.get(), ch[0].adam = w.adam.get();
    for (int c = 1; c < chunks_; ++c) {
      const auto [b, e] = ranges_[stage_at(w.rank, c)];
      w.chunks.push_back(std::make_unique<Sequential>(plan(), b, e, w.be()));
      Sequential& m = *w.chunks.back();
      m.load_params(params);
      m.share_scratch(*w.model);  // one chunk's backward at a time
      m.set_tracer(&w.tracer);
      ch[c].own_adam = std::make_unique<Adam>(w.be(), m.params().numel(), adam);
      ch[c].own_adam->set_tracer(&w.tracer);
      ch[c].model = &m, ch[c].adam = ch[c].own_adam.get();
    }
  }

  int plan_batch(int64_t batch) override {
    piece_ = replica_pieces(batch, replicas_, name());
    piece_offset_ = chunk_offsets(piece_);
    micro_sizes_ = replica_micro_batches(piece_, micro_, opts_.cap_micro_batches, batch, name());
    offsets_.clear();
    for (const auto& sizes : micro_sizes_) offsets_.push_back(chunk_offsets(sizes));
    micro_batches_ = static_cast<int>(micro_sizes_[0].size());
    // ZB-H1 with forward, B and W of equal time: (P-1)(F+B-W) / (M(F+B+W) + (P-1)(F+B-W)).
    bubble_fraction_ = sched_ ? sched_->bubble(stages(), micro_batches_)
                              : static_cast<double>(stages() - 1) / ((split_ ? 3 : 1) * micro_batches_ + stages() - 1);
    plan_ = sched_ ? plan_chunked(plan(), opts_, batch, name(), ranges_, micro_sizes_[0], *sched_)
                   : plan_stage_steps(plan(), opts_, batch, name(), ranges_, micro_sizes_);
    for (int r = 0; r < workers(); ++r) {
      const std::vector<PipeOp> ops = sched_ ? sched_->ops(stages(), r, micro_batches_, name()) : std::vector<PipeOp>{};
      for (int c = 0; c < chunks_; ++c) chunk_[r][c].slots = sched_ ? chunk_slots(ops, c) : in_flight(r);
    }
    if (opts_.plan && !links_.empty())
      throw UsageError(fmt::format("{}: --plan {}: the net has skips ({}); a plan file runs only a chain's pipeline yet",
                                   name(), opts_.plan_source, first_skip(plan())));
    if (opts_.plan) {  // a plan file: run instead, once it computes what this strategy's own plan does
      std::vector<int> slots;
      for (int r = 0; r < workers(); ++r) slots.push_back(in_flight(r));
      check_stage_plan(*opts_.plan, plan_, ranges_, slots, opts_.recompute, opts_.plan_source.empty() ? "--plan" : opts_.plan_source);
      plan_ = *opts_.plan;
    }
    if (!links_.empty()) graph_layout();
    staging_.clear();
    for (int r = 0; r < workers(); ++r) {
      staging_.emplace_back();
      for (std::size_t g = 0; g < plan_.groups.size(); ++g) staging_.back().push_back(transfer_staging(plan_, r, static_cast<int>(g)));
    }
    ptrs_.assign(workers(), {});
    for (std::size_t k = 1; k < plan_.groups.size(); ++k)  // one-way channels: a communicator each, over all
      if (!is_stage_group(plan_.groups[k])) group().connect_parts(plan_.groups[k].name, {plan_.groups[k].members});
    if (replicas_ > 1) {  // the workers of each stage, for its gradients' all-reduce
      std::vector<std::vector<int>> parts(stages());
      for (int r = 0; r < workers(); ++r) parts[stage_of(r)].push_back(r);
      group().connect_parts("stage", parts);
    }
    return workers();
  }

  int stages() const { return workers() / replicas_; }
  int stage_of(int rank) const { return rank % stages(); }
  // The stage of the net (of stages() * chunks_) that worker `rank`'s chunk c holds.
  int stage_at(int rank, int c) const { return sched_ ? sched_->stage(stages(), stage_of(rank), c) : stage_of(rank); }
  // Whether the step's plan names a buffer of `role` for that chunk (a chunk fed in place has no
  // input slots of its own; one whose next stage is in place, no output gradient).
  bool names(int rank, int c, BufferRole role) const {
    return std::any_of(plan_.buffers.begin(), plan_.buffers.end(),
                       [&](const PlanBuffer& b) { return b.worker == rank && b.chunk == c && b.role == role; });
  }
  int replica_of(int rank) const { return rank / stages(); }

  // Micro-batches whose activations a worker holds at once: all M under GPipe, P - s under 1F1B.
  int in_flight(int rank) const {
    return pipeline_slots(opts_.schedule, stages(), stage_of(rank), static_cast<int>(micro_sizes_[replica_of(rank)].size()));
  }

  // Stage 0 holds its replica's piece of the batch (the data); a later stage one input buffer per micro-batch in
  // flight (the slot of its activations refers to it until its backward); two input-gradient
  // buffers, so one can travel while the next is written.
  void load_worker(Worker& w, const std::vector<float>& x, const std::vector<float>& t) override {
    const int d = replica_of(w.rank);
    const int64_t b = piece_[d], at = piece_offset_[d], most = micro_sizes_[d][0];
    auto piece = [&](const std::vector<float>& v, int64_t per_sample) {  // the replica's samples
      return replicas_ == 1 ? v : std::vector<float>(v.begin() + at * per_sample, v.begin() + (at + b) * per_sample);
    };
    int last = -1;  // the chunk that holds the net's last stage, if this worker has it
    for (int c = 0; c < chunks_; ++c) {
      Chunk& ch = chunk_[w.rank][c];
      const Sequential& m = *ch.model;
      Tensor& cx = c == 0 ? w.x : ch.x;
      Tensor& cdx = c == 0 ? w.dx : ch.dx;
      Tensor& cdy = c == 0 ? w.dy : ch.dy;
      const bool first = stage_at(w.rank, c) == 0;
      cx = Tensor(), cdx = Tensor(), cdy = Tensor();
      if (first) cx = Tensor::from_host({m.in_numel(b)}, piece(x, m.in_numel(1)), w.device);
      if (!links_.empty()) {
        // A stage of a net with skips: its input slots, input gradients and output gradients each
        // one tensor, holding the plan's buffers of that role one after another.
        const std::vector<int64_t>& n = graph_numel_[w.rank][c];
        if (!first && n[0] > 0) cx = Tensor::empty({n[0]}, w.device);
        if (n[1] > 0) cdx = Tensor::empty({n[1]}, w.device);
        if (n[2] > 0) cdy = Tensor::empty({n[2]}, w.device);
      } else {
        if (!first && names(w.rank, c, BufferRole::StageInput)) cx = Tensor::empty({ch.slots * numel_of(m.in_sample()) * most}, w.device);
        if (!first) cdx = Tensor::empty({2 * numel_of(m.in_sample()) * most}, w.device);
        if (names(w.rank, c, BufferRole::OutputGrad)) cdy = Tensor::empty({numel_of(m.out_sample()) * most}, w.device);  // one micro-batch's
      }
      ch.x_ = &cx, ch.dx_ = &cdx, ch.dy_ = &cdy;
      if (stage_at(w.rank, c) == stages() * chunks_ - 1) last = c;
    }
    if (last >= 0) {  // the loss of every micro-batch, on the last stage
      const Sequential& m = *chunk_[w.rank][last].model;
      w.t = Tensor::from_host({m.out_numel(b)}, piece(t, m.out_numel(1)), w.device);
      w.loss = Tensor::zeros({static_cast<int64_t>(micro_sizes_[d].size())}, w.device);
    }
    ptrs_[w.rank] = pointers(w);
  }

  // The stage's plan (strategies/pipeline_plan.cpp) run by the executor; the computations here.
  void step(Worker& w, Group& g) override {
    const int rank = w.rank, d = replica_of(rank);  // rank: also the worker's rank in g.comm()
    const auto& sizes = micro_sizes_[d];
    const auto& offsets = offsets_[d];
    const int64_t out_n = numel_of(plan().output);
    const std::vector<float*>& at = ptrs_[rank];
    // Per plan group, its communicator and this worker's rank there: looked up once a step, not per transfer.
    std::vector<std::pair<Communicator*, int>> comms;
    for (std::size_t k = 0; k < plan_.groups.size(); ++k) {
      const std::vector<int>& m = plan_.groups[k].members;
      const bool member = std::find(m.begin(), m.end(), rank) != m.end();
      comms.push_back(member ? comm_of(g, rank, static_cast<int>(k)) : std::pair<Communicator*, int>{nullptr, -1});
    }
    // bf16 transfers' staging (--precision bf16) made before the step's peak, as the estimate has it.
    for (std::size_t k = 0; k < staging_[rank].size(); ++k)
      if (!staging_[rank][k].empty()) comms[k].first->reserve_transfer_staging(comms[k].second, staging_[rank][k]);
    // per chunk and micro-batch: its output, in its slot
    std::vector<std::vector<const float*>> out(chunks_, std::vector<const float*>(sizes.size(), nullptr));
    bool accumulate = false;
    PlanExecutor::Binding b;
    b.tracer = &w.tracer;
    b.at = [&](const Action& a, int buf, bool) {  // null: an activation, its slot's output (a skip: its exit's)
      if (at[buf]) return at[buf];
      const int c = plan_.buffers[buf].chunk;
      if (a.kind == ActionKind::Send && a.layer_begin >= 0 && !links_.empty()) {
        const Sequential& m = *chunk_[rank][c].model;
        const std::vector<int>& exits = m.boundary().exits;
        const auto k = static_cast<std::size_t>(std::find(exits.begin(), exits.end(), a.layer_begin) - exits.begin());
        return const_cast<float*>(m.exit_value(k, opts_.recompute ? 0 : a.micro % chunk_[rank][c].slots));
      }
      return const_cast<float*>(out[c].at(a.micro));
    };
    // A forward's input: the stage's input (slot), or the previous chunk's output in place.
    auto input = [&](const Action& a) -> const float* {
      const int buf = a.reads.at(0);
      return at[buf] ? at[buf] : out[plan_.buffers[buf].chunk].at(a.micro);
    };
    b.comm = [&](int group) { return comms.at(group); };
    b.compute = [&](const Action& a) {
      const int c = chunk_of(a);
      Chunk& ch = chunk_[rank][c];
      Sequential& m = *ch.model;
      const int slot = opts_.recompute ? 0 : a.micro % ch.slots;
      switch (a.kind) {
        case ActionKind::Forward:
        case ActionKind::Recompute:
          if (links_.empty()) {
            out[c][a.micro] = m.forward(input(a), sizes[a.micro], slot);
          } else {  // its reads: each entry's slot, then the parameters
            std::vector<const float*> entries;
            for (std::size_t j = 0; j < m.boundary().entries.size(); ++j) entries.push_back(entry(rank, a, m, j));
            out[c][a.micro] = m.forward(entries, sizes[a.micro], slot);
          }
          break;
        case ActionKind::Loss: {
          const int k = a.micro;
          auto loss_span = w.tracer.compute(Phase::Loss, k, [] { return std::string("mse loss"); });
          w.be().mse_loss_grad(sizes[k] * out_n, out[c][k], w.t.data() + offsets[k] * out_n, grad_scale(),
                               at[a.writes.at(0)], w.loss.data() + k);
          break;
        }
        case ActionKind::BackwardWeights:
          accumulate = std::any_of(a.reads.begin(), a.reads.end(),  // it reads the gradients it adds to
                                   [&](int r) { return plan_.buffers[r].role == BufferRole::Grads; });
          if (kept(a.reads)) m.backward_weights(accumulate, slot);  // ZB-H1's W
          break;                                                                          // else: with the data's
        case ActionKind::BackwardData: {
          // Its first read: the output gradient (its own, or the next stage's input gradient in place).
          // Its first write: dx[j] on later stages; none, or B's kept gradients (no place here), on stage 0.
          if (!links_.empty()) {
            backward_graph(w, m, links_[stage_at(rank, c)], a, sizes[a.micro], accumulate, slot);
            break;
          }
          const float* dy = at[a.reads.at(0)];
          float* dx = a.writes.empty() ? nullptr : at[a.writes[0]];
          if (kept(a.writes)) m.backward_data(dy, dx, slot);  // a split backward's B
          else m.backward(dy, dx, accumulate, slot);
          break;
        }
        case ActionKind::Optimizer: ch.adam->step(m.params(), m.grads()); break;
        case ActionKind::Copy: {  // a value made on this worker into a stage's input slot
          const Shape& of = a.layer_begin == kNetInput ? plan().input : plan().layers.at(a.layer_begin).out;
          const float* from = value(rank, a.reads.at(0), a.layer_begin, a.micro);
          w.be().copy(w.device, at[a.writes.at(0)], w.device, from,
                      static_cast<std::size_t>(sizes[a.micro] * numel_of(of)) * sizeof(float));
          break;
        }
        default: PB_CHECK(false, "{}: worker {} cannot run {}", name(), rank, describe(plan_, rank, a.id));
      }
    };
    PlanExecutor(plan_, rank, std::move(b)).run();
    w.stats.samples = piece_[d];
  }

 public:
  const Plan* step_plan() const override { return &plan_; }

 private:
  // The communicator of plan group `group` and worker `rank`'s rank there: the world's, a one-way
  // channel's, or its stage's (dp x pp's all-reduce).
  std::pair<Communicator*, int> comm_of(Group& g, int rank, int group) const {
    if (group == 0) return {&g.comm(), rank};
    const PlanGroup& pg = plan_.groups.at(group);
    const std::string key = is_stage_group(pg) ? "stage" : pg.name;
    return {&g.part_comm(key, rank), g.part_rank(key, rank)};
  }
  // dp x pp's group of the workers that hold one stage (the partition "stage"), not a channel.
  static bool is_stage_group(const PlanGroup& g) { return g.name.rfind("stage ", 0) == 0; }

  // A stage of a net with skips: its reads are the output gradient of each out with one (or the
  // loss's), its activations and parameters; its writes each entry's gradient but the net input's.
  // An exit read by several later stages gets the sum of their gradients (in the first's buffer).
  void backward_graph(Worker& w, Sequential& m, const StageLinks& l, const Action& a, int64_t n, bool accumulate, int slot) {
    const StageBoundary& bd = m.boundary();
    const std::vector<float*>& at = ptrs_[w.rank];
    std::vector<const float*> exit_grads(bd.exits.size(), nullptr);
    if (l.outs.empty()) {
      exit_grads.back() = at[a.reads.at(0)];  // the last stage's: the loss's
    } else {
      std::size_t r = 0;
      for (std::size_t j = 0; j < l.outs.size(); ++j) {
        const int e = l.outs[j].exit;
        if (e < 0) continue;
        float* dy = at[a.reads.at(r++)];
        if (exit_grads[e]) w.be().add(n * l.out_numel[j], exit_grads[e], dy, const_cast<float*>(exit_grads[e]));
        else exit_grads[e] = dy;
      }
    }
    std::vector<float*> entry_grads;
    std::size_t k = 0;
    for (int e : bd.entries) entry_grads.push_back(e == kNetInput ? nullptr : at[a.writes.at(k++)]);
    if (kept(a.writes)) m.backward_data(exit_grads, entry_grads, slot);  // ZB-H1's B: its writes end with what W reads
    else m.backward(exit_grads, entry_grads, accumulate, slot);
  }

  // A forward's entry j: its slot (the net's input on stage 0), or under a chunked schedule the
  // exit of the stage on this worker that makes it, in that micro-batch's slot there.
  const float* entry(int rank, const Action& a, const Sequential& m, std::size_t j) const {
    return value(rank, a.reads.at(j), m.boundary().entries.at(j), a.micro);
  }
  // Plan buffer `buf` holding `layer`'s output for micro-batch k: where it is, or where the chunk
  // that made it keeps it.
  const float* value(int rank, int buf, int layer, int k) const {
    if (const float* p = ptrs_[rank][buf]) return p;
    const Chunk& maker = chunk_[rank].at(plan_.buffers[buf].chunk);
    const std::vector<int>& exits = maker.model->boundary().exits;
    const auto e = static_cast<std::size_t>(std::find(exits.begin(), exits.end(), layer) - exits.begin());
    return maker.model->exit_value(e, k % maker.slots);
  }

  // The chunk an action computes on: its parameters' or gradients' (a forward may read the
  // previous chunk's output, a backward the next chunk's input gradient); a loss, its input's.
  int chunk_of(const Action& a) const {
    for (const std::vector<int>* bufs : {&a.reads, &a.writes})
      for (int i : *bufs)
        if (const BufferRole r = plan_.buffers[i].role; r == BufferRole::Params || r == BufferRole::Grads)
          return plan_.buffers[i].chunk;
    return plan_.buffers[a.reads.empty() ? a.writes.at(0) : a.reads[0]].chunk;
  }

  // Whether the buffers name B's kept output gradients: a split backward (ZB-H1's B or W).
  bool kept(const std::vector<int>& bufs) const {
    return std::any_of(bufs.begin(), bufs.end(), [&](int b) { return plan_.buffers[b].role == BufferRole::KeptGrad; });
  }

  // Where each of the worker's plan buffers lives (null: an activation, known once made).
  std::vector<float*> pointers(Worker& w) const {
    const int d = replica_of(w.rank);
    const int64_t most = micro_sizes_[d][0];
    std::vector<float*> at(plan_.buffers.size(), nullptr);
    for (std::size_t b = 0; b < plan_.buffers.size(); ++b) {
      const PlanBuffer& buf = plan_.buffers[b];
      if (buf.worker != w.rank) continue;
      const Chunk& ch = chunk_[w.rank].at(buf.chunk);
      const int64_t in = numel_of(ch.model->in_sample());
      const int j = buf.index;
      switch (buf.role) {
        case BufferRole::Input: at[b] = ch.x_->data() + offsets_[d].at(j) * in; break;
        case BufferRole::StageInput: at[b] = ch.x_->data() + (links_.empty() ? j * in * most : graph_at_[b]); break;
        case BufferRole::InputGrad: at[b] = ch.dx_->data() + (links_.empty() ? j * in * most : graph_at_[b]); break;
        case BufferRole::OutputGrad: at[b] = ch.dy_->data() + (links_.empty() ? 0 : graph_at_[b]); break;
        case BufferRole::Grads: at[b] = ch.model->grads().data(); break;
        default: break;
      }
    }
    return at;
  }

  // A net with skips: per worker and chunk, the values of its input slots, input gradients and
  // output gradients (the plan's buffers of each role, in the plan's order), and where each starts
  // (graph_at_, by plan buffer).
  void graph_layout() {
    graph_at_.assign(plan_.buffers.size(), 0);
    graph_numel_.assign(workers(), std::vector<std::vector<int64_t>>(chunks_, std::vector<int64_t>(3, 0)));
    const BufferRole roles[3] = {BufferRole::StageInput, BufferRole::InputGrad, BufferRole::OutputGrad};
    for (std::size_t b = 0; b < plan_.buffers.size(); ++b) {
      const PlanBuffer& buf = plan_.buffers[b];
      for (int r = 0; r < 3; ++r)
        if (buf.role == roles[r]) {
          int64_t& n = graph_numel_.at(buf.worker).at(buf.chunk)[r];
          graph_at_[b] = n, n += buf.bytes / static_cast<int64_t>(sizeof(float));
        }
    }
  }

  // One of a worker's model chunks (one, but for interleaved 1F1B): chunk 0 is the worker's own
  // model, Adam and buffers; a later one's are here.
  struct Chunk {
    Sequential* model = nullptr;
    Adam* adam = nullptr;
    std::unique_ptr<Adam> own_adam;
    Tensor x, dx, dy;  // chunks > 0: input slots, input-gradient pair, output gradient
    Tensor *x_ = nullptr, *dx_ = nullptr, *dy_ = nullptr;  // where the chunk's are
    int slots = 1;     // micro-batches it holds at once
  };

  int micro_;
  int replicas_;
  bool split_;  // ZB-H1: backward as B and W, two actions
  std::optional<ChunkSchedule> sched_;  // a chunked schedule (interleaved 1F1B, ...); none: one stage a worker
  int chunks_ = 1;                      // its chunks per worker
  std::vector<std::pair<int, int>> ranges_;  // per stage: its layers [begin, end)
  std::vector<StageLinks> links_;             // a net with skips: per stage, what it receives and sends
  std::vector<int64_t> graph_at_;             // a net with skips: per plan buffer, its offset (graph_layout)
  std::vector<std::vector<std::vector<int64_t>>> graph_numel_;  // per worker, chunk: its 3 tensors' values
  std::vector<int64_t> piece_, piece_offset_;  // per replica: its samples, and where they start
  std::vector<std::vector<int64_t>> micro_sizes_, offsets_;  // per replica: its micro-batches
  Plan plan_;                                 // the step, every worker's actions
  std::vector<std::vector<float*>> ptrs_;     // per local worker: its plan buffers' places
  std::vector<std::vector<Chunk>> chunk_;     // per worker: its chunks
  std::vector<std::vector<std::vector<int64_t>>> staging_;  // per worker, plan group: its bf16 transfer staging
};

}  // namespace

std::unique_ptr<Strategy> make_staged(const StrategyOptions& o, const std::string& name, int micro_batches) {
  return std::make_unique<Staged>(o, name, micro_batches, 1);
}

std::unique_ptr<Strategy> make_chunk_pipeline(const StrategyOptions& o, const std::string& name, ChunkSchedule sched) {
  return std::make_unique<Staged>(o, name, o.micro_batches, 1, std::move(sched));
}

std::string pipeline_name(Schedule schedule, bool recompute) {
  if (schedule == Schedule::ZeroBubble) return "pipeline-zb";  // a schedule of its own: no recompute, no dp x pp
  if (schedule == Schedule::Interleaved) return "pipeline-interleaved";
  return std::string("pipeline") + (schedule == Schedule::OneFOneB ? "-1f1b" : "") + (recompute ? "-recompute" : "");
}

bool parse_pipeline_name(const std::string& name, Schedule* schedule, bool* recompute) {
  for (Schedule sc : {Schedule::GPipe, Schedule::OneFOneB})
    for (bool rc : {false, true})
      if (name == pipeline_name(sc, rc)) {
        *schedule = sc, *recompute = rc;
        return true;
      }
  return false;
}

std::unique_ptr<Strategy> make_pipeline(const StrategyOptions& o) {
  return make_staged(o, pipeline_name(o.schedule, o.recompute), o.micro_batches);
}

std::string hybrid_name(int dp, int pp, Schedule schedule, bool recompute) {
  return fmt::format("dp{}xpp{}", dp, pp) + pipeline_name(schedule, recompute).substr(std::string("pipeline").size());
}

bool parse_hybrid_name(const std::string& name, int* dp, int* pp, Schedule* schedule, bool* recompute) {
  int d = 0, p = 0;
  std::size_t used = 0;
  if (!parse_factor_name(name, "dp", "xpp", &d, &p, &used)) return false;
  if (name != hybrid_name(d, p, Schedule::GPipe, false).append(name.substr(static_cast<std::size_t>(used))))
    return false;  // "dp02xpp2", "dp+2xpp2": not a name this program writes
  Schedule sc = Schedule::GPipe;
  bool rc = false;
  if (!parse_pipeline_name("pipeline" + name.substr(static_cast<std::size_t>(used)), &sc, &rc)) return false;
  *dp = d, *pp = p, *schedule = sc, *recompute = rc;
  return true;
}

std::unique_ptr<Strategy> make_hybrid(const StrategyOptions& o, int dp, int pp) {
  const std::string name = hybrid_name(dp, pp, o.schedule, o.recompute);
  if (o.devices != dp * pp)
    throw UsageError(fmt::format("{}: {} replicas of a {}-stage pipeline run on {} devices, got --devices {}", name, dp,
                                 pp, dp * pp, o.devices));
  return std::make_unique<Staged>(o, name, o.micro_batches, dp);
}

}  // namespace pb
