// reports/units.h: times in the unit that fits, as train, run and calibrate print them.
#include <gtest/gtest.h>

#include <limits>

#include "reports/units.h"

namespace pb::reports {
namespace {

TEST(Units, EachMagnitudeGetsItsOwnUnit) {
  EXPECT_EQ(format_time(2.5), "2.50 s");
  EXPECT_EQ(format_time(61.0), "61.0 s");
  EXPECT_EQ(format_time(0.0123), "12.3 ms");
  EXPECT_EQ(format_time(0.00123), "1.23 ms");
  EXPECT_EQ(format_time(0.000812), "812 us");
  EXPECT_EQ(format_time(2e-6), "2.00 us");   // "0.00 ms" before
  EXPECT_EQ(format_time(1e-9), "1.00 ns");   // "1e-06 ms" before
  EXPECT_EQ(format_time(4e-10), "0.40 ns");
  EXPECT_EQ(format_time(0.25), "250 ms");
  EXPECT_EQ(format_time(1234.0), "1234 s");
}

TEST(Units, ThreeSignificantDigitsAcrossTheRoundingEdges) {
  EXPECT_EQ(format_time(0.0099996), "10.0 ms");  // not "10.00 ms"
  EXPECT_EQ(format_time(0.099996), "100 ms");    // not "100.0 ms"
  EXPECT_EQ(format_time(0.0015), "1.50 ms");
  EXPECT_EQ(format_time(-0.002), "-2.00 ms");
}

TEST(Units, ZeroAndNonFiniteStayReadable) {
  EXPECT_EQ(format_time(0), "0 s");
  EXPECT_EQ(format_time(std::numeric_limits<double>::infinity()), "inf s");
  EXPECT_EQ(format_time(std::numeric_limits<double>::quiet_NaN()), "nan s");
}

TEST(Units, ASpreadCanBeWrittenInTheMediansUnit) {
  const TimeUnit u = time_unit_for(0.0042);
  EXPECT_STREQ(u.name, "ms");
  EXPECT_EQ(time_digits(0.00031, u), "0.31");
  EXPECT_EQ(time_digits(0.0042, u), "4.20");
}

}  // namespace
}  // namespace pb::reports
