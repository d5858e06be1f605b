// A `project --validate --out` file: each configuration's measured and predicted step, read back
// to pool several validations (`project --combine`).
#pragma once

#include <string>
#include <vector>

namespace pb::projection {

struct ValidationRow {
  std::string name;
  int threads = 0;
  std::vector<double> measured_times_s;  // every timed iteration of the run (seconds); else measured_s alone
  double measured_s = 0, predicted_s = 0, compute_s = 0, exposed_comm_s = 0, idle_s = 0;
};
struct Validation {
  std::string source;
  std::vector<ValidationRow> rows;
};
// Throws pb::UsageError "SOURCE: field: what was expected".
Validation parse_validation(const std::string& text, const std::string& source);
Validation load_validation(const std::string& path);

}  // namespace pb::projection
