// Time formatting in the unit that fits (reports/units.h).
#include "reports/units.h"

#include <cmath>

#include <fmt/format.h>

namespace pb::reports {

TimeUnit time_unit_for(double seconds) {
  const double a = std::abs(seconds);
  if (!std::isfinite(a) || a == 0 || a >= 1) return {"s", 1};
  if (a >= 1e-3) return {"ms", 1e-3};
  if (a >= 1e-6) return {"us", 1e-6};
  return {"ns", 1e-9};
}

std::string time_digits(double seconds, TimeUnit unit) {
  if (!std::isfinite(seconds)) return fmt::format("{}", seconds);
  const double v = seconds / unit.seconds, a = std::abs(v);
  // Rounding may carry into the next digit (9.996 -> "10.0"): decide on the rounded value.
  if (a == 0) return "0";
  if (std::round(a * 100) / 100 < 10) return fmt::format("{:.2f}", v);
  if (std::round(a * 10) / 10 < 100) return fmt::format("{:.1f}", v);
  return fmt::format("{:.0f}", v);
}

std::string format_time(double seconds) {
  const TimeUnit u = time_unit_for(seconds);
  return time_digits(seconds, u) + " " + u.name;
}

}  // namespace pb::reports
