// ddp: DistributedDataParallel. A replica per worker trains on its torch.chunk piece; gradient
// buckets are all-reduced (sum) as soon as backward has finished them, and every replica steps.
#include "engine/check.h"
#include "engine/model.h"
#include "strategies/common.h"
#include "strategies/registry.h"

namespace pb {

namespace {

struct Bucket {
  int last_layer = 0;  // the lowest layer index in the bucket: its gradients come last
  int64_t begin = 0, end = 0;  // range of the flat gradient buffer
};

// Buckets of about `bytes` from the last layer backwards (the order backward finishes them);
// a layer is never split, as in torch DDP.
std::vector<Bucket> make_buckets(const Sequential& m, std::size_t bytes) {
  std::vector<Bucket> out;
  Bucket cur;
  bool open = false;
  for (int i = m.end() - 1; i >= m.begin(); --i) {
    const auto [lo, hi] = m.layer_grad_range(i);
    if (hi == lo) continue;
    if (!open) cur = {i, lo, hi}, open = true;
    cur.last_layer = i;
    cur.begin = lo;
    if (static_cast<std::size_t>(cur.end - cur.begin) * sizeof(float) >= bytes) out.push_back(cur), open = false;
  }
  if (open) out.push_back(cur);
  return out;
}

class DistributedDataParallel final : public MultiWorkerStrategy {
 public:
  explicit DistributedDataParallel(const StrategyOptions& o) : MultiWorkerStrategy(o, "ddp") {}

  void setup(const NetPlan& plan, const std::vector<float>& params, const AdamParams& adam) override {
    comm_.reset();
    models_.clear();
    models_.resize(workers());
    adams_.clear();
    adams_.resize(workers());
    stale_.assign(workers(), false);
    plan_ = plan;
    start_workers([&](int i) {
      models_[i] = std::make_unique<Sequential>(plan_, 0, static_cast<int>(plan_.layers.size()), backend(i));
      models_[i]->load_params(params);
      adams_[i] = std::make_unique<Adam>(backend(i), models_[i]->params().numel(), adam);
    });
    buckets_ = make_buckets(*models_[first_local()], opts_.bucket_bytes);
    closes_.assign(plan_.layers.size(), -1);
    for (std::size_t b = 0; b < buckets_.size(); ++b) closes_[buckets_[b].last_layer] = static_cast<int>(b);
  }

  void load_batch(const std::vector<float>& x, const std::vector<float>& t, int64_t batch) override {
    chunks_ = split_batch(batch, workers(), name());
    batch_ = batch;
    const std::vector<int64_t> offsets = chunk_offsets(chunks_);
    const int used = static_cast<int>(chunks_.size());
    require_all_workers(used);
    const int64_t in = numel_of(plan_.input), out = numel_of(plan_.output);
    x_.assign(used, Tensor());
    t_ = dy_ = loss_ = x_;
    // Like a DDP process's own data loader, each worker loads its piece straight to its device.
    on_workers(used, [&](int i) {
      const Device d = backend(i).device();
      x_[i] = Tensor::empty({chunks_[i] * in}, d);
      x_[i].copy_from_host(x.data() + offsets[i] * in, chunks_[i] * in);
      t_[i] = Tensor::empty({chunks_[i] * out}, d);
      t_[i].copy_from_host(t.data() + offsets[i] * out, chunks_[i] * out);
      dy_[i] = Tensor::empty({chunks_[i] * out}, d);
      loss_[i] = Tensor::zeros({1}, d);
      // A replica that sat out earlier steps rejoins with replica 0's state (idle while we read it).
      // Only in a single process: a multi-process job always uses every worker.
      if (stale_[i]) {
        PB_CHECK(is_local(0), "{}: replica {} is stale in a multi-process job", name(), i);
        models_[i]->params().copy_from(models_[0]->params());
        adams_[i]->copy_state_from(*adams_[0]);
        stale_[i] = false;
      }
    });
    if (!comm_ || comm_->size() != used) comm_ = make_communicator(backends(used));
  }

  void step() override {
    PB_CHECK(!models_.empty() && !chunks_.empty(), "{}: step() before setup() and load_batch()", name());
    const int used = static_cast<int>(chunks_.size());
    const int64_t out = numel_of(plan_.output);
    const float scale = 2.0f / static_cast<float>(batch_ * out);  // gradient of the global mean
    Communicator& c = *comm_;
    run_step(used, c, [&](int i) {
      Sequential& m = *models_[i];
      const int64_t n = chunks_[i];
      const float* y = m.forward(x_[i].data(), n);
      backend(i).mse_loss_grad(n * out, y, t_[i].data(), scale, dy_[i].data(), loss_[i].data());
      float* g = m.grads().data();
      m.backward(dy_[i].data(), nullptr, false, 0, [&](int layer) {
        if (closes_[layer] < 0) return;
        const Bucket& b = buckets_[closes_[layer]];
        c.all_reduce_start(i, g + b.begin, b.end - b.begin);  // overlaps the rest of backward on GPUs
      });
      c.wait(i);  // every bucket's sum has landed before the optimizer reads it
      adams_[i]->step(m.params(), m.grads());
      stats_.workers[i].samples = n;
    });
    for (int i = used; i < workers(); ++i) stale_[i] = true;
  }

  double loss() override {
    const double sum = sum_over_workers(static_cast<int>(chunks_.size()), [&](int i) { return loss_[i].to_host()[0]; });
    return sum / static_cast<double>(batch_ * numel_of(plan_.output));
  }

  std::vector<float> params() override {
    // Replica 0 always has a chunk; every active replica holds the same values.
    return params_of(0, plan_.param_count, [&](std::vector<float>& full) { models_[0]->store_params(full); });
  }

 private:
  NetPlan plan_;
  std::vector<std::unique_ptr<Sequential>> models_;
  std::vector<std::unique_ptr<Adam>> adams_;
  std::vector<char> stale_;  // replica missed steps (no chunk); char, not bool: workers write their own entry
  std::vector<Bucket> buckets_;
  std::vector<int> closes_;  // per layer: the bucket whose gradients are final after it, or -1
  std::unique_ptr<Communicator> comm_;
  std::vector<int64_t> chunks_;
  int64_t batch_ = 0;
  std::vector<Tensor> x_, t_, dy_, loss_;  // per active worker
};

}  // namespace

std::unique_ptr<Strategy> make_ddp(const StrategyOptions& o) { return std::make_unique<DistributedDataParallel>(o); }

}  // namespace pb
