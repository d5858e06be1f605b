// Where the tests find the parbench binary and the source tree's files (fixtures, scripts) at
// run time, so a test binary copied elsewhere (a GPU bundle) still finds them: an environment
// variable first, then paths relative to the test binary, then the build's own paths.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

namespace pb::test {

// This build's own paths (tests/paths.cpp): in one file, so that no other test's object depends
// on where the tree is checked out.
const char* built_binary();
const char* built_source_dir();

inline std::filesystem::path self_dir() {
  std::error_code ec;
  return std::filesystem::read_symlink("/proc/self/exe", ec).parent_path();
}

// $PARBENCH_BINARY, else the parbench next to this test binary, else the one this build made.
inline std::string parbench_binary() {
  if (const char* env = std::getenv("PARBENCH_BINARY"); env && *env) return env;
  const auto next = self_dir() / "parbench";
  if (std::filesystem::exists(next)) return next.string();
  return built_binary();
}

// $PARBENCH_SOURCE_DIR, else the first folder at or above this test binary that holds
// tests/fixtures (a build folder inside the source tree, or a bundle), else the build's source.
inline std::filesystem::path source_dir() {
  if (const char* env = std::getenv("PARBENCH_SOURCE_DIR"); env && *env) return env;
  for (auto dir = self_dir(); !dir.empty(); dir = dir.parent_path()) {
    if (std::filesystem::exists(dir / "tests" / "fixtures")) return dir;
    if (dir == dir.root_path()) break;
  }
  return built_source_dir();
}

}  // namespace pb::test
