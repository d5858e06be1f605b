// The spread of a row's iterations (p50, p99) and its straggler: the rank whose compute holds the
// others back (docs/reports.md, "Stragglers").
#pragma once

#include <vector>

namespace pb::reports {

// The p-th percentile (0..100) of v, linearly interpolated between the closest ranks (numpy's
// default); v must not be empty.
double percentile(std::vector<double> v, double p);

struct Straggler {
  int rank = -1;     // the rank named, or -1: none
  double ratio = 0;  // the slowest rank's median compute time / the median rank's
};

// compute_s[r][i]: rank r's compute seconds in iteration i (every rank the same iterations).
// A rank is named when its median compute time is more than 10% above the median over the ranks
// of their medians (the lower middle one of an even count: a worker's), and that excess is larger
// than the spread of its own iterations (their standard deviation); of several, the slowest.
// Fewer than 2 ranks: none.
Straggler find_straggler(const std::vector<std::vector<double>>& compute_s);

}  // namespace pb::reports
