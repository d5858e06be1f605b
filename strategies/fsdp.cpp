// fsdp: fully sharded data parallel (ZeRO-3, torch FSDP FULL_SHARD). Each worker trains on its
// torch.chunk piece but holds only a 1/N shard of every unit's parameters, gradients and Adam
// state; a unit (a layer with parameters and the parameterless layers after it) all-gathers its
// parameters before its forward and again before its backward, dropping them after each; its
// gradients are reduce-scattered, and each worker steps its own shard. zero2 (ZeRO-2, FSDP
// SHARD_GRAD_OP) keeps the gathered parameters from forward to backward instead: one all-gather
// per unit and step, for the memory of the whole parameters during the step. The -prefetch
// variants (FSDP2's forward and backward prefetch) start each unit's all-gather before the previous
// unit's compute, so the two overlap where the communicator runs apart from compute (NCCL, MPI);
// fsdp-prefetch then holds two units' parameters, the one computing and the next. The gathered
// parameters and whole gradients live in buffers made once (at setup): a step allocates nothing.
// A net with skips: a unit reads the outputs of earlier units its layers name and hands their
// gradients back, in buffers held while live (engine/graph_stage.h, plan_stage_gradients).
// hsdp<R>x<S> (hybrid sharded data parallel, FSDP HYBRID_SHARD) is fsdp within each of R groups of
// S workers (worker r: shard r % S of group r / S), each reduced shard then all-reduced over the R
// workers that hold it, on communicators of their own.
#include <algorithm>

#include <fmt/format.h>

#include "engine/check.h"
#include "engine/graph_stage.h"
#include "engine/process.h"
#include "strategies/batch.h"
#include "strategies/executor.h"
#include "strategies/group.h"
#include "strategies/plan_gen.h"
#include "strategies/registry.h"
#include "strategies/rules.h"

namespace pb {

namespace {

using Unit = FsdpUnit;

class FullyShardedDataParallel final : public GroupStrategy {
 public:
  FullyShardedDataParallel(const StrategyOptions& o, std::string name, bool reshard_after_forward, bool prefetch,
                           int replicas = 1)
      : GroupStrategy(o, std::move(name), true, /*replicas=*/false), reshard_(reshard_after_forward),
        prefetch_(prefetch), replicas_(replicas) {
    PB_CHECK(replicas_ >= 1 && o.devices % replicas_ == 0, "{}: {} groups over {} workers", name, replicas_, o.devices);
  }

  // Each worker's shards, placed into the whole vector (zeros elsewhere) and summed over the job;
  // hsdp: the first group's (the others hold the same).
  std::vector<float> params() override {
    std::vector<float> full(static_cast<std::size_t>(plan().param_count), 0.0f);
    for (int r = 0; r < ways(); ++r) {
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
    units_ = fsdp_units(plan(), ways());
    unit_at_.assign(plan().layers.size(), 0);
    largest_ = 0;
    for (std::size_t u = 0; u < units_.size(); ++u) {
      for (int l = units_[u].begin; l < units_[u].end; ++l) unit_at_[l] = static_cast<int>(u);
      largest_ = std::max(largest_, ways() * units_[u].shard);
    }
    passed_ = plan_stage_gradients(plan(), unit_cuts(units_));
    shards_.clear();
    shards_.resize(workers());
    models_.clear();
    models_.resize(workers());
  }

  void setup_worker(Worker& w, const std::vector<float>& params, const AdamParams& adam) override {
    const int r = w.rank % ways();  // the shard it holds
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
    auto& models = models_[w.rank];
    models.clear();
    for (const Unit& u : units_) {
      models.push_back(std::make_unique<Sequential>(plan(), u.begin, u.end, w.be()));
      models.back()->set_tracer(&w.tracer);
      models.back()->share_scratch(*models.front());
      models.back()->share_params16(*models.front());  // bf16: one unit's weight copy at a time
      release(*models.back());
    }
    Shard& s = shards_[w.rank];
    s.params = Tensor::from_host({total}, mine, w.device);
    s.grads = Tensor::zeros({total}, w.be());
    w.adam = std::make_unique<Adam>(w.be(), total, adam);
    // One worker (hsdp: a group of one) holds the whole of every unit: its shards serve as the
    // whole parameters and gradients (the gather and reduce-scatter are then no copies). Else one buffer for the whole
    // parameters of the largest unit (fsdp: one unit at a time) or of all units (zero2: kept from
    // forward to backward; fsdp-prefetch: two units, the one computing and the next, in turn), and
    // one for the whole gradients of the largest unit.
    // --param-dtype bf16: the whole parameters are gathered into bf16 and the units compute with
    // them as they are, without an fp32 copy to round (FSDP's param_dtype).
    const int n = ways();
    if (n > 1) {
      s.gathered = Tensor::empty({reshard_ ? slots() * largest_ : n * total}, w.device, opts_.param_dtype);
      s.unit_grads = Tensor::empty({largest_}, w.device);
    }
  }

  // Every worker takes part: each holds shards the others need, also without a chunk.
  int plan_batch(int64_t batch) override {
    chunks_ = split_batch(batch, workers(), name());
    offsets_ = chunk_offsets(chunks_);
    chunks_.resize(workers(), 0);
    offsets_.resize(workers(), batch);
    if (replicas_ > 1) {  // each group's shard communicator, and the workers of each shard
      std::vector<std::vector<int>> groups(replicas_), holders(ways());
      for (int r = 0; r < workers(); ++r) {
        groups[r / ways()].push_back(r);
        holders[r % ways()].push_back(r);
      }
      group().connect_parts("shard", groups);
      group().connect_parts("replicate", holders);
    }
    plan_ = plan_fsdp(plan(), opts_, batch, name(), reshard_, prefetch_, replicas_);
    group_part_.clear();
    for (const PlanGroup& pg : plan_.groups)
      group_part_.push_back(pg.name.rfind("shard ", 0) == 0 ? "shard" : pg.name.rfind("replicate ", 0) == 0 ? "replicate" : "");
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
    // The gradients passed between units (plan_stage_gradients: a chain's, two buffers in turn).
    Shard& s = shards_[w.rank];
    s.passed.clear();
    for (int64_t values : passed_.pool) s.passed.push_back(Tensor::empty({n > 0 ? n * values : 0}, w.device));
    // Without a chunk nothing writes the whole gradients: the reduce-scatter then adds zeros.
    if (n == 0 && s.unit_grads.defined()) w.be().fill(s.unit_grads.data(), s.unit_grads.numel(), 0.0f);
  }

  // The worker's plan (plan_fsdp) run by the executor. A unit's all-gather makes its whole
  // parameters the view its stage computes with; its reduce-scatter reads its whole gradients.
  void step(Worker& w, Group& g) override {
    const int r = w.rank;
    const int64_t n = chunks_[r], out = numel_of(plan().output);
    const int ways_ = ways();
    Shard& s = shards_[r];
    auto& models = models_[r];
    const float* cur = w.x.data();
    auto passed = [&](int k) { return k < 0 ? nullptr : s.passed[k].data(); };
    auto unit_of = [&](const Action& a) {
      PB_CHECK(a.layer_begin >= 0, "{}: {} names no unit", name(), describe(plan_, r, a.id));
      return unit_at_[a.layer_begin];
    };
    auto grads_view = [&](int u) { models[u]->grads() = whole(s.grads, s.unit_grads, 0, ways_, units_[u]); };
    PlanExecutor::Binding b;
    b.tracer = &w.tracer;
    b.at = [&](const Action& a, int buf, bool) -> float* {
      const int u = unit_of(a);
      const Unit& unit = units_[u];
      const BufferRole role = plan_.buffers[buf].role;
      if (role == BufferRole::ShardParams) return s.params.data() + unit.at;
      if (role == BufferRole::ShardGrads) return s.grads.data() + unit.at;
      if (role == BufferRole::UnitGrads) {  // also without a chunk: then the zeros it holds
        grads_view(u);
        // hsdp<R>x1: the shard is the whole, and last step's all-reduce left its sum there.
        if (n == 0 && !s.unit_grads.defined()) w.be().fill(models[u]->grads().data(), models[u]->grads().numel(), 0.0f);
        return models[u]->grads().data();
      }
      Sequential& m = *models[u];  // gathered: the unit's whole parameters (fsdp-prefetch: slot u % 2)
      m.params() = whole(s.params, s.gathered, gathered_at(u), ways_, unit);
      return m.params().data();
    };
    b.at16 = [&](const Action& a, int, bool) {  // "gathered" kept in bf16
      const int u = unit_of(a);
      Bf16* p = s.gathered.data_bf16() + gathered_at(u);
      models[u]->use_params16(p);
      return p;
    };
    b.comm = [&](int group) -> std::pair<Communicator*, int> {
      if (group_part_.at(group).empty()) return {&g.comm(), r};
      return {&g.part_comm(group_part_[group], r), g.part_rank(group_part_[group], r)};
    };
    b.compute = [&](const Action& a) {
      switch (a.kind) {
        case ActionKind::Forward: {  // its entries: the input, or exits of the units before it
          const int u = unit_of(a);
          std::vector<const float*> entries;
          for (auto [from, k] : passed_.entry_from[u]) entries.push_back(from < 0 ? w.x.data() : models[from]->exit_value(k));
          cur = models[u]->forward(entries, n);
          break;
        }
        case ActionKind::Loss: {
          auto loss_span = w.tracer.compute(Phase::Loss, 0, [] { return std::string("mse loss"); });
          w.be().mse_loss_grad(n * out, cur, w.t.data(), grad_scale(), w.dy.data(), w.loss.data());
          break;
        }
        case ActionKind::BackwardWeights: grads_view(unit_of(a)); break;  // one call computes both backwards
        case ActionKind::BackwardData: {  // a later reader's part of an entry's gradient: made apart, added
          const int u = unit_of(a);
          std::vector<const float*> dys;
          std::vector<float*> dxs;
          for (int k : passed_.exit_buf[u]) dys.push_back(k < 0 ? w.dy.data() : passed(k));
          for (std::size_t k = 0; k < passed_.entry_buf[u].size(); ++k)
            dxs.push_back(passed(passed_.entry_tmp[u][k] >= 0 ? passed_.entry_tmp[u][k] : passed_.entry_buf[u][k]));
          models[u]->backward(dys, dxs, false);
          const std::vector<int>& entries = models[u]->boundary().entries;
          for (std::size_t k = 0; k < entries.size(); ++k)
            if (const int tmp = passed_.entry_tmp[u][k]; tmp >= 0)
              w.be().add(n * numel_of(plan().layers[entries[k]].out), passed(passed_.entry_buf[u][k]), passed(tmp),
                         passed(passed_.entry_buf[u][k]));
          break;
        }
        case ActionKind::Free: release(*models[unit_of(a)]); break;
        case ActionKind::Optimizer: w.adam->step(s.params, s.grads); break;
        default: PB_CHECK(false, "{}: worker {} cannot run {}", name(), r, describe(plan_, r, a.id));
      }
    };
    PlanExecutor(plan_, r, std::move(b)).run();
    w.stats.samples = n;
  }

 public:
  const Plan* step_plan() const override { return &plan_; }

 private:
  struct Shard {
    Tensor params, grads;  // this worker's shard of every unit, concatenated
    Tensor gathered, unit_grads;  // whole parameters and gradients (more than one worker)
    std::vector<Tensor> passed;   // passed_.pool's buffers
  };

  // A unit's whole values (padded to N shards): a view of the shard itself on one worker, else
  // of `buf` at `at` (the unit's place in it, for zero2's parameters of every unit).
  Tensor whole(const Tensor& shard, const Tensor& buf, int64_t at, int n, const Unit& u) const {
    return n == 1 ? shard.view(u.at, {u.shard}) : buf.view(at, {n * u.shard});
  }
  // Drops the unit's views (the buffers stay, for the next unit and step).
  static void release(Sequential& m) {
    m.params() = Tensor();
    m.grads() = Tensor();
    m.use_params16(nullptr);
  }
  // Where unit u's whole parameters lie in the gathered buffer: its slot (fsdp), its place (zero2).
  int64_t gathered_at(int u) const { return reshard_ ? (u % slots()) * largest_ : ways() * units_[u].at; }

  int slots() const { return prefetch_ ? 2 : 1; }  // fsdp: the units' gathered parameters held at once
  int ways() const { return workers() / replicas_; }  // the workers a unit is sharded over

  bool reshard_;  // drop a unit's parameters after its forward (ZeRO-3), gather them again for backward
  bool prefetch_;  // start the next unit's all-gather before the current unit's compute
  int replicas_;   // hsdp: the groups (1: fsdp, zero2)
  std::vector<std::string> group_part_;  // per plan group: its partition ("shard", "replicate"; "": the world)
  int64_t largest_ = 0;  // the largest unit's whole (padded) parameters
  std::vector<Unit> units_;
  std::vector<Shard> shards_;  // per worker
  std::vector<std::vector<std::unique_ptr<Sequential>>> models_;  // per worker, per unit
  std::vector<int64_t> chunks_, offsets_;
  std::vector<int> unit_at_;  // per layer: the unit it belongs to
  StageGradients passed_;     // the values and gradients passed between units
  Plan plan_;                 // the step, every worker's actions
};

}  // namespace

std::unique_ptr<Strategy> make_fsdp(const StrategyOptions& o) {
  return std::make_unique<FullyShardedDataParallel>(o, "fsdp", true, false);
}
std::unique_ptr<Strategy> make_zero2(const StrategyOptions& o) {
  return std::make_unique<FullyShardedDataParallel>(o, "zero2", false, false);
}
std::unique_ptr<Strategy> make_fsdp_prefetch(const StrategyOptions& o) {
  return std::make_unique<FullyShardedDataParallel>(o, "fsdp-prefetch", true, true);
}
std::unique_ptr<Strategy> make_zero2_prefetch(const StrategyOptions& o) {
  return std::make_unique<FullyShardedDataParallel>(o, "zero2-prefetch", false, true);
}

std::string hsdp_name(int replicas, int shards) { return fmt::format("hsdp{}x{}", replicas, shards); }

bool parse_hsdp_name(const std::string& name, int* replicas, int* shards) {
  int r = 0, s = 0;
  std::size_t used = 0;
  if (!parse_factor_name(name, "hsdp", "x", &r, &s, &used) || used != name.size()) return false;
  if (name != hsdp_name(r, s)) return false;  // "hsdp02x2", trailing text: not a name this program writes
  *replicas = r, *shards = s;
  return true;
}

std::unique_ptr<Strategy> make_hsdp(const StrategyOptions& o, int replicas, int shards) {
  const std::string name = hsdp_name(replicas, shards);
  if (o.devices != replicas * shards)
    throw UsageError(fmt::format("{}: {} groups of {} sharding workers run on {} devices, got --devices {}", name,
                                 replicas, shards, replicas * shards, o.devices));
  return std::make_unique<FullyShardedDataParallel>(o, name, true, false, replicas);
}

}  // namespace pb
