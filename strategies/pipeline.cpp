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
// needed (on GPUs the wait orders the stream, the host does not block).
#include "engine/check.h"
#include "strategies/batch.h"
#include "strategies/group.h"
#include "strategies/registry.h"
#include "strategies/stages.h"

namespace pb {

namespace {

constexpr int kNone = -1;

class Staged final : public GroupStrategy {
 public:
  Staged(const StrategyOptions& o, const std::string& name, int micro_batches)
      : GroupStrategy(o, name, true, /*replicas=*/false), micro_(micro_batches) {
    if (micro_ < 1) throw UsageError(fmt::format("{}: --micro-batches must be at least 1, got {}", name, micro_));
  }

 protected:
  void plan_workers() override {
    ranges_ = stage_ranges(plan(), workers(), opts_, micro_, group().first_local().device, name());
    staged_ = true;
    for (int s = 0; s < workers(); ++s) {
      group().worker(s).stats.layer_begin = ranges_[s].first;
      group().worker(s).stats.layer_end = ranges_[s].second;
    }
  }

  void setup_worker(Worker& w, const std::vector<float>& params, const AdamParams& adam) override {
    const auto [begin, end] = ranges_[w.rank];
    w.model = std::make_unique<Sequential>(plan(), begin, end, w.be());
    w.model->load_params(params);
    w.adam = std::make_unique<Adam>(w.be(), w.model->params().numel(), adam);  // its own slice
  }

  int plan_batch(int64_t batch) override {
    if (micro_ > batch)
      throw UsageError(fmt::format("{}: {} micro-batches but the batch has only {} sample(s)", name(), micro_, batch));
    micro_sizes_ = chunk_sizes(batch, micro_);
    offsets_ = chunk_offsets(micro_sizes_);
    const int micro = static_cast<int>(micro_sizes_.size());
    micro_batches_ = micro;
    bubble_fraction_ = static_cast<double>(workers() - 1) / (micro + workers() - 1);
    return workers();
  }

  // Micro-batches whose activations stage s holds at once: all M under GPipe, P - s under 1F1B.
  int in_flight(int s) const {
    const int micro = static_cast<int>(micro_sizes_.size());
    return opts_.schedule == Schedule::GPipe ? micro : std::min(micro, workers() - s);
  }

  // Stage 0 holds the whole batch (the data); a later stage one input buffer per micro-batch in
  // flight (the slot of its activations refers to it until its backward); two input-gradient
  // buffers, so one can travel while the next is written.
  void load_worker(Worker& w, const std::vector<float>& x, const std::vector<float>& t) override {
    const Sequential& m = *w.model;
    const int64_t b = batch(), most = micro_sizes_[0];
    const bool first = w.rank == 0, last = w.rank == workers() - 1;
    w.x = first ? Tensor::from_host({m.in_numel(b)}, x, w.device) : Tensor::empty({in_flight(w.rank) * m.in_numel(most)}, w.device);
    if (!first) w.dx = Tensor::empty({2 * m.in_numel(most)}, w.device);
    w.dy = Tensor::empty({m.out_numel(most)}, w.device);  // one micro-batch's output gradient
    if (last) {  // the loss of every micro-batch, on the last stage
      w.t = Tensor::from_host({m.out_numel(b)}, t, w.device);
      w.loss = Tensor::zeros({static_cast<int64_t>(micro_sizes_.size())}, w.device);
    }
  }

  void step(Worker& w, Group& g) override {
    const int s = w.rank, micro = static_cast<int>(micro_sizes_.size());
    Run r(w, g.comm(), s, s == workers() - 1, in_flight(s), micro);
    if (opts_.schedule == Schedule::GPipe) {
      for (int k = 0; k < micro; ++k) forward(r, k);
      for (int k = micro - 1; k >= 0; --k) backward(r, k, k == micro - 1);
    } else {
      const int warmup = std::min(workers() - 1 - s, micro);
      for (int k = 0; k < warmup; ++k) forward(r, k);
      for (int i = 0; i + warmup < micro; ++i) {
        forward(r, warmup + i);
        backward(r, i, i == 0);
      }
      for (int i = std::max(0, micro - warmup); i < micro; ++i) backward(r, i, i == 0);
    }
    for (int k = 0; k < micro; ++k) wait_send(r, k);  // recompute: the scratch slot's last one
    for (int64_t id : r.grad_send)
      if (id != kNone) r.c.wait_transfer(s, id);
    w.adam->step(w.model->params(), w.model->grads());
    w.stats.samples = batch();
  }

 private:
  // One stage's state during a step.
  struct Run {
    Run(Worker& w_, Communicator& c_, int s_, bool last_, int slots_, int micro)
        : w(w_), c(c_), s(s_), last(last_), slots(slots_), act_send(micro, kNone), out(micro, nullptr) {}
    Worker& w;
    Communicator& c;
    int s;
    bool last;
    int slots;                    // micro-batches in flight
    std::vector<int64_t> act_send;  // per micro-batch: its output's send, until waited for
    std::vector<const float*> out;  // per micro-batch: its output, valid until its slot's next forward
    int64_t grad_send[2] = {kNone, kNone};  // per input-gradient buffer
    int backwards = 0;
    int last_scratch_send = kNone;  // recompute: the micro-batch whose send reads the scratch slot
    int scratch = kNone;            // recompute: the micro-batch whose activations the scratch slot holds
  };

  // Activation slots of Sequential: one per micro-batch in flight, or with recompute a single
  // scratch slot for every forward and recomputation.
  int slot_of(const Run& r, int k) const { return opts_.recompute ? 0 : k % r.slots; }

  const float* input_of(Run& r, int k) {
    const int64_t in = numel_of(r.w.model->in_sample());
    return r.s == 0 ? r.w.x.data() + offsets_[k] * in : r.w.x.data() + (k % r.slots) * micro_sizes_[0] * in;
  }

  void wait_send(Run& r, int k) {
    if (k == kNone || r.act_send[k] == kNone) return;
    r.c.wait_transfer(r.s, r.act_send[k]);
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
    const int64_t n = micro_sizes_[k];
    const float* x = input_of(r, k);
    // Its buffer's previous micro-batch (k - slots) has had its backward: the schedule's order.
    if (r.s > 0) r.c.wait_transfer(r.s, r.c.recv_start(r.s, const_cast<float*>(x), n * numel_of(m.in_sample()), r.s - 1));
    free_scratch(r);
    const float* y = r.out[k] = m.forward(x, n, slot_of(r, k));
    r.scratch = k;
    if (r.last) return;  // the loss is taken with the backward, from the slot (or recomputed)
    r.act_send[k] = r.c.send_start(r.s, y, n * numel_of(m.out_sample()), r.s + 1);
    if (opts_.recompute) r.last_scratch_send = k;
  }

  void backward(Run& r, int k, bool first) {
    Sequential& m = *r.w.model;
    Worker& w = r.w;
    const int64_t n = micro_sizes_[k], in = numel_of(m.in_sample()), out = numel_of(m.out_sample());
    if (!r.last) {  // the output gradient from the next stage: it also proves the output arrived
      r.c.wait_transfer(r.s, r.c.recv_start(r.s, w.dy.data(), n * out, r.s + 1));
      if (!opts_.recompute) wait_send(r, k);
    }
    // Recomputed unless the scratch slot still holds this micro-batch (its backward follows its
    // forward directly: the last stage under 1F1B, the last micro-batch under GPipe).
    if (opts_.recompute && r.scratch != k) {
      free_scratch(r);
      r.out[k] = m.forward(input_of(r, k), n, slot_of(r, k));
      r.scratch = k;
    }
    if (r.last) {
      auto loss_span = w.tracer.compute(Phase::Loss, k, [] { return std::string("mse loss"); });
      const float* y = r.out[k];
      w.be().mse_loss_grad(n * out, y, w.t.data() + offsets_[k] * out, grad_scale(), w.dy.data(), w.loss.data() + k);
    }
    float* dx = nullptr;
    const int buf = r.backwards++ % 2;
    if (r.s > 0) {
      if (r.grad_send[buf] != kNone) r.c.wait_transfer(r.s, r.grad_send[buf]);  // the buffer's last gradient left
      r.grad_send[buf] = kNone;
      dx = w.dx.data() + buf * micro_sizes_[0] * in;
    }
    m.backward(w.dy.data(), dx, !first, slot_of(r, k));
    if (r.s > 0) r.grad_send[buf] = r.c.send_start(r.s, dx, n * in, r.s - 1);
  }

  int micro_;
  std::vector<std::pair<int, int>> ranges_;  // per stage: its layers [begin, end)
  std::vector<int64_t> micro_sizes_, offsets_;
};

}  // namespace

std::unique_ptr<Strategy> make_staged(const StrategyOptions& o, const std::string& name, int micro_batches) {
  return std::make_unique<Staged>(o, name, micro_batches);
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

}  // namespace pb
