// The statistics under the reports: medians over passes, the Mann-Whitney U test, the paired t
// interval and the mean-of-means t interval, against known answers (scipy.stats 1.10).
#include "tests/test_reports_support.h"

namespace pb::reports {
namespace {

using namespace pb::reports::reports_test;

// ---- statistics ---------------------------------------------------------------------------

TEST(Stats, MedianMeanCv) {
  EXPECT_DOUBLE_EQ(median({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(median({4, 1, 2, 3}), 2.5);
  EXPECT_DOUBLE_EQ(mean({9, 10, 11}), 10);
  EXPECT_DOUBLE_EQ(stddev({9, 10, 11}), 1);                    // sample stddev, n - 1
  EXPECT_DOUBLE_EQ(coefficient_of_variation({9, 10, 11}), 0.1);
  EXPECT_DOUBLE_EQ(coefficient_of_variation({5}), 0);
}

TEST(Stats, MediansOverPassesOutlastASpellOfTwoPasses) {
  // 12 points timing k + 1 each, but any call within a spell of consecutive calls times 1000 (a
  // VM's core taken away): timed in 5 passes over all the points, a spell of two passes' calls
  // anywhere leaves every median alone, and one of three passes' sets every point it spans.
  const int n = 12, passes = 5;
  for (int spell : {2 * n, 3 * n})
    for (int start = 0; start + spell <= passes * n; ++start) {
      int call = 0;
      std::vector<std::function<double()>> points;
      for (int k = 0; k < n; ++k)
        points.push_back([&call, k, start, spell] {
          const bool slow = call >= start && call < start + spell;
          ++call;
          return slow ? 1000.0 : k + 1.0;
        });
      std::vector<int> seen;
      const std::vector<double> m = medians_over_passes(points, passes, [&](int pass) { seen.push_back(pass); });
      EXPECT_EQ(call, passes * n);
      EXPECT_EQ(seen, (std::vector<int>{0, 1, 2, 3, 4}));
      ASSERT_EQ(m.size(), static_cast<size_t>(n));
      for (int k = 0; k < n; ++k) EXPECT_EQ(m[k], spell == 2 * n ? k + 1.0 : 1000.0) << "spell " << spell << " from call " << start << ", point " << k;
    }
  EXPECT_THROW(medians_over_passes({[] { return 1.0; }}, 0), std::exception);
}

TEST(MannWhitney, ExactSmallSamplesMatchScipy) {
  // scipy.stats.mannwhitneyu(x, y) (method='auto': exact, no ties, a sample of at most 8).
  auto a = mann_whitney_u({1, 2, 3}, {4, 5, 6});
  EXPECT_TRUE(a.exact);
  EXPECT_DOUBLE_EQ(a.u1, 0);
  EXPECT_DOUBLE_EQ(a.u2, 9);
  EXPECT_NEAR(a.p, 0.1, 1e-12);  // 2 / C(6, 3)
  EXPECT_NEAR(mann_whitney_u({1, 2, 3, 4, 5}, {6, 7, 8, 9, 10}).p, 0.007936507936507936, 1e-12);
  // scipy's documentation example (males vs females): U1 = 17, p = 0.1111...
  auto m = mann_whitney_u({19, 22, 16, 29, 24}, {20, 11, 17, 12});
  EXPECT_DOUBLE_EQ(m.u1, 17);
  EXPECT_NEAR(m.p, 0.1111111111111111, 1e-12);
  // Unequal sizes, 5 vs 12.
  auto u = mann_whitney_u({3.1, 4.7, 2.2, 8.9, 5.5}, {6.0, 7.2, 9.1, 10.4, 5.9, 8.0, 11.3, 6.6, 12.0, 4.0, 7.7, 9.9});
  EXPECT_TRUE(u.exact);
  EXPECT_DOUBLE_EQ(u.u1, 9);
  EXPECT_NEAR(u.p, 0.02682611506140918, 1e-12);
}

TEST(MannWhitney, NormalApproximationWithTiesMatchesScipy) {
  // Ties: normal approximation with tie correction and continuity correction.
  auto t = mann_whitney_u({1, 2, 2, 3, 4, 5, 6, 7, 8, 9}, {2, 4, 6, 8, 10, 12, 14, 16, 18, 20});
  EXPECT_FALSE(t.exact);
  EXPECT_DOUBLE_EQ(t.u1, 18.5);
  EXPECT_NEAR(t.p, 0.018795060662434297, 1e-9);
  // Both samples above 8: normal approximation.
  std::vector<double> x, y;
  for (int i = 1; i <= 10; ++i) {
    x.push_back(i);
    y.push_back(i + 0.5);
  }
  auto n = mann_whitney_u(x, y);
  EXPECT_FALSE(n.exact);
  EXPECT_DOUBLE_EQ(n.u1, 45);
  EXPECT_NEAR(n.p, 0.7337299956962472, 1e-9);
  // All equal: no evidence of a difference.
  EXPECT_DOUBLE_EQ(mann_whitney_u({1, 1, 1}, {1, 1, 1}).p, 1.0);
}

TEST(MannWhitney, SmallestPossiblePValue) {
  EXPECT_NEAR(mann_whitney_min_p(2, 2), 2.0 / 6, 1e-12);
  EXPECT_NEAR(mann_whitney_min_p(3, 3), 0.1, 1e-12);
  EXPECT_NEAR(mann_whitney_min_p(4, 4), 2.0 / 70, 1e-12);
}

TEST(PairedT, MatchesScipy) {
  // scipy.stats.ttest_1samp(d, 0) and its confidence_interval (scipy 1.10).
  const PairedT a = paired_t({0.1, 0.2, 0.3}, 0.05);
  EXPECT_EQ(a.n, 3);
  EXPECT_NEAR(a.mean, 0.2, 1e-12);
  EXPECT_NEAR(a.lo, -0.048413771184375176, 1e-9);
  EXPECT_NEAR(a.hi, 0.44841377118437525, 1e-9);
  EXPECT_NEAR(a.p, 0.0741799002274485, 1e-9);
  const std::vector<double> d = {0.05, -0.02, 0.08, 0.01, 0.03};
  const PairedT b = paired_t(d, 0.05);
  EXPECT_NEAR(b.p, 0.152920150006137, 1e-9);
  EXPECT_NEAR(b.lo, -0.017281156420198493, 1e-9);
  EXPECT_NEAR(b.hi, 0.07728115642019849, 1e-9);
  EXPECT_NEAR(paired_t(d, 0.10).lo, -0.006304042512332325, 1e-9);
  // No spread: a zero-width interval.
  const PairedT flat = paired_t({0.02, 0.02, 0.02}, 0.05);
  EXPECT_DOUBLE_EQ(flat.lo, 0.02);
  EXPECT_DOUBLE_EQ(flat.hi, 0.02);
  EXPECT_EQ(flat.p, 0);
  EXPECT_EQ(paired_t({0, 0}, 0.05).p, 1);
  EXPECT_THROW(paired_t({0.1}, 0.05), Error);
}

TEST(MeanOfMeansT, WelchSatterthwaiteByHand) {
  // Expected values from the formulas with numpy and scipy.stats.t (scipy 1.10).
  const PairedT r = mean_of_means_t({{0.1, 0.2, 0.3}, {0.0, 0.05, -0.05, 0.1}}, 0.05);
  EXPECT_EQ(r.n, 7);
  EXPECT_NEAR(r.mean, 0.1125, 1e-12);
  EXPECT_NEAR(r.df, 3.234718826405868, 1e-9);
  EXPECT_NEAR(r.lo, 0.011441801126918713, 1e-9);
  EXPECT_NEAR(r.hi, 0.2135581988730813, 1e-9);
  EXPECT_NEAR(r.p, 0.03781508223836954, 1e-9);
  // One group: the one-sample t interval.
  const PairedT one = mean_of_means_t({{0.1, 0.2, 0.3}}, 0.05);
  EXPECT_NEAR(one.lo, paired_t({0.1, 0.2, 0.3}, 0.05).lo, 1e-12);
  EXPECT_NEAR(one.df, 2, 1e-12);
  EXPECT_THROW(mean_of_means_t({{0.1, 0.2}, {0.3}}, 0.05), Error);
}

}  // namespace
}  // namespace pb::reports
