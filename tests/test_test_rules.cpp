// Rules about the tests themselves, read from their sources: every test that needs a GPU is one
// the GPU check (scripts/gpu_check.sh) runs, by the rule in tests/gpu_skip.h.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/paths.h"

namespace pb {
namespace {

namespace fs = std::filesystem;

std::string read_all(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// gtest's filter syntax: positive patterns separated by ':', then optionally '-' and negative
// ones; '*' and '?' are wildcards.
bool glob(const char* p, const char* s) {
  if (*p == 0) return *s == 0;
  if (*p == '*') return glob(p + 1, s) || (*s != 0 && glob(p, s + 1));
  return *s != 0 && (*p == '?' || *p == *s) && glob(p + 1, s + 1);
}
bool any_of(const std::string& patterns, const std::string& name) {
  std::stringstream ss(patterns);
  std::string p;
  while (std::getline(ss, p, ':'))
    if (!p.empty() && glob(p.c_str(), name.c_str())) return true;
  return false;
}
bool selected(const std::string& filter, const std::string& name) {
  const auto dash = filter.find('-');
  const std::string pos = filter.substr(0, dash), neg = dash == std::string::npos ? "" : filter.substr(dash + 1);
  return any_of(pos.empty() ? "*" : pos, name) && !any_of(neg, name);
}

// The text from `open` (an opening brace) to its matching closing brace, skipping string and
// character literals and comments.
std::string braced(const std::string& s, std::size_t open) {
  int depth = 0;
  for (std::size_t i = open; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '"' || c == '\'') {
      for (++i; i < s.size() && s[i] != c; ++i)
        if (s[i] == '\\') ++i;
    } else if (c == '/' && i + 1 < s.size() && s[i + 1] == '/') {
      i = s.find('\n', i);
      if (i == std::string::npos) break;
    } else if (c == '/' && i + 1 < s.size() && s[i + 1] == '*') {
      i = s.find("*/", i);
      if (i == std::string::npos) break;
    } else if (c == '{') {
      ++depth;
    } else if (c == '}' && --depth == 0) {
      return s.substr(open, i - open + 1);
    }
  }
  return s.substr(open);
}

// A body that skips without a GPU: PB_REQUIRE_GPU(), or the same test spelled out.
bool needs_gpu(const std::string& body) {
  static const std::regex spelled(R"(cuda_device_count\(\)\s*==\s*0\)\s*GTEST_SKIP\(\))");
  return body.find("PB_REQUIRE_GPU()") != std::string::npos || std::regex_search(body, spelled);
}

struct GpuTest {
  std::string name, where;
};

// Every TEST, TEST_F and TEST_P of tests/*.cpp whose body (or fixture) needs a GPU.
std::vector<GpuTest> tests_that_need_a_gpu(const fs::path& dir) {
  static const std::regex fixture_re(R"((?:class|struct)\s+(\w+)[^;{]*\{)");
  static const std::regex test_re(R"(\b(TEST|TEST_F|TEST_P)\(\s*(\w+)\s*,\s*(\w+)\s*\)\s*\{)");
  std::vector<GpuTest> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".cpp") continue;
    const std::string s = read_all(e.path());
    std::set<std::string> gpu_fixtures;
    for (auto it = std::sregex_iterator(s.begin(), s.end(), fixture_re); it != std::sregex_iterator(); ++it) {
      const std::size_t open = static_cast<std::size_t>(it->position(0) + it->length(0)) - 1;
      if (needs_gpu(braced(s, open))) gpu_fixtures.insert((*it)[1]);
    }
    for (auto it = std::sregex_iterator(s.begin(), s.end(), test_re); it != std::sregex_iterator(); ++it) {
      const std::size_t open = static_cast<std::size_t>(it->position(0) + it->length(0)) - 1;
      const std::string suite = (*it)[2], test = (*it)[3];
      if (!needs_gpu(braced(s, open)) && !((*it)[1] != "TEST" && gpu_fixtures.count(suite))) continue;
      const auto line = std::count(s.begin(), s.begin() + it->position(0), '\n') + 1;
      out.push_back({suite + "." + test, e.path().filename().string() + ":" + std::to_string(line)});
    }
  }
  return out;
}

std::string gpu_check_filter(const fs::path& script) {
  static const std::regex filter_re(R"(\ngpu_filter='([^']*)')");
  const std::string s = read_all(script);
  std::smatch m;
  return std::regex_search(s, m, filter_re) ? m[1].str() : "";
}

TEST(TestRules, TheCheckScriptSelectsByTheOneRule) {
  const fs::path script = test::source_dir() / "scripts" / "gpu_check.sh";
  if (!fs::exists(script)) GTEST_SKIP() << "no " << script << " (a bundle holds no sources)";
  EXPECT_EQ(gpu_check_filter(script), "*Gpu*")
      << script << ": the GPU tests are selected by the rule of tests/gpu_skip.h, \"Gpu\" in the name";
}

TEST(TestRules, EveryTestThatSkipsWithoutADeviceIsSelected) {
  const fs::path dir = test::source_dir() / "tests", script = test::source_dir() / "scripts" / "gpu_check.sh";
  if (!fs::exists(dir / "gpu_skip.h") || !fs::exists(script)) GTEST_SKIP() << "no test sources in " << dir;
  const std::string filter = gpu_check_filter(script);
  ASSERT_FALSE(filter.empty()) << script << " has no line gpu_filter='...'";
  const std::vector<GpuTest> gpu = tests_that_need_a_gpu(dir);
  // The scan finds the suites known to need a GPU (a broken scan would pass vacuously).
  EXPECT_GE(gpu.size(), 15u) << "only " << gpu.size() << " tests found that skip without a GPU";
  std::string missed;
  for (const GpuTest& t : gpu)
    if (!selected(filter, t.name) || t.name.find("Gpu") == std::string::npos)
      missed += "\n  " + t.name + " (" + t.where + ")";
  EXPECT_TRUE(missed.empty()) << "tests that skip without a GPU but that gpu_check.sh's filter '" << filter
                              << "' leaves out, or without \"Gpu\" in their name (tests/gpu_skip.h):" << missed;
}

TEST(TestRules, FilterMatchingFollowsGtest) {
  EXPECT_TRUE(selected("*Gpu*", "CudaGpu.ConvMatchesCpu"));
  EXPECT_TRUE(selected("*Gpu*", "Events.GpuSideStreamWaitsForComputeBeforeTheEvent"));
  EXPECT_FALSE(selected("*Gpu*", "Events.SideStreamWaitsForComputeBeforeTheEvent"));
  EXPECT_FALSE(selected("Cuda*:*Gpu*:*GPU*:NcclSingleRank*", "Events.SideStreamWaitsForComputeBeforeTheEvent"));
  EXPECT_TRUE(selected("Cuda*:NcclSingleRank*", "NcclSingleRank.X"));
  EXPECT_FALSE(selected("*Gpu*-*Slow*", "A.GpuSlow"));
  EXPECT_TRUE(selected("-A.*", "B.X"));
}

}  // namespace
}  // namespace pb
