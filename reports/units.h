// Times for people: the unit that fits the value (ns, us, ms, s), as hyperfine prints them,
// instead of a fixed unit that shows 2 us as "0.00 ms" or "1e-06 ms".
#pragma once

#include <string>

namespace pb::reports {

struct TimeUnit {
  const char* name;  // "ns", "us", "ms", "s"
  double seconds;    // one unit in seconds
};

// The largest unit in which |seconds| is at least 1 (ns below 1 ns; 0 and non-finite: s).
TimeUnit time_unit_for(double seconds);
// The value in the given unit with three significant digits (at least: 1234 ms stays 1234),
// without the unit: 1.23, 12.3, 123, 1234.
std::string time_digits(double seconds, TimeUnit unit);
// The value in its own unit: "1.23 ms", "812 us", "2.50 s".
std::string format_time(double seconds);

}  // namespace pb::reports
