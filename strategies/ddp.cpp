// ddp: DistributedDataParallel. A replica per worker trains on its torch.chunk piece; gradient
// buckets are all-reduced (sum) as soon as backward has finished them, and every replica steps.
// Gradients are those of the global mean by default, or torch DDP's mean of the ranks' local
// means (--grad-average local).

#include "engine/check.h"
#include "strategies/batch.h"
#include "strategies/executor.h"
#include "strategies/group.h"
#include "strategies/plan_gen.h"
#include "strategies/registry.h"
#include "strategies/rules.h"

namespace pb {

namespace {

class DistributedDataParallel final : public GroupStrategy {
 public:
  explicit DistributedDataParallel(const StrategyOptions& o) : GroupStrategy(o, "ddp", true, /*replicas=*/true) {}

 protected:
  void plan_workers() override {
    stale_.assign(workers(), false);
    buckets_.clear();
    closes_.assign(plan().layers.size(), -1);
  }

  void setup_worker(Worker& w, const std::vector<float>& params, const AdamParams& adam) override {
    w.model = std::make_unique<Sequential>(plan(), 0, static_cast<int>(plan().layers.size()), w.be());
    w.model->load_params(params);
    w.adam = std::make_unique<Adam>(w.be(), w.model->params().numel(), adam);
  }

  int plan_batch(int64_t batch) override {
    if (buckets_.empty()) {  // every replica has the same layout
      buckets_ = ddp_bucket_layout(plan(), opts_.first_bucket_bytes, opts_.bucket_bytes);
      for (std::size_t b = 0; b < buckets_.size(); ++b) closes_[buckets_[b].first_layer] = static_cast<int>(b);
      bucket_layout_ = buckets_;
    }
    chunks_ = split_batch(batch, workers(), name());
    offsets_ = chunk_offsets(chunks_);
    const int used = static_cast<int>(chunks_.size());
    group().require_all_workers(used);
    for (int i = used; i < workers(); ++i) stale_[i] = true;  // sits out this batch's steps
    plan_ = plan_ddp(plan(), opts_, batch);
    if (opts_.plan) {  // a plan file: run instead, once it makes the calls and computations this plan does
      check_replica_plan(*opts_.plan, plan_, opts_.plan_source.empty() ? "--plan" : opts_.plan_source);
      plan_ = *opts_.plan;
    }
    ptrs_.assign(workers(), {});
    return used;
  }

  // Like a DDP process's own data loader, each worker loads its piece straight to its device.
  void load_worker(Worker& w, const std::vector<float>& x, const std::vector<float>& t) override {
    const int64_t in = numel_of(plan().input), out = numel_of(plan().output), n = chunks_[w.rank];
    const int64_t at = offsets_[w.rank];
    w.x = Tensor::empty({n * in}, w.device);
    w.x.copy_from_host(x.data() + at * in, n * in);
    w.t = Tensor::empty({n * out}, w.device);
    w.t.copy_from_host(t.data() + at * out, n * out);
    w.dy = Tensor::empty({n * out}, w.device);
    w.loss = Tensor::zeros({1}, w.device);
    // A replica that sat out earlier steps rejoins with replica 0's state (idle while we read it).
    // Only in a single process: a multi-process job always uses every worker.
    if (stale_[w.rank]) {
      PB_CHECK(group().is_local(0), "{}: replica {} is stale in a multi-process job", name(), w.rank);
      Worker& first = group().worker(0);
      w.model->params().copy_from(first.model->params());
      w.adam->copy_state_from(*first.adam);
      stale_[w.rank] = false;
    }
    ptrs_[w.rank] = pointers(w);
  }

  // The replica's plan (plan_ddp) run by the executor. Backward is one call; as it finishes each
  // bucket's lowest layer, the executor starts that bucket's all-reduce (it overlaps the rest of
  // backward on GPUs), and its Wait lands every sum before the optimizer reads them.
  void step(Worker& w, Group& g) override {
    const int i = w.rank;
    const int64_t n = chunks_[i], out = numel_of(plan().output);
    Sequential& m = *w.model;
    // Local: d(local mean)/dy divided by the ranks that trained, folded into one scale.
    const int used = static_cast<int>(chunks_.size());
    const float scale = opts_.grad_average == StrategyOptions::GradAverage::Local
                            ? static_cast<float>(2.0 / (static_cast<double>(n) * out * used))
                            : grad_scale();
    const std::vector<float*>& at = ptrs_[i];
    const float* y = nullptr;
    bool backward_done = false;
    PlanExecutor* ex = nullptr;
    PlanExecutor::Binding b;
    b.tracer = &w.tracer;
    b.at = [&](const Action&, int buf, bool) { return at.at(buf); };
    b.comm = [&](int) -> std::pair<Communicator*, int> { return {&g.comm(), i}; };
    b.compute = [&](const Action& a) {
      switch (a.kind) {
        case ActionKind::Forward: y = m.forward(w.x.data(), n); break;
        case ActionKind::Loss: {
          auto loss_span = w.tracer.compute(Phase::Loss, 0, [] { return std::string("mse loss"); });
          w.be().mse_loss_grad(n * out, y, w.t.data(), scale, w.dy.data(), w.loss.data());
          break;
        }
        case ActionKind::BackwardWeights:
        case ActionKind::BackwardData:  // the first runs the whole backward; the rest are done by then
          if (backward_done) break;
          backward_done = true;
          m.backward(w.dy.data(), nullptr, false, 0, [&](int layer) {
            if (closes_[layer] < 0) return;
            ex->run_through([layer](const Action& c) {
              return (c.kind == ActionKind::BackwardWeights || c.kind == ActionKind::BackwardData) &&
                     c.layer_begin >= layer;
            });
          });
          break;
        case ActionKind::Optimizer: w.adam->step(m.params(), m.grads()); break;
        default: PB_CHECK(false, "ddp: worker {} cannot run {}", i, describe(plan_, i, a.id));
      }
    };
    PlanExecutor run(plan_, i, std::move(b));
    ex = &run;
    run.run();
    w.stats.samples = n;
  }

 public:
  const Plan* step_plan() const override { return &plan_; }

 private:
  // Where each of the worker's plan buffers lives (a bucket: its range of the gradients).
  std::vector<float*> pointers(Worker& w) const {
    std::vector<float*> at(plan_.buffers.size(), nullptr);
    for (std::size_t b = 0; b < plan_.buffers.size(); ++b) {
      const PlanBuffer& buf = plan_.buffers[b];
      if (buf.worker != w.rank) continue;
      if (buf.role == BufferRole::Grads && buf.index >= 0) at[b] = w.model->grads().data() + buckets_.at(buf.index).begin;
      else if (buf.role == BufferRole::Input) at[b] = w.x.data();
      else if (buf.role == BufferRole::OutputGrad) at[b] = w.dy.data();
      else if (buf.role == BufferRole::Params) at[b] = w.model->params().data();
    }
    return at;
  }

  std::vector<char> stale_;  // replica sat out steps (no chunk); char, not bool: workers write their own entry
  std::vector<BucketLayout> buckets_;
  std::vector<int> closes_;  // per layer: the bucket whose gradients are final after it, or -1
  std::vector<int64_t> chunks_, offsets_;
  Plan plan_;                              // the step, every worker's actions
  std::vector<std::vector<float*>> ptrs_;  // per local worker: its plan buffers' places
};

}  // namespace

std::unique_ptr<Strategy> make_ddp(const StrategyOptions& o) { return std::make_unique<DistributedDataParallel>(o); }

}  // namespace pb
