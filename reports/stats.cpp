// Median, spread and the Mann-Whitney U test. The exact p-value counts the arrangements of the
// two samples with a given U (a recurrence on sample sizes); the approximation is scipy's.
#include "reports/stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <boost/math/distributions/students_t.hpp>

#include "engine/check.h"

namespace pb::reports {

double median(std::vector<double> v) {
  PB_CHECK(!v.empty(), "median of no values");
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::vector<double> medians_over_passes(const std::vector<std::function<double()>>& points, int passes,
                                        const std::function<void(int)>& progress) {
  PB_CHECK(passes >= 1, "medians_over_passes needs at least one pass");
  std::vector<std::vector<double>> t(points.size());
  for (int pass = 0; pass < passes; ++pass) {
    if (progress) progress(pass);
    for (size_t k = 0; k < points.size(); ++k) t[k].push_back(points[k]());
  }
  std::vector<double> out;
  for (auto& each : t) out.push_back(median(std::move(each)));
  return out;
}

double mean(const std::vector<double>& v) {
  PB_CHECK(!v.empty(), "mean of no values");
  return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

double stddev(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  const double m = mean(v);
  double ss = 0;
  for (double x : v) ss += (x - m) * (x - m);
  return std::sqrt(ss / static_cast<double>(v.size() - 1));
}

double coefficient_of_variation(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  const double m = mean(v);
  return m == 0 ? 0 : stddev(v) / m;
}

namespace {

// P(U >= u) under the null for sample sizes (m, n), U an integer: the number of arrangements
// of m x's and n y's with U = u, over C(m+n, m). f(i, j, u) = f(i-1, j, u-j) + f(i, j-1, u)
// (the largest value is an x, beating all j y's, or a y, beating none). Counts are sums of
// positive terms, so doubles lose nothing but the last bits.
double exact_upper_tail(int m, int n, int u) {
  if (m > n) std::swap(m, n);  // the distribution is symmetric in (m, n); keep m small
  // prev[i] = f(i, j-1, .), cur[i] = f(i, j, .), for i = 0..m.
  std::vector<std::vector<double>> prev(m + 1), cur(m + 1);
  for (int i = 0; i <= m; ++i) prev[i] = {1.0};  // j = 0: only U = 0
  for (int j = 1; j <= n; ++j) {
    cur[0] = {1.0};
    for (int i = 1; i <= m; ++i) {
      cur[i].assign(static_cast<std::size_t>(i) * j + 1, 0.0);
      for (std::size_t k = 0; k < prev[i].size(); ++k) cur[i][k] += prev[i][k];
      for (std::size_t k = 0; k < cur[i - 1].size(); ++k) cur[i][k + j] += cur[i - 1][k];
    }
    std::swap(prev, cur);
  }
  const std::vector<double>& dist = prev[m];
  double total = 0, tail = 0;
  for (std::size_t k = 0; k < dist.size(); ++k) {
    total += dist[k];
    if (static_cast<int>(k) >= u) tail += dist[k];
  }
  return tail / total;
}

}  // namespace

MannWhitney mann_whitney_u(const std::vector<double>& x, const std::vector<double>& y) {
  PB_CHECK(!x.empty() && !y.empty(), "Mann-Whitney U needs two non-empty samples");
  const std::size_t n1 = x.size(), n2 = y.size(), n = n1 + n2;
  // Ranks of the pooled sample, ties given their average rank.
  std::vector<std::pair<double, int>> all;
  for (double v : x) all.push_back({v, 0});
  for (double v : y) all.push_back({v, 1});
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  double r1 = 0, tie_term = 0;
  for (std::size_t i = 0; i < n;) {
    std::size_t j = i;
    while (j < n && all[j].first == all[i].first) ++j;
    const double t = static_cast<double>(j - i), rank = (static_cast<double>(i + 1) + static_cast<double>(j)) / 2;
    for (std::size_t k = i; k < j; ++k)
      if (all[k].second == 0) r1 += rank;
    tie_term += t * t * t - t;
    i = j;
  }
  MannWhitney r;
  const double dn1 = static_cast<double>(n1), dn2 = static_cast<double>(n2), dn = static_cast<double>(n);
  r.u1 = r1 - dn1 * (dn1 + 1) / 2;
  r.u2 = dn1 * dn2 - r.u1;
  const double u = std::max(r.u1, r.u2);
  // scipy's rule, plus a size cap that keeps the exact count's cost bounded.
  r.exact = std::min(n1, n2) <= 8 && std::max(n1, n2) <= 1000 && tie_term == 0;
  if (r.exact) {
    r.p = 2 * exact_upper_tail(static_cast<int>(n1), static_cast<int>(n2), static_cast<int>(std::lround(u)));
  } else {
    const double mu = dn1 * dn2 / 2;
    const double var = dn1 * dn2 / 12 * ((dn + 1) - tie_term / (dn * (dn - 1)));
    if (var <= 0) {
      r.p = 1;  // every value equal: no evidence of a difference
    } else {
      const double z = (u - mu - 0.5) / std::sqrt(var);  // continuity correction
      r.p = std::erfc(z / std::sqrt(2.0));                // 2 * P(Z > z)
    }
  }
  r.p = std::clamp(r.p, 0.0, 1.0);
  return r;
}

double mann_whitney_min_p(int n1, int n2) {
  if (n1 < 1 || n2 < 1) return 1;
  std::vector<double> x(static_cast<std::size_t>(n1)), y(static_cast<std::size_t>(n2));
  std::iota(x.begin(), x.end(), 0.0);
  std::iota(y.begin(), y.end(), static_cast<double>(n1));
  return mann_whitney_u(x, y).p;
}

PairedT paired_t(const std::vector<double>& d, double alpha) {
  PB_CHECK(d.size() >= 2, "paired t: {} value(s), need at least 2", d.size());
  PB_CHECK(alpha > 0 && alpha < 1, "paired t: alpha {} outside (0, 1)", alpha);
  PairedT r;
  r.n = static_cast<int>(d.size());
  r.mean = mean(d);
  r.df = r.n - 1;
  const double se = stddev(d) / std::sqrt(static_cast<double>(r.n));
  if (!(se > 0)) {
    r.lo = r.hi = r.mean;
    r.p = r.mean == 0 ? 1 : 0;
    return r;
  }
  const boost::math::students_t dist(r.n - 1);
  const double t_crit = boost::math::quantile(dist, 1 - alpha / 2);
  r.lo = r.mean - t_crit * se;
  r.hi = r.mean + t_crit * se;
  r.p = 2 * boost::math::cdf(boost::math::complement(dist, std::abs(r.mean / se)));
  return r;
}

PairedT mean_of_means_t(const std::vector<std::vector<double>>& groups, double alpha) {
  PB_CHECK(!groups.empty(), "mean_of_means_t: no group");
  PB_CHECK(alpha > 0 && alpha < 1, "mean_of_means_t: alpha {} outside (0, 1)", alpha);
  double mean_all = 0;
  int n = 0;
  std::vector<TPart> parts;  // each group's s_b^2 / n_b with n_b - 1 degrees of freedom
  for (const std::vector<double>& g : groups) {
    PB_CHECK(g.size() >= 2, "mean_of_means_t: a group of {} value(s), need at least 2", g.size());
    n += static_cast<int>(g.size());
    mean_all += mean(g) / static_cast<double>(groups.size());
    parts.push_back({stddev(g) * stddev(g) / static_cast<double>(g.size()), static_cast<double>(g.size() - 1)});
  }
  return t_from_parts(mean_all, parts, 1.0 / static_cast<double>(groups.size()), n, alpha);
}

PairedT t_from_parts(double mean, const std::vector<TPart>& parts, double scale, int n, double alpha) {
  PB_CHECK(alpha > 0 && alpha < 1, "t interval: alpha {} outside (0, 1)", alpha);
  PairedT r;
  r.n = n;
  r.mean = mean;
  double var_sum = 0, df_den = 0;
  for (const TPart& p : parts) {
    PB_CHECK(p.dof > 0, "t interval: a part with {} degrees of freedom", p.dof);
    var_sum += p.var;
    df_den += p.var * p.var / p.dof;
  }
  const double se = std::sqrt(var_sum) * scale;
  if (!(se > 0)) {
    r.lo = r.hi = r.mean;
    r.p = r.mean == 0 ? 1 : 0;
    return r;
  }
  r.df = var_sum * var_sum / df_den;
  const boost::math::students_t dist(r.df);
  const double t_crit = boost::math::quantile(dist, 1 - alpha / 2);
  r.lo = r.mean - t_crit * se;
  r.hi = r.mean + t_crit * se;
  r.p = 2 * boost::math::cdf(boost::math::complement(dist, std::abs(r.mean / se)));
  return r;
}

PairedT welch_t(const std::vector<double>& x, const std::vector<double>& y, double alpha) {
  PB_CHECK(x.size() >= 2 && y.size() >= 2, "Welch t: {} and {} value(s), need at least 2 a side", x.size(), y.size());
  auto part = [](const std::vector<double>& v) {
    const double s = stddev(v), n = static_cast<double>(v.size());
    return TPart{s * s / n, n - 1};
  };
  return t_from_parts(mean(y) - mean(x), {part(x), part(y)}, 1.0, static_cast<int>(x.size() + y.size()), alpha);
}

}  // namespace pb::reports
