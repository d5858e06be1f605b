// parbench plan: one training step of a strategy as its plan -- every worker's actions with their
// lanes, buffers and bytes -- printed as text, CSV (one row per action) or JSON; or a plan file
// checked by the validator (--check FILE).
#include <fstream>
#include <iostream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "bench/cli.h"
#include "engine/check.h"
#include "engine/fsutil.h"
#include "plan/check.h"
#include "plan/memory.h"
#include "plan/plan.h"
#include "strategies/plan_gen.h"

namespace pb {

namespace {

std::vector<Flag> plan_flags() {
  std::vector<Flag> flags = training_flags();  // as train's: the same strategy options
  flags.push_back({"batch", "B", "global batch size", "8"});
  flags.push_back({"format", "F", "text, csv or json", "text"});
  flags.push_back({"out", "FILE", "write the plan there instead of to stdout", ""});
  flags.push_back({"check", "FILE", "validate a plan file (JSON, as --format json writes) instead; exit 1 when it is refused", ""});
  return flags;
}

}  // namespace

int cmd_plan(const std::vector<std::string>& args);  // declared in bench/main.cpp

int cmd_plan(const std::vector<std::string>& args) {
  Flags f("parbench plan",
          "Prints one training step of a strategy as its plan: per worker, the ordered actions (forward,\n"
          "backward-data, backward-weights, loss, send/recv, collectives, waits, copies, optimizer) with\n"
          "their lane, buffers and bytes -- the program the strategy runs, from the rules it runs by.\n"
          "The plan is validated first (matching sends and receives, collective order, no deadlock, layer\n"
          "coverage, ordering). --check FILE validates a plan file instead.",
          plan_flags());
  if (!f.parse(args)) return 0;
  if (!f.positional().empty()) throw UsageError(fmt::format("unexpected argument '{}'", f.positional()[0]));
  const std::string format = f.str("format");
  if (format != "text" && format != "csv" && format != "json")
    throw UsageError(fmt::format("--format expects text, csv or json, got '{}'", format));
  Plan p;
  NetPlan plan;
  if (f.has("check")) {
    p = read_plan_file(f.str("check"));
  } else {
    const NetSpec net = resolve_workload(f.str("workload"), workload_options(f, device_kind(f.str("device-kind"))));
    plan = plan_net(net);
    const int64_t batch = f.integer("batch");
    if (batch < 1) throw UsageError(fmt::format("--batch must be at least 1, got {}", batch));
    StrategyOptions so = strategy_options(f, worker_count(f), batch);
    p = make_plan(strategy_name(f, f.str("strategy"), true), plan, so, batch);
    p.identity = plan_identity(f, net, plan);  // what run --plan and project --plan check it against
  }
  const std::vector<PlanIssue> issues = validate_plan(p);
  if (!issues.empty()) {
    fmt::print(stderr, "parbench plan: {} refused: {} issue(s)\n{}", f.has("check") ? f.str("check") : p.strategy,
               issues.size(), issues_text(issues));
    return 1;
  }
  std::ostringstream os;
  if (format == "text") {
    write_plan_text(os, p);
    if (!f.has("check")) {  // what its buffers add up to per worker, with an unmeasured workspace
      const MemoryEstimate m = plan_memory(p, plan);
      std::vector<std::string> each;
      for (std::size_t w = 0; w < m.per_worker.size(); ++w)
        each.push_back(fmt::format("worker {} {}", w, bytes_str(m.per_worker[w])));
      os << fmt::format("memory per worker (its buffers, and the im2col bound for the library's workspace): {}\n",
                        fmt::join(each, ", "));
    }
  } else if (format == "csv") write_plan_csv(os, p);
  else os << plan_to_json(p);
  if (f.has("out")) write_file_atomic(f.str("out"), os.str());
  else std::cout << os.str();
  if (f.has("check") && !f.has("out") && format == "text") fmt::print(stderr, "{}: valid\n", f.str("check"));
  return 0;
}

}  // namespace pb
