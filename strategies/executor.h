// The executor: runs one worker's actions of a plan (plan/plan.h) in order, one call per action.
// It is the only code that starts or waits for a step's communication; each computation it hands
// to the strategy, which knows the worker's model and buffers.
#pragma once

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "engine/comm.h"
#include "engine/trace.h"
#include "plan/plan.h"

namespace pb {

class PlanExecutor {
 public:
  struct Binding {
    // Where plan buffer `buffer` of this worker lives for action `a` (a region: e.g. a bucket's
    // range), as the action reads it or (`write`) writes it.
    std::function<float*(const Action& a, int buffer, bool write)> at;
    // The same for a buffer kept in bf16 (PlanBuffer::dtype): where an all-gather reads or writes it.
    std::function<Bf16*(const Action& a, int buffer, bool write)> at16;
    // Plan group `group`'s communicator and this worker's rank in it.
    std::function<std::pair<Communicator*, int>(int group)> comm;
    // A computation: Forward, Recompute, BackwardData/Weights, Loss, Copy, Free, Optimizer.
    std::function<void(const Action& a)> compute;
    // Where the spans go: each carries the id of the action it ran for.
    Tracer* tracer = nullptr;
  };

  PlanExecutor(const Plan& plan, int worker, Binding binding);

  // Runs every action of the worker.
  void run();
  // From within a computation that covers several of the plan's computations in one call (ddp's
  // whole backward, its buckets closing as it goes): runs the actions after the cursor up to the
  // first computation that `covered` says the call has not done yet, skipping those it has; the
  // call's spans from then on carry that computation's id.
  void run_through(const std::function<bool(const Action&)>& covered);

 private:
  void exec(const Action& a);
  void mark(int id) {
    if (b_.tracer) b_.tracer->set_action(id);
  }
  void collective(const Action& a);
  void wait(const Action& a);
  float* buf(const Action& a, bool write);

  const Plan& plan_;
  int worker_;
  Binding b_;
  const std::vector<Action>& actions_;
  std::size_t next_ = 0;
  std::vector<int64_t> transfer_;  // per action: its p2p transfer's id
};

bool is_computation(ActionKind k);

}  // namespace pb
