// ddp: DistributedDataParallel. A replica per worker trains on its torch.chunk piece; gradient
// buckets are all-reduced (sum) as soon as backward has finished them, and every replica steps.
// Gradients are those of the global mean by default, or torch DDP's mean of the ranks' local
// means (--grad-average local).
#include "engine/check.h"
#include "strategies/batch.h"
#include "strategies/group.h"
#include "strategies/registry.h"

namespace pb {

namespace {

struct Bucket {
  int last_layer = 0;  // the lowest layer index in the bucket: its gradients come last
  int64_t begin = 0, end = 0;  // range of the flat gradient buffer
};

}  // namespace

// Buckets from the last layer backwards (the order backward finishes them): the first closes
// once it holds `first_bytes`, the others `bytes`; a layer is never split. As torch DDP
// (first bucket 1 MiB, then bucket_cap_mb), so the first all-reduce starts early in backward.
std::vector<std::pair<int64_t, int64_t>> ddp_buckets(const Sequential& m, std::size_t first_bytes, std::size_t bytes) {
  std::vector<std::pair<int64_t, int64_t>> out;
  int64_t lo_all = -1, hi_all = -1;
  for (int i = m.end() - 1; i >= m.begin(); --i) {
    const auto [lo, hi] = m.layer_grad_range(i);
    if (hi == lo) continue;
    if (hi_all < 0) hi_all = hi;
    lo_all = lo;
    const std::size_t cap = out.empty() ? first_bytes : bytes;
    if (static_cast<std::size_t>(hi_all - lo_all) * sizeof(float) >= cap) {
      out.emplace_back(lo_all, hi_all);
      hi_all = -1;
    }
  }
  if (hi_all >= 0) out.emplace_back(lo_all, hi_all);
  return out;
}

namespace {

std::vector<Bucket> make_buckets(const Sequential& m, std::size_t first_bytes, std::size_t bytes) {
  std::vector<Bucket> out;
  for (const auto& [lo, hi] : ddp_buckets(m, first_bytes, bytes)) {
    int last = m.end() - 1;  // the lowest layer whose gradients lie in [lo, hi)
    for (int i = m.begin(); i < m.end(); ++i) {
      const auto [a, b] = m.layer_grad_range(i);
      if (b > a && a >= lo && b <= hi) {
        last = i;
        break;
      }
    }
    out.push_back({last, lo, hi});
  }
  return out;
}

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
      buckets_ = make_buckets(*group().first_local().model, opts_.first_bucket_bytes, opts_.bucket_bytes);
      for (std::size_t b = 0; b < buckets_.size(); ++b) closes_[buckets_[b].last_layer] = static_cast<int>(b);
      bucket_layout_.clear();
      for (std::size_t b = 0; b < buckets_.size(); ++b) {  // a bucket holds layers up to the next one's first
        const int top = b == 0 ? static_cast<int>(plan().layers.size()) - 1 : buckets_[b - 1].last_layer - 1;
        bucket_layout_.push_back({buckets_[b].last_layer, top, buckets_[b].begin, buckets_[b].end});
      }
    }
    chunks_ = split_batch(batch, workers(), name());
    offsets_ = chunk_offsets(chunks_);
    const int used = static_cast<int>(chunks_.size());
    group().require_all_workers(used);
    for (int i = used; i < workers(); ++i) stale_[i] = true;  // sits out this batch's steps
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
  }

  void step(Worker& w, Group& g) override {
    const int i = w.rank;
    const int64_t n = chunks_[i], out = numel_of(plan().output);
    Sequential& m = *w.model;
    Communicator& c = g.comm();
    // Local: d(local mean)/dy divided by the ranks that trained, folded into one scale.
    const int used = static_cast<int>(chunks_.size());
    const float scale = opts_.grad_average == StrategyOptions::GradAverage::Local
                            ? static_cast<float>(2.0 / (static_cast<double>(n) * out * used))
                            : grad_scale();
    const float* y = m.forward(w.x.data(), n);
    {
      auto loss_span = w.tracer.compute(Phase::Loss, 0, [] { return std::string("mse loss"); });
      w.be().mse_loss_grad(n * out, y, w.t.data(), scale, w.dy.data(), w.loss.data());
    }
    float* grads = m.grads().data();
    m.backward(w.dy.data(), nullptr, false, 0, [&](int layer) {
      if (closes_[layer] < 0) return;
      const Bucket& b = buckets_[closes_[layer]];
      c.all_reduce_start(i, grads + b.begin, b.end - b.begin);  // overlaps the rest of backward on GPUs
    });
    c.wait(i);  // every bucket's sum has landed before the optimizer reads it
    w.adam->step(m.params(), m.grads());
    w.stats.samples = n;
  }

 private:
  std::vector<char> stale_;  // replica sat out steps (no chunk); char, not bool: workers write their own entry
  std::vector<Bucket> buckets_;
  std::vector<int> closes_;  // per layer: the bucket whose gradients are final after it, or -1
  std::vector<int64_t> chunks_, offsets_;
};

}  // namespace

std::unique_ptr<Strategy> make_ddp(const StrategyOptions& o) { return std::make_unique<DistributedDataParallel>(o); }

}  // namespace pb
