// regular: one device, the whole batch (the baseline every speedup is measured against). The
// one-worker case of the group machinery: its communicator is the no-op one, and its step runs
// on the calling thread.
#include "engine/check.h"
#include "engine/process.h"
#include "strategies/executor.h"
#include "strategies/group.h"
#include "strategies/plan_gen.h"
#include "strategies/registry.h"

namespace pb {

namespace {

class Regular final : public GroupStrategy {
 public:
  explicit Regular(const StrategyOptions& o) : GroupStrategy(o, "regular", false, /*replicas=*/true) {}

 protected:
  void setup_worker(Worker& w, const std::vector<float>& params, const AdamParams& adam) override {
    w.model = std::make_unique<Sequential>(plan(), 0, static_cast<int>(plan().layers.size()), w.be());
    w.model->load_params(params);
    w.adam = std::make_unique<Adam>(w.be(), w.model->params().numel(), adam);
    w.loss = Tensor::zeros({1}, w.device);
  }

  int plan_batch(int64_t batch) override {
    plan_ = plan_regular(plan(), opts_, batch);
    return 1;
  }

  void load_worker(Worker& w, const std::vector<float>& x, const std::vector<float>& t) override {
    w.x = Tensor::from_host({static_cast<int64_t>(x.size())}, x, w.device);
    w.t = Tensor::from_host({static_cast<int64_t>(t.size())}, t, w.device);
    w.dy = Tensor::empty({w.model->out_numel(batch())}, w.device);
  }

  // Its plan (plan_regular) run by the executor: forward, loss, backward, Adam; no communication.
  void step(Worker& w, Group&) override {
    Sequential& m = *w.model;
    const float* y = nullptr;
    PlanExecutor::Binding b;
    b.tracer = &w.tracer;
    b.compute = [&](const Action& a) {
      switch (a.kind) {
        case ActionKind::Forward: y = m.forward(w.x.data(), batch()); break;
        case ActionKind::Loss: {
          auto loss_span = w.tracer.compute(Phase::Loss, 0, [] { return std::string("mse loss"); });
          w.be().mse_loss_grad(m.out_numel(batch()), y, w.t.data(), grad_scale(), w.dy.data(), w.loss.data());
          break;
        }
        case ActionKind::BackwardWeights: break;  // one call computes both backwards
        case ActionKind::BackwardData: m.backward(w.dy.data(), nullptr, false); break;
        case ActionKind::Optimizer: w.adam->step(m.params(), m.grads()); break;
        default: PB_CHECK(false, "regular cannot run {}", describe(plan_, 0, a.id));
      }
    };
    PlanExecutor(plan_, 0, std::move(b)).run();
    w.stats.samples = batch();
  }

 public:
  const Plan* step_plan() const override { return &plan_; }

 private:
  Plan plan_;  // the step
};

}  // namespace

std::unique_ptr<Strategy> make_regular(const StrategyOptions& o) {
  if (o.devices != 1) throw UsageError(fmt::format("strategy regular runs on one device, got --devices {}", o.devices));
  if (multi_process())
    throw UsageError(fmt::format("strategy regular runs on one device, but this is an MPI job of {} processes; "
                                 "run it without mpirun", process().size));
  return std::make_unique<Regular>(o);
}

}  // namespace pb
