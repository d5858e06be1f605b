// dp: torch.nn.DataParallel. The batch sits on device 0 and is scattered in torch.chunk pieces;
// parameters are broadcast from device 0 every step; outputs are gathered to device 0, where the
// loss is computed; gradients are reduced to device 0, which alone runs the optimizer.
#include "engine/check.h"
#include "strategies/batch.h"
#include "strategies/group.h"
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

  void step(Worker& w, Group& g) override {
    const int i = w.rank, used = static_cast<int>(chunks_.size());
    const int64_t in = numel_of(plan().input), out = numel_of(plan().output), n = chunks_[i];
    Sequential& m = *w.model;
    const int64_t np = m.params().numel();
    Communicator& c = g.comm();
    Worker& root = g.worker(0);  // dp runs in one process: every worker is local
    c.broadcast(i, m.params().data(), np, 0);  // replicate
    // Scatter the input; then forward on the chunk.
    if (i == 0)
      for (int j = 1; j < used; ++j) c.send(0, root.x.data() + offsets_[j] * in, chunks_[j] * in, j);
    else
      c.recv(i, w.x.data(), n * in, 0);
    const float* y = m.forward(w.x.data(), n);
    // Gather the outputs to device 0, take the loss of the whole batch there, scatter its gradient.
    if (i == 0) {
      // On the compute queue after the forward that made y, before the loss reads it: no host wait.
      w.be().copy(w.device, w.y.data(), w.device, y, static_cast<std::size_t>(n * out) * sizeof(float));
      for (int j = 1; j < used; ++j) c.recv(0, w.y.data() + offsets_[j] * out, chunks_[j] * out, j);
      {
        auto loss_span = w.tracer.compute(Phase::Loss, 0, [] { return std::string("mse loss"); });
        w.be().mse_loss_grad(batch() * out, w.y.data(), w.t.data(), grad_scale(), w.dy.data(), w.loss.data());
      }
      for (int j = 1; j < used; ++j) c.send(0, w.dy.data() + offsets_[j] * out, chunks_[j] * out, j);
    } else {
      c.send(i, y, n * out, 0);
      c.recv(i, w.dy.data(), n * out, 0);
    }
    m.backward(w.dy.data(), nullptr, false);
    c.reduce(i, m.grads().data(), np, 0);
    if (i == 0) w.adam->step(m.params(), m.grads());
    w.stats.samples = n;
  }

 private:
  std::vector<int64_t> chunks_, offsets_;
};

}  // namespace

std::unique_ptr<Strategy> make_dp(const StrategyOptions& o) { return std::make_unique<DataParallel>(o); }

}  // namespace pb
