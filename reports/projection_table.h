// The tables `parbench project` prints from its predictions: run's comparison table with only the
// columns a projection fills (no repetitions, spread or measured bubble), the parts of each step,
// the best strategy per device count, and each prediction as JSON.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "scenarios/scenarios.h"
#include "reports/table.h"

namespace pb::projection {

// One table's predictions: a scaling mode and batch, every configuration at every device count.
struct Projected {
  std::string scaling;
  int64_t batch = 0;
  std::vector<Prediction> rows;
};

// The rows as run's table rows (for the chart and the JSON); `family` keeps one row per strategy
// and device count (the fastest variant that fits). `scaled`, how the profile's times were taken
// to the machine, joins the title.
reports::Group as_report_group(const Projected& pr, const Profile& p, const Machine& m, bool family,
                               const std::string& scaled);
// The projected comparison table of each group: step time, throughput, speedup, efficiency (one
// above 100% or a speedup above N marked, with why), memory and the step's parts.
std::string projected_markdown(const reports::Report& r);
std::string parts_markdown(const Projected& pr, const Machine& m);
std::string best_markdown(const std::vector<Projected>& all);
nlohmann::json prediction_json(const Prediction& r);

}  // namespace pb::projection
