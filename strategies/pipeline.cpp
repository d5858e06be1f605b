// pipeline: the layer list in contiguous stages, one per worker (as mp), and the batch in M
// torch.chunk micro-batches, stages running concurrently on their own threads and accumulating
// gradients. Schedules: GPipe fill-drain (every forward, then every backward in reverse) or 1F1B
// (PipeDream-flush, as Megatron: stage s runs min(P-1-s, M) warm-up forwards, then one forward
// and one backward alternately, then the remaining backwards), which holds at most P-s
// micro-batches' activations where GPipe holds M. With recompute a stage keeps only its inputs
// and runs each micro-batch's forward again just before its backward.
//
// Sends are started and waited for only when their buffer is needed again, so a stage goes on
// with its next micro-batch while its output travels; receives complete when their values are
// needed (on GPUs the wait orders the stream, the host does not block). The sends that end a
// compute and the receive that starts the next go out as one group (Communicator::group_start),
// as Megatron's batched p2p: under 1F1B a stage sends an activation and receives a gradient while
// its peer sends that gradient and receives the next activation, which on one NCCL stream in
// any other grouping would wait on each other (tests/test_nccl_order.cpp).
//
// dp x pp hybrids (dp<D>xpp<P>): D replicas of the P-stage pipeline, worker r being stage r % P
// of replica r / P. Each replica takes its torch.chunk piece of the batch and cuts it into
// micro-batches; after its last backward, each stage's gradients are all-reduced (summed) among
// the D workers that hold it (a communicator per stage), and every worker steps its stage.
#include <algorithm>
#include <cstdio>

#include "engine/check.h"
#include "strategies/batch.h"
#include "strategies/group.h"
#include "strategies/registry.h"
#include "strategies/rules.h"
#include "strategies/stages.h"

namespace pb {

namespace {

constexpr int kNone = -1;

class Staged final : public GroupStrategy {
 public:
  Staged(const StrategyOptions& o, const std::string& name, int micro_batches, int replicas)
      : GroupStrategy(o, name, true, /*replicas=*/false), micro_(micro_batches), replicas_(replicas) {
    if (micro_ < 1) throw UsageError(fmt::format("{}: --micro-batches must be at least 1, got {}", name, micro_));
    PB_CHECK(replicas_ >= 1 && o.devices % replicas_ == 0, "{}: {} replicas over {} workers", name, replicas_, o.devices);
  }

  std::vector<float> params() override { return group().params_from_pieces(plan().param_count, stages()); }

 protected:
  void plan_workers() override {
    // By time: profiled at one micro-batch of one replica's piece.
    ranges_ = stage_ranges(plan(), stages(), opts_, micro_ * replicas_, group().first_local().device, name());
    staged_ = true;
    for (int r = 0; r < workers(); ++r) {
      group().worker(r).stats.layer_begin = ranges_[stage_of(r)].first;
      group().worker(r).stats.layer_end = ranges_[stage_of(r)].second;
    }
  }

  void setup_worker(Worker& w, const std::vector<float>& params, const AdamParams& adam) override {
    const auto [begin, end] = ranges_[stage_of(w.rank)];
    w.model = std::make_unique<Sequential>(plan(), begin, end, w.be());
    w.model->load_params(params);
    w.adam = std::make_unique<Adam>(w.be(), w.model->params().numel(), adam);  // its own slice
  }

  int plan_batch(int64_t batch) override {
    piece_ = replica_pieces(batch, replicas_, name());
    piece_offset_ = chunk_offsets(piece_);
    micro_sizes_ = replica_micro_batches(piece_, micro_, opts_.cap_micro_batches, batch, name());
    offsets_.clear();
    for (const auto& sizes : micro_sizes_) offsets_.push_back(chunk_offsets(sizes));
    micro_batches_ = static_cast<int>(micro_sizes_[0].size());
    bubble_fraction_ = static_cast<double>(stages() - 1) / (micro_batches_ + stages() - 1);
    if (replicas_ > 1) {  // the workers of each stage, for its gradients' all-reduce
      std::vector<std::vector<int>> parts(stages());
      for (int r = 0; r < workers(); ++r) parts[stage_of(r)].push_back(r);
      group().connect_parts("stage", parts);
    }
    return workers();
  }

  int stages() const { return workers() / replicas_; }
  int stage_of(int rank) const { return rank % stages(); }
  int replica_of(int rank) const { return rank / stages(); }

  // Micro-batches whose activations a worker holds at once: all M under GPipe, P - s under 1F1B.
  int in_flight(int rank) const {
    return pipeline_slots(opts_.schedule, stages(), stage_of(rank), static_cast<int>(micro_sizes_[replica_of(rank)].size()));
  }

  // Stage 0 holds its replica's piece of the batch (the data); a later stage one input buffer per micro-batch in
  // flight (the slot of its activations refers to it until its backward); two input-gradient
  // buffers, so one can travel while the next is written.
  void load_worker(Worker& w, const std::vector<float>& x, const std::vector<float>& t) override {
    const Sequential& m = *w.model;
    const int d = replica_of(w.rank);
    const int64_t b = piece_[d], at = piece_offset_[d], most = micro_sizes_[d][0];
    const bool first = stage_of(w.rank) == 0, last = stage_of(w.rank) == stages() - 1;
    auto piece = [&](const std::vector<float>& v, int64_t per_sample) {  // the replica's samples
      return replicas_ == 1 ? v : std::vector<float>(v.begin() + at * per_sample, v.begin() + (at + b) * per_sample);
    };
    w.x = first ? Tensor::from_host({m.in_numel(b)}, piece(x, m.in_numel(1)), w.device)
                : Tensor::empty({in_flight(w.rank) * m.in_numel(most)}, w.device);
    if (!first) w.dx = Tensor::empty({2 * m.in_numel(most)}, w.device);
    w.dy = Tensor::empty({m.out_numel(most)}, w.device);  // one micro-batch's output gradient
    if (last) {  // the loss of every micro-batch, on the last stage
      w.t = Tensor::from_host({m.out_numel(b)}, piece(t, m.out_numel(1)), w.device);
      w.loss = Tensor::zeros({static_cast<int64_t>(micro_sizes_[d].size())}, w.device);
    }
  }

  void step(Worker& w, Group& g) override {
    const int s = stage_of(w.rank), d = replica_of(w.rank);
    const int micro = static_cast<int>(micro_sizes_[d].size());
    Run r(w, g.comm(), s, s == stages() - 1, in_flight(w.rank), micro_sizes_[d], offsets_[d]);
    for (const PipeOp& op : pipeline_ops(opts_.schedule, opts_.recompute, stages(), s, micro))
      op.forward ? forward(r, op.micro) : backward(r, op.micro, op.first_backward, op.recompute);
    close(r);
    for (int k = 0; k < micro; ++k) wait_send(r, k);  // recompute: the scratch slot's last one
    for (int64_t id : r.grad_send)
      if (id != kNone) r.c.wait_transfer(r.rank, id);
    if (replicas_ > 1) {
      Tensor& grads = w.model->grads();
      g.part_comm("stage", w.rank).all_reduce(g.part_rank("stage", w.rank), grads.data(), grads.numel());
    }
    w.adam->step(w.model->params(), w.model->grads());
    w.stats.samples = piece_[d];
  }

 private:
  // One stage's state during a step.
  struct Run {
    Run(Worker& w_, Communicator& c_, int s_, bool last_, int slots_, const std::vector<int64_t>& sizes_,
        const std::vector<int64_t>& offsets_)
        : w(w_), c(c_), rank(w_.rank), s(s_), last(last_), slots(slots_), sizes(sizes_), offsets(offsets_),
          act_send(sizes_.size(), kNone), out(sizes_.size(), nullptr) {}
    Worker& w;
    Communicator& c;
    int rank;  // in c; the previous stage is rank - 1, the next rank + 1
    int s;     // the stage
    bool last;
    int slots;                    // micro-batches in flight
    const std::vector<int64_t>& sizes;    // the replica's micro-batches
    const std::vector<int64_t>& offsets;  // and where each starts in its piece
    std::vector<int64_t> act_send;  // per micro-batch: its output's send, until waited for
    std::vector<const float*> out;  // per micro-batch: its output, valid until its slot's next forward
    int64_t grad_send[2] = {kNone, kNone};  // per input-gradient buffer
    int backwards = 0;
    int last_scratch_send = kNone;  // recompute: the micro-batch whose send reads the scratch slot
    bool grouped = false;           // a group of starts is open
  };

  // The group the last compute's sends opened, for the next compute's receive to join.
  void open(Run& r) {
    if (!r.grouped) r.c.group_start(r.rank);
    r.grouped = true;
  }
  void close(Run& r) {
    if (r.grouped) r.c.group_end(r.rank);
    r.grouped = false;
  }
  // The receive a compute needs first, grouped with the previous compute's sends; complete before
  // the compute (on GPUs: ordered before it).
  void receive(Run& r, float* buf, int64_t n, int peer) {
    open(r);
    const int64_t id = r.c.recv_start(r.rank, buf, n, peer);
    close(r);
    r.c.wait_transfer(r.rank, id);
  }

  // Activation slots of Sequential: one per micro-batch in flight, or with recompute a single
  // scratch slot for every forward and recomputation.
  int slot_of(const Run& r, int k) const { return opts_.recompute ? 0 : k % r.slots; }

  const float* input_of(Run& r, int k) {
    const int64_t in = numel_of(r.w.model->in_sample());
    return r.s == 0 ? r.w.x.data() + r.offsets[k] * in : r.w.x.data() + (k % r.slots) * r.sizes[0] * in;
  }

  void wait_send(Run& r, int k) {
    if (k == kNone || r.act_send[k] == kNone) return;
    r.c.wait_transfer(r.rank, r.act_send[k]);
    r.act_send[k] = kNone;
  }

  // The scratch slot is about to be overwritten: the output it holds must have left.
  void free_scratch(Run& r) {
    if (!opts_.recompute) return;
    wait_send(r, r.last_scratch_send);
    r.last_scratch_send = kNone;
  }

  void forward(Run& r, int k) {
    Sequential& m = *r.w.model;
    const int64_t n = r.sizes[k];
    const float* x = input_of(r, k);
    // Its buffer's previous micro-batch (k - slots) has had its backward: the schedule's order.
    if (r.s > 0) receive(r, const_cast<float*>(x), n * numel_of(m.in_sample()), r.rank - 1);
    close(r);
    free_scratch(r);
    const float* y = r.out[k] = m.forward(x, n, slot_of(r, k));
    if (r.last) return;  // the loss is taken with the backward, from the slot (or recomputed)
    open(r);
    r.act_send[k] = r.c.send_start(r.rank, y, n * numel_of(m.out_sample()), r.rank + 1);
    if (opts_.recompute) r.last_scratch_send = k;
  }

  void backward(Run& r, int k, bool first, bool recompute) {
    Sequential& m = *r.w.model;
    Worker& w = r.w;
    const int64_t n = r.sizes[k], in = numel_of(m.in_sample()), out = numel_of(m.out_sample());
    if (!r.last) {  // the output gradient from the next stage: it also proves the output arrived
      receive(r, w.dy.data(), n * out, r.rank + 1);
      if (!opts_.recompute) wait_send(r, k);
    }
    close(r);
    if (recompute) {  // the scratch slot holds another micro-batch (pipeline_ops)
      free_scratch(r);
      r.out[k] = m.forward(input_of(r, k), n, slot_of(r, k));
    }
    if (r.last) {
      auto loss_span = w.tracer.compute(Phase::Loss, k, [] { return std::string("mse loss"); });
      const float* y = r.out[k];
      w.be().mse_loss_grad(n * out, y, w.t.data() + r.offsets[k] * out, grad_scale(), w.dy.data(), w.loss.data() + k);
    }
    float* dx = nullptr;
    const int buf = r.backwards++ % 2;
    if (r.s > 0) {
      if (r.grad_send[buf] != kNone) r.c.wait_transfer(r.rank, r.grad_send[buf]);  // the buffer's last gradient left
      r.grad_send[buf] = kNone;
      dx = w.dx.data() + buf * r.sizes[0] * in;
    }
    m.backward(w.dy.data(), dx, !first, slot_of(r, k));
    if (r.s > 0) {
      open(r);
      r.grad_send[buf] = r.c.send_start(r.rank, dx, n * in, r.rank - 1);
    }
  }

  int micro_;
  int replicas_;
  std::vector<std::pair<int, int>> ranges_;  // per stage: its layers [begin, end)
  std::vector<int64_t> piece_, piece_offset_;  // per replica: its samples, and where they start
  std::vector<std::vector<int64_t>> micro_sizes_, offsets_;  // per replica: its micro-batches
};

}  // namespace

std::unique_ptr<Strategy> make_staged(const StrategyOptions& o, const std::string& name, int micro_batches) {
  return std::make_unique<Staged>(o, name, micro_batches, 1);
}

std::string pipeline_name(Schedule schedule, bool recompute) {
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
  int d = 0, p = 0, used = 0;
  if (std::sscanf(name.c_str(), "dp%dxpp%d%n", &d, &p, &used) != 2 || d < 1 || p < 1) return false;
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
