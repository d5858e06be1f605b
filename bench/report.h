// The run folder's charts beyond throughput.png and its report.html (scripts/chart.py,
// scripts/html_report.py, both with /usr/bin/python3 or $PARBENCH_PYTHON).
#pragma once

#include <string>

namespace pb {

// In `dir` (a run folder with report.json, report.md and results.json): pareto.png and
// breakdown.png, then report.html, one self-contained page of the tables, every chart there,
// the context and links to the traces. Warnings, not errors, when python or matplotlib is
// missing; a page made but not writable throws pb::Error. Returns whether report.html was written.
bool write_run_html(const std::string& dir);

}  // namespace pb
