// fsdp: fully sharded data parallel (ZeRO-3, torch FSDP FULL_SHARD). Each worker trains on its
// torch.chunk piece but holds only a 1/N shard of every unit's parameters, gradients and Adam
// state; a unit (a layer with parameters and the parameterless layers after it) all-gathers its
// parameters before its forward and again before its backward, dropping them after each; its
// gradients are reduce-scattered, and each worker steps its own shard. zero2 (ZeRO-2, FSDP
// SHARD_GRAD_OP) keeps the gathered parameters from forward to backward instead: one all-gather
// per unit and step, for the memory of the whole parameters during the step. The gathered
// parameters and whole gradients live in buffers made once (at setup): a step allocates nothing.
#include <algorithm>

#include "engine/check.h"
#include "engine/process.h"
#include "strategies/batch.h"
#include "strategies/group.h"
#include "strategies/registry.h"
#include "strategies/rules.h"

namespace pb {

namespace {

using Unit = FsdpUnit;

class FullyShardedDataParallel final : public GroupStrategy {
 public:
  FullyShardedDataParallel(const StrategyOptions& o, std::string name, bool reshard_after_forward)
      : GroupStrategy(o, std::move(name), true, /*replicas=*/false), reshard_(reshard_after_forward) {}

  // Each worker's shards, placed into the whole vector (zeros elsewhere) and summed over the job.
  std::vector<float> params() override {
    std::vector<float> full(static_cast<std::size_t>(plan().param_count), 0.0f);
    for (int r = 0; r < workers(); ++r) {
      if (!group().is_local(r)) continue;
      const std::vector<float> mine = shards_.at(r).params.to_host();
      for (const Unit& u : units_) {
        const int64_t lo = std::min(u.numel, r * u.shard), hi = std::min(u.numel, (r + 1) * u.shard);
        std::copy(mine.begin() + u.at, mine.begin() + u.at + (hi - lo), full.begin() + u.param_offset + lo);
      }
    }
    world_sum(full.data(), static_cast<int64_t>(full.size()));
    return full;
  }

 protected:
  void plan_workers() override {
    units_ = fsdp_units(plan(), workers());
    shards_.clear();
    shards_.resize(workers());
    models_.clear();
    models_.resize(workers());
  }

  void setup_worker(Worker& w, const std::vector<float>& params, const AdamParams& adam) override {
    const int r = w.rank;
    int64_t total = 0;
    for (const Unit& u : units_) total += u.shard;
    std::vector<float> mine(static_cast<std::size_t>(total), 0.0f);  // padding stays 0 (its gradient too)
    for (const Unit& u : units_) {
      const int64_t lo = std::min(u.numel, r * u.shard), hi = std::min(u.numel, (r + 1) * u.shard);
      std::copy(params.begin() + u.param_offset + lo, params.begin() + u.param_offset + hi, mine.begin() + u.at);
    }
    // One stage per unit; its whole parameters and gradients are views of the buffers below, set
    // only around its own compute. The units' backwards share one pair of gradient scratch. The
    // stages come first: their own parameters (made and dropped) then never add to the shards'.
    auto& models = models_[r];
    models.clear();
    for (const Unit& u : units_) {
      models.push_back(std::make_unique<Sequential>(plan(), u.begin, u.end, w.be()));
      models.back()->set_tracer(&w.tracer);
      models.back()->share_scratch(*models.front());
      release(*models.back());
    }
    Shard& s = shards_[r];
    s.params = Tensor::from_host({total}, mine, w.device);
    s.grads = Tensor::zeros({total}, w.be());
    w.adam = std::make_unique<Adam>(w.be(), total, adam);
    // One worker holds the whole of every unit: its shards serve as the whole parameters and
    // gradients (the gather and reduce-scatter are then no copies). Else one buffer for the whole
    // parameters of the largest unit (fsdp: one unit at a time) or of all units (zero2: kept from
    // forward to backward), and one for the whole gradients of the largest unit.
    const int n = workers();
    int64_t largest = 0;
    for (const Unit& u : units_) largest = std::max(largest, n * u.shard);
    if (n > 1) {
      s.gathered = Tensor::empty({reshard_ ? largest : n * total}, w.device);
      s.unit_grads = Tensor::empty({largest}, w.device);
    }
  }

  // Every worker takes part: each holds shards the others need, also without a chunk.
  int plan_batch(int64_t batch) override {
    chunks_ = split_batch(batch, workers(), name());
    offsets_ = chunk_offsets(chunks_);
    chunks_.resize(workers(), 0);
    offsets_.resize(workers(), batch);
    return workers();
  }

  void load_worker(Worker& w, const std::vector<float>& x, const std::vector<float>& t) override {
    const int64_t in = numel_of(plan().input), out = numel_of(plan().output), n = chunks_[w.rank];
    const int64_t at = offsets_[w.rank];
    w.x = Tensor::empty({n * in}, w.device);
    if (n > 0) w.x.copy_from_host(x.data() + at * in, n * in);
    w.t = Tensor::empty({n * out}, w.device);
    if (n > 0) w.t.copy_from_host(t.data() + at * out, n * out);
    w.dy = Tensor::empty({n * out}, w.device);
    w.loss = Tensor::zeros({1}, w.be());
    // Input gradients between units: two buffers of the largest unit input, used in turn.
    int64_t max_in = 0;
    for (std::size_t u = 1; u < units_.size(); ++u) max_in = std::max(max_in, n * numel_of(plan().layers[units_[u].begin].in));
    Shard& s = shards_[w.rank];
    for (Tensor& b : s.dx) b = Tensor::empty({max_in}, w.device);
    // Without a chunk nothing writes the whole gradients: the reduce-scatter then adds zeros.
    if (n == 0 && s.unit_grads.defined()) w.be().fill(s.unit_grads.data(), s.unit_grads.numel(), 0.0f);
  }

  void step(Worker& w, Group& g) override {
    const int r = w.rank;
    const int64_t n = chunks_[r], out = numel_of(plan().output);
    Communicator& c = g.comm();
    Shard& s = shards_[r];
    auto& models = models_[r];
    const int units = static_cast<int>(units_.size());
    const float* cur = w.x.data();
    for (int u = 0; u < units; ++u) {
      Sequential& m = *models[u];
      gather(c, w, m, units_[u]);
      if (n > 0) cur = m.forward(cur, n);
      if (reshard_) release(m);
    }
    if (n > 0) {
      auto loss_span = w.tracer.compute(Phase::Loss, 0, [] { return std::string("mse loss"); });
      w.be().mse_loss_grad(n * out, cur, w.t.data(), grad_scale(), w.dy.data(), w.loss.data());
    }
    const float* dy = w.dy.data();
    for (int u = units - 1; u >= 0; --u) {
      Sequential& m = *models[u];
      const Unit& unit = units_[u];
      if (reshard_) gather(c, w, m, unit);
      m.grads() = whole(s.grads, s.unit_grads, 0, c.size(), unit);
      float* dx = u > 0 ? s.dx[u % 2].data() : nullptr;
      if (n > 0) m.backward(dy, dx, false);
      c.reduce_scatter(r, m.grads().data(), s.grads.data() + unit.at, unit.shard);
      release(m);
      dy = dx;
    }
    w.adam->step(s.params, s.grads);
    w.stats.samples = n;
  }

 private:
  struct Shard {
    Tensor params, grads;  // this worker's shard of every unit, concatenated
    Tensor gathered, unit_grads;  // whole parameters and gradients (more than one worker)
    Tensor dx[2];
  };

  // A unit's whole values (padded to N shards): a view of the shard itself on one worker, else
  // of `buf` at `at` (the unit's place in it, for zero2's parameters of every unit).
  Tensor whole(const Tensor& shard, const Tensor& buf, int64_t at, int n, const Unit& u) const {
    return n == 1 ? shard.view(u.at, {u.shard}) : buf.view(at, {n * u.shard});
  }
  // The unit's whole parameters from every worker's shard.
  void gather(Communicator& c, Worker& w, Sequential& m, const Unit& u) {
    Shard& s = shards_[w.rank];
    m.params() = whole(s.params, s.gathered, reshard_ ? 0 : c.size() * u.at, c.size(), u);
    c.all_gather(w.rank, s.params.data() + u.at, m.params().data(), u.shard);
  }
  // Drops the unit's views (the buffers stay, for the next unit and step).
  static void release(Sequential& m) {
    m.params() = Tensor();
    m.grads() = Tensor();
  }

  bool reshard_;  // drop a unit's parameters after its forward (ZeRO-3), gather them again for backward
  std::vector<Unit> units_;
  std::vector<Shard> shards_;  // per worker
  std::vector<std::vector<std::unique_ptr<Sequential>>> models_;  // per worker, per unit
  std::vector<int64_t> chunks_, offsets_;
};

}  // namespace

std::unique_ptr<Strategy> make_fsdp(const StrategyOptions& o) {
  return std::make_unique<FullyShardedDataParallel>(o, "fsdp", true);
}
std::unique_ptr<Strategy> make_zero2(const StrategyOptions& o) {
  return std::make_unique<FullyShardedDataParallel>(o, "zero2", false);
}

}  // namespace pb
