// A per-layer profile in the profile.json format for `project --validate` when no --profile is
// given: `parbench profile`'s own timing (engine/layer_profile.h) at each batch size.
#include "bench/project.h"

#include <algorithm>
#include <exception>
#include <memory>
#include <mutex>

#include "engine/check.h"
#include "engine/layer_profile.h"
#include "engine/spin_wait.h"
#include "strategies/pool.h"

namespace pb {

projection::Profile engine_profile(const NetPlan& plan, const std::string& workload, std::vector<int64_t> batches,
                                   int threads, int reps, int concurrent) {
  std::sort(batches.begin(), batches.end());
  batches.erase(std::unique(batches.begin(), batches.end()), batches.end());
  PB_CHECK(!batches.empty() && batches.front() >= 1, "profile: no batch sizes");
  PB_CHECK(concurrent >= 1, "profile: concurrent workers must be >= 1");
  projection::Profile p;
  p.batches = batches;
  p.threads = threads;
  p.device_kind = "cpu";
  p.context = {{"workload", workload}, {"device_kind", "cpu"}, {"threads", threads},
               {"concurrent_workers", concurrent},
               {"source", "per-layer timing of parbench profile, run by parbench project"}};
  p.concurrent = concurrent;
  for (const LayerPlan& l : plan.layers) {
    projection::LayerProfile lp;
    lp.index = l.index;
    lp.type = layer_type_name(l.spec.type);
    lp.in = l.in;
    lp.out = l.out;
    lp.params = l.weight_numel + l.bias_numel;
    lp.forward_flops = l.forward_flops;
    lp.activation_bytes_per_sample = static_cast<double>(numel_of(l.out)) * sizeof(float);
    p.layers.push_back(std::move(lp));
  }
  std::vector<double> adam;
  // `concurrent` workers, each with its own backend and `threads` threads, time the same layers
  // at once, as that many workers of a step compute side by side; each time is their mean (with
  // more than one, of the means over the repetitions) at the slowest one's pace (at_slowest_pace).
  // A barrier before every timed layer call keeps them on the same layer at the same time, as a
  // data-parallel step's workers are: two heavy convolutions on cores that share vector units slow
  // each other more than a convolution beside a ReLU does. They run on a WorkerPool, one-thread
  // workers bound to cores as a step's are (strategies/group.cpp).
  std::vector<std::vector<NetProfile>> got(static_cast<std::size_t>(concurrent));
  std::vector<std::exception_ptr> err(static_cast<std::size_t>(concurrent));
  // It polls before it sleeps, as a step's workers meet (engine/spin_wait.h): a thread woken from
  // sleep at every layer timed its microsecond layers 2-10x slower than one that polled.
  std::mutex mu;
  SpinCondition cv;
  int waiting = 0;
  int64_t generation = 0;
  bool broken = false;  // a worker failed: nobody waits for it
  auto barrier = [&] {
    auto lk = hold_polling(mu);
    if (broken) return;
    if (++waiting == concurrent) {
      waiting = 0, ++generation;
      cv.notify_all();
      return;
    }
    const int64_t g = generation;
    cv.wait(lk, [&] { return generation != g || broken; });
  };
  auto work = [&](int w) {
    std::unique_ptr<Backend> be;
    try {
      BackendOptions bo;
      bo.threads = threads;
      be = make_backend(cpu(0), bo);
      barrier();
      ProfileOptions po{0, 1, reps, 0, concurrent > 1};
      if (concurrent > 1) po.sync = barrier;
      for (int64_t b : batches) {
        po.batch = b;
        got[static_cast<std::size_t>(w)].push_back(profile_net(plan, *be, po));
      }
    } catch (...) {
      err[static_cast<std::size_t>(w)] = std::current_exception();
      const auto lk = hold_polling(mu);
      broken = true;
      cv.notify_all();
    }
  };
  WorkerPool(concurrent, WorkerPool::cores_for(concurrent, threads)).run(concurrent, work);
  for (const std::exception_ptr& e : err)
    if (e) std::rethrow_exception(e);
  std::vector<double> slowest;
  for (std::size_t j = 0; j < batches.size(); ++j) {
    std::vector<NetProfile> at_j;
    for (const auto& g : got) at_j.push_back(g[j]);
    double s = 1;
    const NetProfile one = at_slowest_pace(at_j, &s);
    slowest.push_back(s);
    for (std::size_t i = 0; i < p.layers.size(); ++i) {
      p.layers[i].forward_s.push_back(one.layers[i].forward_s);
      p.layers[i].backward_data_s.push_back(one.layers[i].backward_data_s);
      p.layers[i].backward_weights_s.push_back(one.layers[i].backward_weights_s);
    }
    p.loss_s.push_back(one.loss_s);
    adam.push_back(one.optimizer_s);
  }
  p.context["slowest_worker_factor"] = slowest;
  std::sort(adam.begin(), adam.end());
  p.optimizer_s_per_param = adam[adam.size() / 2] / static_cast<double>(std::max<int64_t>(plan.param_count, 1));
  return p;
}

}  // namespace pb
