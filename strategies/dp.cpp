// dp: torch.nn.DataParallel. The batch sits on device 0 and is scattered in torch.chunk pieces;
// parameters are broadcast from device 0 every step; outputs are gathered to device 0, where the
// loss is computed; gradients are reduced to device 0, which alone runs the optimizer.
#include "engine/check.h"
#include "strategies/batch.h"
#include "strategies/executor.h"
#include "strategies/group.h"
#include "strategies/plan_gen.h"
#include "strategies/registry.h"

namespace pb {

namespace {

class DataParallel final : public GroupStrategy {
 public:
  explicit DataParallel(const StrategyOptions& o) : GroupStrategy(o, "dp", /*across_processes=*/false, true) {}

 protected:
  void setup_worker(Worker& w, const std::vector<float>& params, const AdamParams& adam) override {
    w.model = std::make_unique<Sequential>(plan(), 0, static_cast<int>(plan().layers.size()), w.be());
    if (w.rank > 0) return;  // replicas get their parameters from device 0 every step
    w.model->load_params(params);
    w.adam = std::make_unique<Adam>(w.be(), w.model->params().numel(), adam);
    w.loss = Tensor::zeros({1}, w.device);
  }

  int plan_batch(int64_t batch) override {
    chunks_ = split_batch(batch, workers(), name());
    offsets_ = chunk_offsets(chunks_);
    plan_ = plan_dp(plan(), opts_, batch);
    return static_cast<int>(chunks_.size());
  }

  void load_worker(Worker& w, const std::vector<float>& x, const std::vector<float>& t) override {
    const int64_t in = numel_of(plan().input), out = numel_of(plan().output), b = batch();
    if (w.rank == 0) {  // the whole batch, its target and the gathered output live on device 0
      w.x = Tensor::from_host({b * in}, x, w.device);
      w.t = Tensor::from_host({b * out}, t, w.device);
      w.y = Tensor::empty({b * out}, w.device);
      w.dy = Tensor::empty({b * out}, w.device);
    } else {  // a replica's input chunk and output gradient
      w.x = Tensor::empty({chunks_[w.rank] * in}, w.device);
      w.dy = Tensor::empty({chunks_[w.rank] * out}, w.device);
    }
  }

  // The worker's plan (plan_dp) run by the executor: broadcast the parameters, scatter the input,
  // forward, gather the outputs to device 0 for the loss, scatter its gradient, backward, reduce
  // the gradients to device 0, which steps.
  void step(Worker& w, Group& g) override {
    const int i = w.rank;
    const int64_t in = numel_of(plan().input), out = numel_of(plan().output), n = chunks_[i];
    Sequential& m = *w.model;
    const float* y = nullptr;
    const std::vector<PlanBuffer>& bufs = plan_.buffers;
    PlanExecutor::Binding b;
    b.tracer = &w.tracer;
    b.at = [&](const Action& a, int buf, bool) -> float* {
      // Device 0's piece of the batch for peer j: its chunk's samples.
      const int64_t at = i == 0 && a.peer > 0 ? offsets_[a.peer] : 0;
      switch (bufs[buf].role) {
        case BufferRole::Params: return m.params().data();
        case BufferRole::Grads: return m.grads().data();
        case BufferRole::Input: return w.x.data() + at * in;
        case BufferRole::Output: return w.y.data() + at * out;
        case BufferRole::OutputGrad: return w.dy.data() + at * out;
        case BufferRole::Activations: return const_cast<float*>(y);  // the forward's output
        default: break;
      }
      PB_CHECK(false, "dp: worker {} has no buffer {} for {}", i, buffer_label(bufs[buf]), describe(plan_, i, a.id));
      return nullptr;
    };
    b.comm = [&](int) -> std::pair<Communicator*, int> { return {&g.comm(), i}; };
    b.compute = [&](const Action& a) {
      switch (a.kind) {
        case ActionKind::Forward: y = m.forward(w.x.data(), n); break;
        case ActionKind::Copy:  // on the compute queue after the forward that made y, before the loss reads it
          w.be().copy(w.device, w.y.data(), w.device, y, static_cast<std::size_t>(n * out) * sizeof(float));
          break;
        case ActionKind::Loss: {
          auto loss_span = w.tracer.compute(Phase::Loss, 0, [] { return std::string("mse loss"); });
          w.be().mse_loss_grad(batch() * out, w.y.data(), w.t.data(), grad_scale(), w.dy.data(), w.loss.data());
          break;
        }
        case ActionKind::BackwardWeights: break;  // one call computes both backwards
        case ActionKind::BackwardData: m.backward(w.dy.data(), nullptr, false); break;
        case ActionKind::Optimizer: w.adam->step(m.params(), m.grads()); break;
        default: PB_CHECK(false, "dp: worker {} cannot run {}", i, describe(plan_, i, a.id));
      }
    };
    PlanExecutor(plan_, i, std::move(b)).run();
    w.stats.samples = n;
  }

 public:
  const Plan* step_plan() const override { return &plan_; }

 private:
  std::vector<int64_t> chunks_, offsets_;
  Plan plan_;  // the step, every worker's actions
};

}  // namespace

std::unique_ptr<Strategy> make_dp(const StrategyOptions& o) { return std::make_unique<DataParallel>(o); }

}  // namespace pb
