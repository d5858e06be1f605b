// The straggler rule and iteration percentiles (reports/straggler.h) on hand-made compute times.
#include <gtest/gtest.h>

#include <vector>

#include "reports/straggler.h"

namespace pb::reports {
namespace {

TEST(Straggler, PercentileInterpolatesBetweenRanks) {
  EXPECT_DOUBLE_EQ(percentile({3, 1, 2}, 50), 2);
  EXPECT_DOUBLE_EQ(percentile({1, 2, 3, 4}, 50), 2.5);
  EXPECT_DOUBLE_EQ(percentile({1, 2, 3, 4, 5}, 99), 4.96);  // numpy.percentile's linear rule
  EXPECT_DOUBLE_EQ(percentile({7}, 99), 7);
}

TEST(Straggler, NamesTheRankClearlySlowerThanTheMedian) {
  // Rank 2 computes 1.5x the others, each rank's iterations within 2% of each other.
  const Straggler s = find_straggler({{1.00, 1.01, 0.99}, {1.02, 1.00, 1.01}, {1.50, 1.52, 1.49}, {0.99, 1.00, 1.01}});
  EXPECT_EQ(s.rank, 2);
  EXPECT_NEAR(s.ratio, 1.50 / 1.00, 1e-9);  // against the lower middle worker of 4
}

TEST(Straggler, NamesNoneWithinTenPercent) {
  const Straggler s = find_straggler({{1.00, 1.00, 1.00}, {1.08, 1.08, 1.08}});
  EXPECT_EQ(s.rank, -1);
  EXPECT_GT(s.ratio, 1.0);
}

TEST(Straggler, NamesNoneWithinItsOwnNoise) {
  // Rank 1 is 60% above rank 0, but its own iterations spread wider than that.
  const Straggler s = find_straggler({{1.0, 1.0, 1.0}, {0.6, 1.6, 2.6}});
  EXPECT_EQ(s.rank, -1);
  EXPECT_GT(s.ratio, 1.1);
}

TEST(Straggler, OneRankNamesNone) {
  EXPECT_EQ(find_straggler({{5.0, 5.0}}).rank, -1);
}

}  // namespace
}  // namespace pb::reports
