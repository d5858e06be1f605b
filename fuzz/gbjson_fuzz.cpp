// libFuzzer target: the Google Benchmark JSON reader that `report` and `compare` use, then the
// report and the comparison built from what it read. Any input must give results or a
// pb::UsageError.
#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/check.h"
#include "reports/compare.h"
#include "reports/gbjson.h"
#include "reports/table.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const pb::reports::RunFile f =
        pb::reports::parse_run_json(std::string(reinterpret_cast<const char*>(data), size), "fuzz.json");
    const pb::reports::Report rep = pb::reports::build_report({f});
    pb::reports::report_markdown(rep);
    pb::reports::report_csv(rep);
    pb::reports::report_json(rep);
    const pb::reports::Comparison c = pb::reports::compare_runs(f, f, pb::reports::CompareOptions{}, true);
    pb::reports::comparison_markdown(c, f.source, f.source);
  } catch (const pb::UsageError&) {
  }
  return 0;
}
