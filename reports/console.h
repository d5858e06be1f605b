// `parbench run`'s console: one short line per configuration (strategy, devices, the median
// time per iteration and its spread, throughput, peak memory, where the device time went),
// taken from the report's row, so the console and report.json say the same. Every counter
// stays in the JSON record; Google Benchmark's own console is `run --gbench-console`.
#pragma once

#include <string>
#include <vector>

#include "reports/table.h"

namespace pb::reports {

// The lines above the first configuration: which statistic each column is.
std::vector<std::string> console_header();
// The columns' headings, under each table's title.
std::string console_columns();
// One configuration's line (its error instead, when it failed).
std::string console_line(const Row& r);

}  // namespace pb::reports
