// Interpreters of a plan that need no device: the ordering checker (in the spirit of PyTorch's
// CUDA sanitizer) and the validator. Both run the plan's workers step by step, as far as each can
// go: a receive completes once its send has started, a send once its receive has, a collective
// once every member has started it; a blocking call or a Wait holds its worker until then.
#pragma once

#include <string>
#include <vector>

#include "plan/plan.h"

namespace pb {

// A finding: the worker and action it is about (action -1: the worker as a whole).
struct PlanIssue {
  int worker = -1;
  int action = -1;
  std::string message;  // names the worker, the action and, for an ordering race, the buffer
};

// The ordering checker: a vector clock per lane (each worker's compute lane, and each
// communication as its own lane: started after the compute queued before it, complete after its
// peers started theirs, ordered before the compute after its Wait). Every read of a buffer must
// be ordered after its last write, every write after its last write and the reads since.
// Also reports a deadlock (workers that cannot go on) and mismatched partners, as validate_plan.
std::vector<PlanIssue> check_plan_order(const Plan& p);

// The validator: ids and references, every send has its receive (same count, same group) and
// every collective the same kind, count and root on every member in the same order, no deadlock,
// every async action waited for once, every layer's forward and both backwards exactly once per
// micro-batch and replica (when p.layers is known), and the checker's ordering.
std::vector<PlanIssue> validate_plan(const Plan& p);

// "worker 1 action 7 (send to 2, 4096 B): <message>" lines, one per issue.
std::string issues_text(const std::vector<PlanIssue>& issues);

}  // namespace pb
