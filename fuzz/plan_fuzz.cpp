// libFuzzer target: the plan file reader that `plan --check`, `run --plan` and `project --plan`
// use, then the validator and the writers on what it read. Any input must give a plan (valid or
// with issues) or a pb::UsageError.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "engine/check.h"
#include "plan/check.h"
#include "plan/plan.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const pb::Plan p = pb::plan_from_json(std::string(reinterpret_cast<const char*>(data), size), "fuzz.plan.json");
    const std::vector<pb::PlanIssue> issues = pb::validate_plan(p);
    pb::issues_text(issues);
    std::ostringstream os;
    pb::write_plan_text(os, p);
    pb::write_plan_csv(os, p);
    // What the writer writes, the reader reads back.
    const std::string json = pb::plan_to_json(p);
    if (pb::plan_to_json(pb::plan_from_json(json, "again")) != json) __builtin_trap();
  } catch (const pb::UsageError&) {
  }
  return 0;
}
