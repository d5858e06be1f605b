// regular: one device, the whole batch (the baseline every speedup is measured against).
#include <chrono>

#include "engine/check.h"
#include "engine/mpi/mpi_env.h"
#include "engine/model.h"
#include "strategies/registry.h"

namespace pb {

namespace {

class Regular final : public Strategy {
 public:
  explicit Regular(const StrategyOptions& o) : opts_(o) {
    if (o.devices != 1)
      throw UsageError(fmt::format("strategy regular runs on one device, got --devices {}", o.devices));
    if (multi_process())
      throw UsageError(fmt::format("strategy regular runs on one device, but this is an MPI job of {} processes; "
                                   "run it without mpirun", process().size));
  }
  std::string name() const override { return "regular"; }

  void setup(const NetPlan& plan, const std::vector<float>& params, const AdamParams& adam) override {
    plan_ = plan;
    const Device d{opts_.kind, 0};
    backend_ = make_backend(d, opts_.backend);
    model_ = std::make_unique<Sequential>(plan_, 0, static_cast<int>(plan_.layers.size()), *backend_);
    model_->load_params(params);
    adam_ = std::make_unique<Adam>(*backend_, model_->params().numel(), adam);
    loss_ = Tensor::zeros({1}, d);
  }

  void load_batch(const std::vector<float>& x, const std::vector<float>& t, int64_t batch) override {
    const Device d = backend_->device();
    batch_ = batch;
    x_ = Tensor::from_host({static_cast<int64_t>(x.size())}, x, d);
    t_ = Tensor::from_host({static_cast<int64_t>(t.size())}, t, d);
    dy_ = Tensor::empty({model_->out_numel(batch)}, d);
  }

  void step() override {
    const auto t0 = std::chrono::steady_clock::now();
    Backend& be = *backend_;
    const int64_t n = model_->out_numel(batch_);
    const float* y = model_->forward(x_.data(), batch_);
    be.mse_loss_grad(n, y, t_.data(), 2.0f / static_cast<float>(n), dy_.data(), loss_.data());
    model_->backward(dy_.data(), nullptr, false);
    adam_->step(model_->params(), model_->grads());
    be.synchronize();
    compute_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  double loss() override {
    return static_cast<double>(loss_.to_host()[0]) / static_cast<double>(model_->out_numel(batch_));
  }

  std::vector<float> params() override {
    std::vector<float> full(static_cast<std::size_t>(plan_.param_count));
    model_->store_params(full);
    return full;
  }

  StepStats stats() const override {
    StepStats s;
    WorkerStats w;
    w.device = backend_->device().str();
    w.samples = batch_;
    w.compute_s = compute_s_;
    w.peak_bytes = allocator_for(backend_->device()).peak_bytes();
    s.workers.push_back(w);
    s.workers_used = 1;
    return s;
  }

 private:
  StrategyOptions opts_;
  NetPlan plan_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Sequential> model_;
  std::unique_ptr<Adam> adam_;
  Tensor x_, t_, dy_, loss_;
  int64_t batch_ = 0;
  double compute_s_ = 0;
};

}  // namespace

std::unique_ptr<Strategy> make_regular(const StrategyOptions& o) { return std::make_unique<Regular>(o); }

}  // namespace pb
