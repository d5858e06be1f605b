// Steal time and other processes' time from /proc/stat: what calibrate and run warn about.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>

#include "engine/cpu_steal.h"

namespace pb {
namespace {

TEST(CpuSteal, ParsesTheAggregateLineAndItsStealField) {
  const auto t = parse_proc_stat(
      "cpu  2995323 576 283996 1511762 8108 0 2433 11350 0 0\n"
      "cpu0 1502481 358 156840 769303 1813 0 290 9686 0 0\n");
  ASSERT_TRUE(t);
  EXPECT_DOUBLE_EQ(t->steal, 11350);
  EXPECT_DOUBLE_EQ(t->busy, 2995323 + 576 + 283996 + 0 + 2433);  // user nice system irq softirq
  EXPECT_DOUBLE_EQ(t->own, 0);
  EXPECT_DOUBLE_EQ(t->total, 2995323 + 576 + 283996 + 1511762 + 8108 + 0 + 2433 + 11350);
  // The aggregate line need not come first; guest fields are not added twice.
  const auto later = parse_proc_stat("intr 5 6\ncpu  10 0 10 70 0 0 0 10 40 0\n");
  ASSERT_TRUE(later);
  EXPECT_DOUBLE_EQ(later->total, 100);
}

TEST(CpuSteal, AMissingOrMalformedLineIsNoReading) {
  EXPECT_FALSE(parse_proc_stat(""));
  EXPECT_FALSE(parse_proc_stat("cpu0 1 2 3 4 5 6 7 8\n"));     // no aggregate line
  EXPECT_FALSE(parse_proc_stat("cpu  1 2 3 4 5 6 7\n"));       // no steal field
  EXPECT_FALSE(parse_proc_stat("cpu  1 2 3 4 x 6 7 8\n"));
  EXPECT_FALSE(parse_proc_stat("cpu  1 2 3 4 5 6 7 -8\n"));
}

TEST(CpuSteal, FractionIsStealOverAllTimeBetweenTwoReadings) {
  const auto a = parse_proc_stat("cpu  100 0 0 100 0 0 0 0\n");
  const auto b = parse_proc_stat("cpu  130 0 0 150 0 0 0 20\n");  // 100 ticks later, 20 stolen
  ASSERT_TRUE(steal_fraction(a, b));
  EXPECT_DOUBLE_EQ(*steal_fraction(a, b), 0.2);
  EXPECT_FALSE(steal_fraction(a, a));  // no time passed
  EXPECT_FALSE(steal_fraction(std::nullopt, b));
  EXPECT_FALSE(steal_fraction(a, std::nullopt));
}

TEST(CpuSteal, OthersAreTheBusyTimeNotThisProcesssOverAllTime) {
  auto a = parse_proc_stat("cpu  100 0 0 100 0 0 0 0\n");
  auto b = parse_proc_stat("cpu  160 0 10 130 0 0 0 0\n");  // 100 ticks later, 70 busy
  a->own = 20;
  b->own = 50;  // 30 of them this process's
  ASSERT_TRUE(others_fraction(a, b));
  EXPECT_DOUBLE_EQ(*others_fraction(a, b), 0.4);
  b->own = 100;  // ticks counted apart need not agree: never below 0
  EXPECT_DOUBLE_EQ(*others_fraction(a, b), 0.0);
  EXPECT_FALSE(others_fraction(a, a));
  EXPECT_FALSE(others_fraction(std::nullopt, b));
}

TEST(CpuSteal, ReadsThisMachinesCounters) {
  if (!std::filesystem::exists("/proc/stat")) GTEST_SKIP() << "no /proc/stat on this system";
  const auto t = read_cpu_times();
  ASSERT_TRUE(t) << "/proc/stat has no aggregate cpu line with a steal field";
  EXPECT_GT(t->total, 0);
  EXPECT_LE(t->steal, t->total);
  EXPECT_LE(t->busy, t->total);
  // This process's own time grows by what it spins.
  const auto start = std::chrono::steady_clock::now();
  volatile double x = 0;
  while (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(200)) x = x + 1;
  const auto u = read_cpu_times();
  ASSERT_TRUE(u);
  EXPECT_GT(u->own - t->own, 0) << "200 ms of spinning";
}

}  // namespace
}  // namespace pb
