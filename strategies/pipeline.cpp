// pipeline: the layer list in contiguous stages, one per worker (as mp), and the batch in M
// torch.chunk micro-batches under a GPipe fill-drain schedule: every stage runs all forwards, then
// all backwards in reverse, accumulating gradients; stages run concurrently on their own threads.
#include "engine/check.h"
#include "strategies/batch.h"
#include "strategies/group.h"
#include "strategies/registry.h"
#include "strategies/stages.h"

namespace pb {

namespace {

class Staged final : public GroupStrategy {
 public:
  Staged(const StrategyOptions& o, const std::string& name, int micro_batches)
      : GroupStrategy(o, name, true, /*replicas=*/false), micro_(micro_batches) {
    if (micro_ < 1) throw UsageError(fmt::format("{}: --micro-batches must be at least 1, got {}", name, micro_));
  }

 protected:
  void plan_workers() override {
    ranges_ = stage_ranges(plan(), workers(), opts_, micro_, group().first_local().device, name());
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

  // Stage inputs are kept per micro-batch until its backward (the slot refers to them); the
  // gradient buffers serve one micro-batch at a time, as send/recv return only when done.
  void load_worker(Worker& w, const std::vector<float>& x, const std::vector<float>& t) override {
    const Sequential& m = *w.model;
    const int64_t b = batch(), most = micro_sizes_[0];
    const bool first = w.rank == 0, last = w.rank == workers() - 1;
    w.x = first ? Tensor::from_host({m.in_numel(b)}, x, w.device) : Tensor::empty({m.in_numel(b)}, w.device);
    if (!first) w.dx = Tensor::empty({m.in_numel(most)}, w.device);
    if (last) {  // the loss of every micro-batch, on the last stage
      w.t = Tensor::from_host({m.out_numel(b)}, t, w.device);
      w.dy = Tensor::empty({m.out_numel(b)}, w.device);
      w.loss = Tensor::zeros({static_cast<int64_t>(micro_sizes_.size())}, w.device);
    } else {  // the gradient of one micro-batch's output, from the next stage
      w.dy = Tensor::empty({m.out_numel(most)}, w.device);
    }
  }

  void step(Worker& w, Group& g) override {
    const int s = w.rank, last = workers() - 1, micro = static_cast<int>(micro_sizes_.size());
    Sequential& m = *w.model;
    Communicator& c = g.comm();
    const int64_t in = numel_of(m.in_sample()), out = numel_of(m.out_sample());
    for (int k = 0; k < micro; ++k) {  // fill: forwards, activations sent on
      const int64_t n = micro_sizes_[k], at = offsets_[k];
      float* x = w.x.data() + at * in;
      if (s > 0) c.recv(s, x, n * in, s - 1);
      const float* y = m.forward(x, n, k);
      if (s == last)
        w.be().mse_loss_grad(n * out, y, w.t.data() + at * out, grad_scale(), w.dy.data() + at * out, w.loss.data() + k);
      else
        c.send(s, y, n * out, s + 1);
    }
    for (int k = micro - 1; k >= 0; --k) {  // drain: backwards, gradients sent back
      const int64_t n = micro_sizes_[k];
      const float* dy = s == last ? w.dy.data() + offsets_[k] * out : w.dy.data();
      if (s < last) c.recv(s, w.dy.data(), n * out, s + 1);
      m.backward(dy, s > 0 ? w.dx.data() : nullptr, k != micro - 1, k);
      if (s > 0) c.send(s, w.dx.data(), n * in, s - 1);
    }
    w.adam->step(m.params(), m.grads());
    w.stats.samples = batch();
  }

 private:
  int micro_;
  std::vector<std::pair<int, int>> ranges_;  // per stage: its layers [begin, end)
  std::vector<int64_t> micro_sizes_, offsets_;
};

}  // namespace

std::unique_ptr<Strategy> make_staged(const StrategyOptions& o, const std::string& name, int micro_batches) {
  return std::make_unique<Staged>(o, name, micro_batches);
}

std::unique_ptr<Strategy> make_pipeline(const StrategyOptions& o) { return make_staged(o, "pipeline", o.micro_batches); }

}  // namespace pb
