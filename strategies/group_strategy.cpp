// GroupStrategy: the Strategy interface over a Group, the part every strategy shares.
#include "engine/check.h"
#include "strategies/group.h"

namespace pb {

GroupStrategy::GroupStrategy(const StrategyOptions& o, std::string name, bool across_processes, bool replicas)
    : opts_(o), name_(std::move(name)), replicas_(replicas), group_(o, name_, across_processes) {}

void GroupStrategy::setup(const NetPlan& plan, const std::vector<float>& params, const AdamParams& adam) {
  ready_ = loaded_ = false;
  plan_ = plan;
  plan_workers();
  group_.start([&](Worker& w) {
    w.model.reset();
    w.adam.reset();
    w.x = w.t = w.y = w.dy = w.dx = w.loss = Tensor();
    setup_worker(w, params, adam);
    if (w.model) w.model->set_tracer(&w.tracer);
    if (w.adam) w.adam->set_tracer(&w.tracer);
  });
  ready_ = true;
}

void GroupStrategy::load_batch(const std::vector<float>& x, const std::vector<float>& target, int64_t batch) {
  PB_CHECK(ready_, "{}: load_batch() before setup()", name_);
  loaded_ = false;
  batch_ = batch;
  grad_scale_ = 2.0f / static_cast<float>(batch * numel_of(plan_.output));  // gradient of the global mean
  used_ = plan_batch(batch);
  group_.on_workers(used_, [&](Worker& w) { load_worker(w, x, target); });
  group_.connect(used_);  // untimed: may be collective, and NCCL's setup is slow
  loaded_ = true;
}

void GroupStrategy::step() {
  PB_CHECK(loaded_, "{}: step() before setup() and load_batch()", name_);
  group_.run_step(used_, [&](Worker& w) { step(w, group_); });
}

double GroupStrategy::loss_sum(Worker& w) {
  double sum = 0;
  if (w.loss.defined())
    for (float v : w.loss.to_host()) sum += v;
  return sum;
}

double GroupStrategy::loss() {
  const double sum = group_.sum(used_, [&](Worker& w) { return loss_sum(w); });
  return sum / static_cast<double>(batch_ * numel_of(plan_.output));
}

std::vector<float> GroupStrategy::params() {
  // A replica strategy's worker 0 always takes part and holds the trained values.
  return replicas_ ? group_.params_of(0, plan_.param_count) : group_.params_from_pieces(plan_.param_count);
}

StepStats GroupStrategy::stats() const {
  StepStats s = group_.stats();
  s.micro_batches = micro_batches_;
  s.bubble_fraction = bubble_fraction_;
  s.staged = staged_;
  s.chunk_stages = chunk_stages_;
  s.buckets = bucket_layout_;
  return s;
}

}  // namespace pb
