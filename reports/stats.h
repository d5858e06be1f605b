// The statistics reports and comparisons use: median, spread, t intervals (one-sample, Welch's
// two-sample, and a mean of independent means: the gate's), and the two-sided Mann-Whitney U
// test (exact for small tie-free samples, normal approximation with tie correction otherwise,
// following scipy.stats.mannwhitneyu's method='auto' and use_continuity=True).
#pragma once

#include <functional>
#include <vector>

namespace pb::reports {

double median(std::vector<double> v);  // v non-empty
// Each of `points` (a timing) called `passes` times, the passes going over all the points in turn
// rather than one point's calls back to back; each point's median. A slow spell shorter than two
// passes so sets at most two of a point's timings -- never the median of 5 or more. progress(k)
// before pass k (0-based), if given.
std::vector<double> medians_over_passes(const std::vector<std::function<double()>>& points, int passes,
                                        const std::function<void(int)>& progress = {});
double mean(const std::vector<double>& v);
// Sample standard deviation (n - 1), 0 for fewer than two values.
double stddev(const std::vector<double>& v);
// Coefficient of variation stddev / mean; 0 when the mean is 0 or there is one value.
double coefficient_of_variation(const std::vector<double>& v);

struct MannWhitney {
  double u1 = 0;      // U of the first sample: pairs (x, y) with x > y, ties count 1/2
  double u2 = 0;      // n1 * n2 - u1
  double p = 1;       // two-sided
  bool exact = false; // exact null distribution (min(n1, n2) <= 8, no ties), else normal
};

// Requires both samples non-empty.
MannWhitney mann_whitney_u(const std::vector<double>& x, const std::vector<double>& y);
// The smallest two-sided p-value any data could give with these sample sizes (all of one
// sample below all of the other, no ties): when it exceeds alpha the test can never reject.
double mann_whitney_min_p(int n1, int n2);

// The one-sample t interval and test on paired differences d (here: log time ratios of runs
// made side by side), as scipy.stats.ttest_1samp(d, 0) with its confidence_interval.
struct PairedT {
  int n = 0;
  double mean = 0;     // of d
  double lo = 0, hi = 0;  // mean -+ t(1 - alpha/2, n-1) * sd / sqrt(n)
  double p = 1;        // two-sided, H0: mean 0
  double df = 0;       // degrees of freedom of the t distribution used
};
// Requires at least two values; alpha in (0, 1). Identical values give a zero-width interval
// (p 1 when they are all 0, else 0).
PairedT paired_t(const std::vector<double>& d, double alpha);
// The t interval for the mean of several groups' means, each group with its own variance
// (Welch-Satterthwaite degrees of freedom): groups[b] are benchmark b's log ratios over the
// pairs, independent between benchmarks. mean = mean of the group means; se^2 = sum(s_b^2 / n_b)
// / B^2; df = (sum s_b^2/n_b)^2 / sum((s_b^2/n_b)^2 / (n_b - 1)). Every group needs at least two
// values. No spread at all gives a zero-width interval.
PairedT mean_of_means_t(const std::vector<std::vector<double>>& groups, double alpha);

// One independent part of a t interval's standard error: the variance of one sample mean
// (s^2 / n) and its degrees of freedom (n - 1).
struct TPart {
  double var = 0;
  double dof = 0;
};
// The t interval for `mean` whose squared standard error is scale^2 * the sum of the parts'
// variances, with Welch-Satterthwaite degrees of freedom; n is reported as given. No spread at
// all gives a zero-width interval (callers that must not act on one check for it).
PairedT t_from_parts(double mean, const std::vector<TPart>& parts, double scale, int n, double alpha);
// Welch's two-sample t on mean(y) - mean(x), as scipy.stats.ttest_ind(y, x, equal_var=False).
// Requires at least two values a side.
PairedT welch_t(const std::vector<double>& x, const std::vector<double>& y, double alpha);

}  // namespace pb::reports
