// What the end-to-end tests share (tests/test_harness_*.cpp): the Harness fixture over the CLI one.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tests/cli_fixture.h"
#include "engine/device.h"
#include "engine/fsutil.h"
#include "reports/gbjson.h"
#include "strategies/strategy.h"

namespace pb::harness_test {

namespace fs = std::filesystem;
using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

using test::Result;
using test::slurp;

class Harness : public test::CliTest {
 protected:
  Harness() : CliTest("parbench_harness_") {}
  static json load(const std::string& p) { return json::parse(reports::nan_to_null(slurp(p))); }
  static bool have_matplotlib() { return std::system("/usr/bin/python3 -c 'import matplotlib' >/dev/null 2>&1") == 0; }
};

}  // namespace pb::harness_test
