// pipeline: the layer list in contiguous stages, one per worker (as mp), and the batch in M
// torch.chunk micro-batches under a GPipe fill-drain schedule: every stage runs all forwards, then
// all backwards in reverse, accumulating gradients; stages run concurrently on their own threads.
#include "engine/check.h"
#include "engine/model.h"
#include "strategies/common.h"
#include "strategies/registry.h"

namespace pb {

namespace {

class Staged final : public MultiWorkerStrategy {
 public:
  Staged(const StrategyOptions& o, const std::string& name, int micro_batches)
      : MultiWorkerStrategy(o, name), micro_(micro_batches) {
    if (micro_ < 1) throw UsageError(fmt::format("{}: --micro-batches must be at least 1, got {}", name, micro_));
  }

  void setup(const NetPlan& plan, const std::vector<float>& params, const AdamParams& adam) override {
    comm_.reset();
    models_.clear();
    models_.resize(workers());
    adams_.clear();
    adams_.resize(workers());
    plan_ = plan;
    const auto ranges = split_stages(plan_, workers(), opts_.balance, name());
    start_workers([&](int s) {
      models_[s] = std::make_unique<Sequential>(plan_, ranges[s].first, ranges[s].second, backend(s));
      models_[s]->load_params(params);
      adams_[s] = std::make_unique<Adam>(backend(s), models_[s]->params().numel(), adam);
    });
    for (int s = 0; s < workers(); ++s) {
      stats_.workers[s].layer_begin = ranges[s].first;
      stats_.workers[s].layer_end = ranges[s].second;
    }
    comm_ = make_communicator(backends(workers()));
  }

  void load_batch(const std::vector<float>& x, const std::vector<float>& t, int64_t batch) override {
    if (micro_ > batch)
      throw UsageError(fmt::format("{}: {} micro-batches but the batch has only {} sample(s)", name(), micro_, batch));
    micro_sizes_ = chunk_sizes(batch, micro_);
    offsets_ = chunk_offsets(micro_sizes_);
    batch_ = batch;
    const int last = workers() - 1;
    const int64_t most = micro_sizes_[0];
    in_.assign(workers(), Tensor());
    dx_ = dyin_ = in_;
    on_workers(workers(), [&](int s) {
      const Sequential& m = *models_[s];
      const Device d = backend(s).device();
      // Stage inputs are kept per micro-batch until its backward (the slot refers to them); the
      // gradient buffers serve one micro-batch at a time, as send/recv return only when done.
      in_[s] = s == 0 ? Tensor::from_host({m.in_numel(batch)}, x, d) : Tensor::empty({m.in_numel(batch)}, d);
      if (s > 0) dx_[s] = Tensor::empty({m.in_numel(most)}, d);
      if (s < last) dyin_[s] = Tensor::empty({m.out_numel(most)}, d);
      if (s == last) {
        t_ = Tensor::from_host({m.out_numel(batch)}, t, d);
        dy_ = Tensor::empty({m.out_numel(batch)}, d);
        losses_ = Tensor::zeros({static_cast<int64_t>(micro_sizes_.size())}, d);
      }
    });
  }

  void step() override {
    PB_CHECK(!models_.empty() && !micro_sizes_.empty(), "{}: step() before setup() and load_batch()", name());
    const int stages = workers(), last = stages - 1, micro = static_cast<int>(micro_sizes_.size());
    const float scale = 2.0f / static_cast<float>(batch_ * numel_of(plan_.output));  // global mean
    Communicator& c = *comm_;
    run_step(stages, c, [&](int s) {
      Sequential& m = *models_[s];
      const int64_t in = numel_of(m.in_sample()), out = numel_of(m.out_sample());
      for (int k = 0; k < micro; ++k) {  // fill: forwards, activations sent on
        const int64_t n = micro_sizes_[k], at = offsets_[k];
        float* x = in_[s].data() + at * in;
        if (s > 0) c.recv(s, x, n * in, s - 1);
        const float* y = m.forward(x, n, k);
        if (s == last)
          backend(s).mse_loss_grad(n * out, y, t_.data() + at * out, scale, dy_.data() + at * out, losses_.data() + k);
        else
          c.send(s, y, n * out, s + 1);
      }
      for (int k = micro - 1; k >= 0; --k) {  // drain: backwards, gradients sent back
        const int64_t n = micro_sizes_[k];
        const float* dy = s == last ? dy_.data() + offsets_[k] * out : dyin_[s].data();
        if (s < last) c.recv(s, dyin_[s].data(), n * out, s + 1);
        m.backward(dy, s > 0 ? dx_[s].data() : nullptr, k != micro - 1, k);
        if (s > 0) c.send(s, dx_[s].data(), n * in, s - 1);
      }
      adams_[s]->step(m.params(), m.grads());
      stats_.workers[s].samples = batch_;
    });
    stats_.micro_batches = micro;
    stats_.bubble_fraction = static_cast<double>(stages - 1) / (micro + stages - 1);
  }

  double loss() override {
    const int last = workers() - 1;
    const double sum = sum_over_workers(workers(), [&](int s) {
      double l = 0;
      if (s == last)  // the loss lives on the last stage
        for (float v : losses_.to_host()) l += v;
      return l;
    });
    return sum / static_cast<double>(batch_ * numel_of(plan_.output));
  }

  std::vector<float> params() override {
    return params_from_pieces(plan_.param_count, [&](int s, std::vector<float>& full) { models_[s]->store_params(full); });
  }

 private:
  int micro_;
  NetPlan plan_;
  std::vector<std::unique_ptr<Sequential>> models_;
  std::vector<std::unique_ptr<Adam>> adams_;  // each stage steps its own parameter slice
  std::unique_ptr<Communicator> comm_;
  std::vector<int64_t> micro_sizes_, offsets_;
  int64_t batch_ = 0;
  std::vector<Tensor> in_, dx_, dyin_;  // per stage
  Tensor t_, dy_, losses_;              // last stage
};

}  // namespace

std::unique_ptr<Strategy> make_staged(const StrategyOptions& o, const std::string& name, int micro_batches) {
  return std::make_unique<Staged>(o, name, micro_batches);
}

std::unique_ptr<Strategy> make_pipeline(const StrategyOptions& o) { return make_staged(o, "pipeline", o.micro_batches); }

}  // namespace pb
