// Iteration percentiles and the straggler rule (reports/straggler.h).
#include "reports/straggler.h"

#include <algorithm>
#include <cmath>

#include "engine/check.h"

namespace pb::reports {

double percentile(std::vector<double> v, double p) {
  PB_CHECK(!v.empty(), "the percentile of no values");
  std::sort(v.begin(), v.end());
  const double at = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(v.size() - 1);
  const std::size_t lo = static_cast<std::size_t>(std::floor(at));
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (at - static_cast<double>(lo));
}

Straggler find_straggler(const std::vector<std::vector<double>>& compute_s) {
  Straggler s;
  if (compute_s.size() < 2) return s;
  std::vector<double> medians;
  for (const auto& it : compute_s) {
    PB_CHECK(!it.empty(), "a rank without iterations");
    medians.push_back(percentile(it, 50));
  }
  // The median worker's: the lower of the two middle ones for an even count, so with 2 workers
  // the slower is compared with the faster.
  std::vector<double> sorted = medians;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[(sorted.size() - 1) / 2];
  if (median <= 0) return s;
  for (std::size_t r = 0; r < compute_s.size(); ++r) {
    const double ratio = medians[r] / median;
    if (ratio > s.ratio) s.ratio = ratio;
    const auto& it = compute_s[r];
    double mean = 0, var = 0;
    for (double x : it) mean += x;
    mean /= static_cast<double>(it.size());
    for (double x : it) var += (x - mean) * (x - mean);
    const double sd = it.size() > 1 ? std::sqrt(var / static_cast<double>(it.size() - 1)) : 0.0;
    const bool slow = ratio > 1.10 && medians[r] - median > sd;
    if (slow && (s.rank < 0 || medians[r] > medians[s.rank])) s.rank = static_cast<int>(r);
  }
  return s;
}

}  // namespace pb::reports
