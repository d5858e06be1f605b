// predict: a configuration's plan, priced (projection/plan_price.h) and played by the simulator,
// with the machine's per-step overheads and the memory estimate.
#include "scenarios/predict.h"

#include <algorithm>

#include "engine/check.h"
#include "projection/simulator.h"
#include "scenarios/strategy_model.h"

namespace pb::projection {

namespace {
Prediction predict_impl(const Profile& p, const Machine& m, const Config& named, const Options& o) {
  Prediction r;
  r.config = named;
  const int N = named.devices;
  const int threads = m.threads_per_worker(N, o.threads_per_worker);
  StepProgram prog = step_program(p, m, named, o, threads);
  if (!prog.refused.empty()) {
    r.feasible = false;
    r.reason = prog.refused;
    return r;
  }
  const Config& c = prog.priced;
  const int local = m.shared_cores > 0 || m.kind == "cpu" ? std::min(N, m.devices_per_node) : 1;
  // In-process workers each on a core of their own start a little after worker 0 (the caller), so
  // arrive that much later at the step's first collective. Bound workers sharing a core start as
  // the core's turns give them, which the simulation plays itself.
  double lag = 0;
  if (const auto it = m.worker_start_at_s.find(local); it != m.worker_start_at_s.end() && local > 1 &&
                                                        !bound_round_robin(m, threads, c.devices))
    lag = std::min(it->second, m.workers_overhead_s(local));
  if (lag > 0)
    for (Actor& a : prog.actors)
      if (a.worker % m.devices_per_node != 0) a.ops.insert(a.ops.begin(), Op{Op::Delay, lag});
  const SimResult sim = simulate(prog.actors, prog.workers, m, threads, std::max(1, p.concurrent), o.busy_seconds);
  int busiest = 0;
  for (int w = 0; w < prog.workers; ++w)
    if (sim.compute[w] > sim.compute[busiest]) busiest = w;
  const double overhead = m.step_overhead_s + m.workers_overhead_s(local) - lag + prog.bookkeeping_s;
  r.step_s = sim.end + overhead;
  r.compute_s = sim.compute[busiest];
  r.exposed_comm_s = sim.exposed[busiest];
  r.idle_s = std::max(0.0, r.step_s - r.compute_s - r.exposed_comm_s);
  r.peak_bytes = memory_peak(p, prog.plan);
  r.fits = r.peak_bytes <= m.memory_bytes / (m.shared_cores > 0 ? std::min(N, m.devices_per_node) : 1);
  r.comm_bytes = prog.comm_bytes;
  r.samples_per_s = static_cast<double>(c.global_batch) / r.step_s;
  r.actions = sim.actions;
  return r;
}
}  // namespace

Prediction predict(const Profile& p, const Machine& m, const Config& c, const Options& o) {
  try {
    return predict_impl(p, m, c, o);
  } catch (const UsageError& e) {  // a collective the machine has no cost for, a split that does not fit
    Prediction r;
    r.config = c;
    r.feasible = false;
    r.reason = e.what();
    return r;
  }
}

}  // namespace pb::projection
