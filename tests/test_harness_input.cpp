// The commands refuse bad input cleanly: compare's inputs, a filter matching nothing, an invalid
// split; every command has --help.
#include "tests/test_harness_support.h"

namespace pb {
namespace {

using namespace pb::harness_test;

TEST_F(Harness, CompareRefusesBadInput) {
  write_file_atomic(path("not.json"), "hello");
  write_file_atomic(path("foreign.json"), R"({"results": []})");
  Result r = parbench("compare " + path("not.json") + " " + path("foreign.json"));
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr(path("not.json") + ": malformed JSON"));
  write_file_atomic(path("ok.json"), R"({"benchmarks": []})");
  r = parbench("compare " + path("ok.json") + " " + path("foreign.json"));
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr(path("foreign.json") + ": not a Google Benchmark JSON file"));
  r = parbench("compare " + path("ok.json"));
  EXPECT_EQ(r.code, 2);
  r = parbench("report " + path("foreign.json"));
  EXPECT_EQ(r.code, 2);
}

TEST_F(Harness, EveryCommandHasHelp) {
  for (const char* cmd : {"run", "report", "compare"}) {
    Result r = parbench(std::string(cmd) + " --help");
    EXPECT_EQ(r.code, 0) << cmd;
    EXPECT_THAT(r.out, HasSubstr(std::string("usage: parbench ") + cmd));
  }
  Result r = parbench("run --no-such-flag");
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--no-such-flag"));
}

TEST_F(Harness, FilterMatchingNothingIsAnError) {
  Result r = parbench("run --workload linear --strategies regular --devices 1 --iterations 2 --device-kind cpu --out " +
                      path("run") + " --benchmark_filter=nothing_matches_this");
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("no configuration matched"));
}

// More model-parallel stages than layers fails cleanly; only where mp is registered.
TEST_F(Harness, InvalidSplitIsAnErrorEntry) {
  const auto names = strategy_names();
  if (std::find(names.begin(), names.end(), "mp") == names.end()) GTEST_SKIP() << "strategy mp is not registered";
  Result r = parbench("run --workload linear --strategies regular,mp --devices 1,99 --iterations 3 --warmup 1 "
                      "--device-kind cpu --out " + path("run"));
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const json gb = load(path("run/results.json"));
  bool mp99_error = false, regular1_ok = false;
  for (const json& b : gb["benchmarks"]) {
    const std::string name = b["name"];
    if (name.rfind("linear/mp/devices:99/", 0) == 0) mp99_error = b.value("error_occurred", false);
    if (name.rfind("linear/regular/devices:1/", 0) == 0) regular1_ok = !b.value("error_occurred", false);
  }
  EXPECT_TRUE(mp99_error);
  EXPECT_TRUE(regular1_ok);
}

}  // namespace
}  // namespace pb
