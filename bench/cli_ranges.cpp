// The accepted range of every integer flag, one table for every command.
#include <limits>
#include <map>

#include "bench/cli.h"
#include "engine/check.h"

namespace pb {

namespace {

constexpr int64_t kUnranged = std::numeric_limits<int64_t>::min();

}  // namespace

IntRange int_flag_range(const std::string& flag) {
  constexpr int64_t kInt = std::numeric_limits<int32_t>::max(), kMillion = 1000000, kDevices = 1 << 16;
  // check_lo false: the commands refuse smaller values themselves, saying what they mean.
  static const std::map<std::string, IntRange> ranges = {
      {"devices", {1, kDevices, true}},   {"seed", {0, std::numeric_limits<int64_t>::max(), true}},
      {"image", {1, kInt, false}},        {"batch", {1, kInt, false}},
      {"batches", {1, kInt, false}},      {"iterations", {0, kInt, false}},
      {"warmup", {0, kInt, false}},       {"steps", {1, kInt, false}},
      {"micro-batches", {1, kInt, false}}, {"balance", {1, kInt, false}},
      {"virtual-stages", {2, kInt, true}},  // chunks per worker: interleaving needs two
      {"threads", {0, 4096, false}},      {"dp", {1, kDevices, false}},
      {"pp", {1, kDevices, false}},       {"tp", {1, kDevices, false}},
      {"ranks", {2, kDevices, false}},    {"device", {0, kDevices - 1, false}},
      {"repetitions", {1, kMillion, false}}, {"reps", {1, kMillion, false}},
      {"pools", {1, kMillion, false}},    {"data-size", {1, kMillion, false}},    {"profile-reps", {1, kMillion, false}},
      {"profile-rounds", {1, kMillion, false}}, {"pairs", {2, 1000, false}},
  };
  auto it = ranges.find(flag);
  return it != ranges.end() ? it->second : IntRange{kUnranged, kInt, false};
}

bool has_int_flag_range(const std::string& flag) { return int_flag_range(flag).lo != kUnranged; }

void int_flag_range_error(const std::string& flag, const std::string& given) {
  const IntRange r = int_flag_range(flag);
  throw UsageError(r.lo == kUnranged
                       ? fmt::format("flag --{} expects an integer up to {}, got '{}'", flag, r.hi, given)
                       : fmt::format("flag --{} expects an integer from {} to {}, got '{}'", flag, r.lo, r.hi, given));
}

void check_int_flag(const std::string& flag, int64_t v, const std::string& given) {
  const IntRange r = int_flag_range(flag);
  if (v > r.hi || (r.check_lo && v < r.lo)) int_flag_range_error(flag, given);
}

}  // namespace pb
