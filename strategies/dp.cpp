// dp: torch.nn.DataParallel. The batch sits on device 0 and is scattered in torch.chunk pieces;
// parameters are broadcast from device 0 every step; outputs are gathered to device 0, where the
// loss is computed; gradients are reduced to device 0, which alone runs the optimizer.
#include "engine/check.h"
#include "engine/model.h"
#include "strategies/common.h"
#include "strategies/registry.h"

namespace pb {

namespace {

class DataParallel final : public MultiWorkerStrategy {
 public:
  explicit DataParallel(const StrategyOptions& o) : MultiWorkerStrategy(o, "dp", /*across_processes=*/false) {}

  void setup(const NetPlan& plan, const std::vector<float>& params, const AdamParams& adam) override {
    comm_.reset();
    models_.clear();
    models_.resize(workers());
    plan_ = plan;
    start_workers([&](int i) {
      models_[i] = std::make_unique<Sequential>(plan_, 0, static_cast<int>(plan_.layers.size()), backend(i));
      if (i > 0) return;  // replicas get their parameters from device 0 every step
      models_[0]->load_params(params);
      adam_ = std::make_unique<Adam>(backend(0), models_[0]->params().numel(), adam);
      loss_ = Tensor::zeros({1}, backend(0).device());
    });
  }

  void load_batch(const std::vector<float>& x, const std::vector<float>& t, int64_t batch) override {
    chunks_ = split_batch(batch, workers(), name());
    offsets_ = chunk_offsets(chunks_);
    batch_ = batch;
    const int used = static_cast<int>(chunks_.size());
    const int64_t in = numel_of(plan_.input), out = numel_of(plan_.output);
    xin_.assign(used, Tensor());
    dyin_.assign(used, Tensor());
    on_workers(used, [&](int i) {
      const Device d = backend(i).device();
      if (i == 0) {  // the whole batch, its target and the gathered output live on device 0
        x_ = Tensor::from_host({batch * in}, x, d);
        t_ = Tensor::from_host({batch * out}, t, d);
        y_ = Tensor::empty({batch * out}, d);
        dy_ = Tensor::empty({batch * out}, d);
      } else {
        xin_[i] = Tensor::empty({chunks_[i] * in}, d);
        dyin_[i] = Tensor::empty({chunks_[i] * out}, d);
      }
    });
    if (!comm_ || comm_->size() != used) comm_ = make_communicator(backends(used));
  }

  void step() override {
    PB_CHECK(!models_.empty() && !chunks_.empty(), "{}: step() before setup() and load_batch()", name());
    const int used = static_cast<int>(chunks_.size());
    const int64_t in = numel_of(plan_.input), out = numel_of(plan_.output);
    const int64_t np = models_[0]->params().numel();
    const float scale = 2.0f / static_cast<float>(batch_ * out);
    Communicator& c = *comm_;
    run_step(used, c, [&](int i) {
      Sequential& m = *models_[i];
      const int64_t n = chunks_[i];
      c.broadcast(i, m.params().data(), np, 0);  // replicate
      // Scatter the input; then forward on the chunk.
      const float* x = i == 0 ? x_.data() : xin_[i].data();
      if (i == 0)
        for (int j = 1; j < used; ++j) c.send(0, x_.data() + offsets_[j] * in, chunks_[j] * in, j);
      else
        c.recv(i, xin_[i].data(), n * in, 0);
      const float* y = m.forward(x, n);
      // Gather the outputs to device 0, take the loss of the whole batch there, scatter its gradient.
      const float* dy = nullptr;
      if (i == 0) {
        const Device d = backend(0).device();
        copy_bytes(d, y_.data(), d, y, static_cast<std::size_t>(n * out) * sizeof(float));
        for (int j = 1; j < used; ++j) c.recv(0, y_.data() + offsets_[j] * out, chunks_[j] * out, j);
        backend(0).mse_loss_grad(batch_ * out, y_.data(), t_.data(), scale, dy_.data(), loss_.data());
        for (int j = 1; j < used; ++j) c.send(0, dy_.data() + offsets_[j] * out, chunks_[j] * out, j);
        dy = dy_.data();
      } else {
        c.send(i, y, n * out, 0);
        c.recv(i, dyin_[i].data(), n * out, 0);
        dy = dyin_[i].data();
      }
      m.backward(dy, nullptr, false);
      c.reduce(i, m.grads().data(), np, 0);
      if (i == 0) adam_->step(m.params(), m.grads());
      stats_.workers[i].samples = n;
    });
  }

  double loss() override {
    return static_cast<double>(loss_.to_host()[0]) / static_cast<double>(batch_ * numel_of(plan_.output));
  }

  std::vector<float> params() override {
    std::vector<float> full(static_cast<std::size_t>(plan_.param_count));
    models_[0]->store_params(full);
    return full;
  }

 private:
  NetPlan plan_;
  std::vector<std::unique_ptr<Sequential>> models_;
  std::unique_ptr<Adam> adam_;  // device 0 only
  std::unique_ptr<Communicator> comm_;
  std::vector<int64_t> chunks_, offsets_;
  int64_t batch_ = 0;
  Tensor x_, t_, y_, dy_, loss_;  // device 0
  std::vector<Tensor> xin_, dyin_;  // replicas' input chunk and output gradient
};

}  // namespace

std::unique_ptr<Strategy> make_dp(const StrategyOptions& o) { return std::make_unique<DataParallel>(o); }

}  // namespace pb
