// What the program prints, end to end: run's line per configuration agrees with its JSON and
// fits a terminal; --benchmark_format=json leaves JSON alone on stdout; --gbench-console brings
// back Google Benchmark's console; train's times carry their unit; --show-shapes reproduces the
// DataParallel tutorial's pieces; devices and --version.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <dlfcn.h>

#include <cmath>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "reports/gbjson.h"
#include "reports/schema.h"
#include "reports/table.h"
#include "tests/cli_fixture.h"

namespace pb {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;
using test::Result;
using test::slurp;

class ConsoleCli : public test::CliTest {
 protected:
  ConsoleCli() : CliTest("parbench_console_") {}
};

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  for (std::string l; std::getline(ss, l);) out.push_back(l);
  return out;
}

std::vector<std::string> words(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream ss(line);
  for (std::string w; ss >> w;) out.push_back(w);
  return out;
}

double seconds(const std::string& value, const std::string& unit) {
  const double v = std::stod(value);
  if (unit == "s") return v;
  if (unit == "ms") return v * 1e-3;
  if (unit == "us") return v * 1e-6;
  if (unit == "ns") return v * 1e-9;
  ADD_FAILURE() << "unknown unit " << unit;
  return 0;
}

TEST_F(ConsoleCli, RunPrintsOneShortLinePerConfigurationThatAgreesWithItsJson) {
  const std::string run = path("run");
  Result r = parbench("run --workload linear --strategies regular,ddp --devices 1,2 --iterations 6 --warmup 1 "
                      "--device-kind cpu --out " + run);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, Not(HasSubstr("idle_share=")));  // not Google Benchmark's 400-character lines
  EXPECT_THAT(r.out, HasSubstr("median of every timed iteration"));
  EXPECT_THAT(r.out, HasSubstr("\nlinear: batch 1 per device, weak scaling, fp32, cpu:\nstrategy "));  // what they share
  const json rep = json::parse(slurp(run + "/report.json"));
  const json gb = json::parse(reports::nan_to_null(slurp(run + "/results.json")));
  int checked = 0;
  for (const json& row : rep["groups"][0]["rows"]) {
    const std::string strategy = row["strategy"];
    const int devices = row["devices"];
    std::string line;
    for (const std::string& l : lines_of(r.out)) {
      const std::vector<std::string> w = words(l);
      if (w.size() >= 2 && w[0] == strategy && w[1] == std::to_string(devices)) line = l;
    }
    ASSERT_FALSE(line.empty()) << strategy << " x" << devices << " has no line in\n" << r.out;
    SCOPED_TRACE(line);
    EXPECT_LE(line.size(), 100u);
    // strategy N time unit cv samples/s MFU peak compute transfer idle
    const std::vector<std::string> w = words(line);
    ASSERT_EQ(w.size(), 11u);
    const double median_s = row["median_ms"].get<double>() * 1e-3;
    EXPECT_NEAR(seconds(w[2], w[3]), median_s, 0.006 * median_s);  // three significant digits
    const double thr = row["samples_per_s"];
    EXPECT_NEAR(std::stod(w[5]), thr, 0.006 * thr);
    const double peak = row[reports::schema::figure::device_peak.name];
    EXPECT_NEAR(std::stod(w[7]), peak, 0.006 * peak);
    // The shares as results.json's counters have them (one repetition: the median is that one).
    const json* bench = nullptr;
    for (const json& b : gb["benchmarks"])
      if (reports::benchmark_identity(b["run_name"]) == row["name"]) bench = &b;
    ASSERT_NE(bench, nullptr);
    EXPECT_EQ(w[6], reports::mfu_text((*bench)["mfu"].get<double>()));  // CPU: against the measured peak
    EXPECT_NEAR(std::stod(w[8]), 100 * (*bench)["compute_share"].get<double>(), 0.051);
    EXPECT_NEAR(std::stod(w[9]), 100 * (*bench)["transfer_share"].get<double>(), 0.051);
    EXPECT_NEAR(std::stod(w[10]), 100 * (*bench)["idle_share"].get<double>(), 0.051);
    ++checked;
  }
  EXPECT_EQ(checked, 2);  // regular x1 and ddp x2 (one device runs regular alone)
  // Everything above the markdown table (which keeps its own wide layout) fits a terminal.
  for (const std::string& l : lines_of(r.out)) {
    if (l.rfind("## ", 0) == 0) break;
    EXPECT_LE(l.size(), 100u) << l;
  }
}

TEST_F(ConsoleCli, GbenchConsoleBringsBackGoogleBenchmarksOwnLines) {
  Result r = parbench("run --workload linear --strategies regular --devices 1 --iterations 3 --warmup 0 "
                      "--device-kind cpu --gbench-console --out " + path("run"));
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("samples_per_s="));
  EXPECT_THAT(r.out, HasSubstr("device_peak_MiB="));
  EXPECT_THAT(r.out, Not(HasSubstr("median of every timed iteration")));
}

TEST_F(ConsoleCli, JsonFormatLeavesOnlyJsonOnStdout) {
  Result r = parbench("run --workload linear --strategies regular --devices 1 --iterations 3 --warmup 0 "
                      "--device-kind cpu --benchmark_format=json --out " + path("run"));
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  json doc;
  ASSERT_NO_THROW(doc = json::parse(r.out)) << r.out;  // as json.load would: no "Extra data"
  EXPECT_EQ(doc["benchmarks"][0]["run_name"], "linear/regular/devices:1/batch:1/iterations:3/process_time/manual_time");
  EXPECT_TRUE(doc["benchmarks"][0].contains("device_peak_bytes"));  // the counters under their own names
  EXPECT_EQ(doc["context"]["parbench_version"], PARBENCH_VERSION);   // as --version says
  EXPECT_EQ(doc["context"]["parbench_commit"], PARBENCH_GIT_COMMIT);
  EXPECT_THAT(r.err, HasSubstr("| regular | 1 |"));                 // the table went to stderr
  EXPECT_THAT(r.err, HasSubstr("wrote"));
}

TEST_F(ConsoleCli, TrainPrintsTimesInTheUnitThatFits) {
  Result r = parbench("train --workload linear --iterations 3 --warmup 1 --device-kind cpu");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(median [0-9.]+ (ns|us|ms|s)/iteration)"))) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(iteration +1: +[0-9.]+ (ns|us|ms|s) +loss)"))) << r.out;
  EXPECT_THAT(r.out, Not(HasSubstr(" 0.00 ")));
}

// Per step, the samples of each "In Model" line and the workers with "no piece".
struct Step {
  std::vector<int> pieces;
  int idle = 0;
  std::string outside;
};
std::vector<Step> steps_of(const std::string& out) {
  std::vector<Step> steps(1);
  const std::regex in_model(R"(^    In Model: input size \[(\d+), 5\] output size \[(\d+), 2\]  \(worker \d+, cpu:\d+\)$)");
  for (const std::string& l : lines_of(out)) {
    std::smatch m;
    if (std::regex_match(l, m, in_model)) {
      EXPECT_EQ(m[1], m[2]) << l;
      steps.back().pieces.push_back(std::stoi(m[1]));
    } else if (l.rfind("    no piece (worker ", 0) == 0) {
      ++steps.back().idle;
    } else if (l.rfind("Outside: ", 0) == 0) {
      steps.back().outside = l;
      steps.emplace_back();
    }
  }
  steps.pop_back();
  return steps;
}

TEST_F(ConsoleCli, ShowShapesGivesTheTutorialsPiecesFor2And3And8Devices) {
  // The tutorial: 100 samples in batches of 30 (three) and a last one of 10, on 2, 3 and 8 GPUs.
  struct Case {
    int devices;
    std::vector<int> of30, of10;
  };
  const std::vector<Case> cases = {{2, {15, 15}, {5, 5}},
                                   {3, {10, 10, 10}, {4, 4, 2}},
                                   {8, {4, 4, 4, 4, 4, 4, 4, 2}, {2, 2, 2, 2, 2}}};
  // One pass over the tutorial's data: its four steps in one run, as its loop prints them.
  for (const Case& c : cases) {
    SCOPED_TRACE(fmt::format("{} devices", c.devices));
    Result r = parbench(fmt::format("train --workload linear --strategy dp --devices {} --data-size 100 --batch 30 "
                                    "--iterations 1 --warmup 0 --device-kind cpu --threads 1 --show-shapes",
                                    c.devices));
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    EXPECT_THAT(r.out, HasSubstr(fmt::format("Let's use {} devices!", c.devices)));
    const std::vector<Step> steps = steps_of(r.out);
    ASSERT_EQ(steps.size(), 4u) << r.out;
    for (std::size_t k = 0; k < steps.size(); ++k) {
      const int batch = k < 3 ? 30 : 10;
      const std::vector<int>& want = batch == 30 ? c.of30 : c.of10;
      EXPECT_EQ(steps[k].pieces, want) << r.out;
      EXPECT_EQ(steps[k].idle, c.devices - static_cast<int>(want.size())) << r.out;
      EXPECT_EQ(steps[k].outside, fmt::format("Outside: input size [{}, 5] output size [{}, 2]", batch, batch));
    }
  }
}

TEST_F(ConsoleCli, DataSizeWalksTheDataInBatchesAndRefusesNone) {
  Result r = parbench("train --workload linear --strategy ddp --devices 2 --data-size 7 --batch 3 --iterations 2 "
                      "--warmup 0 --device-kind cpu --threads 1 --show-shapes");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const std::vector<Step> steps = steps_of(r.out);
  ASSERT_EQ(steps.size(), 6u) << r.out;  // two passes of batches 3, 3, 1
  const std::vector<std::vector<int>> want = {{2, 1}, {2, 1}, {1}, {2, 1}, {2, 1}, {1}};
  for (std::size_t k = 0; k < steps.size(); ++k) EXPECT_EQ(steps[k].pieces, want[k]) << r.out;
  Result bad = parbench("train --workload linear --data-size 0 --device-kind cpu");
  EXPECT_EQ(bad.code, 2);
  EXPECT_THAT(bad.err, HasSubstr("--data-size"));
}

TEST_F(ConsoleCli, ReplayShowsShapesToo) {
  Result r = parbench("replay --workload linear --strategy ddp --devices 3 --batch 10 --steps 2 --device-kind cpu "
                      "--threads 1 --show-shapes --out " + path("out"));
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const std::vector<Step> steps = steps_of(r.out);
  ASSERT_EQ(steps.size(), 2u) << r.out;
  for (const Step& s : steps) EXPECT_EQ(s.pieces, (std::vector<int>{4, 4, 2}));
}

TEST_F(ConsoleCli, VersionIsTheProjectVersionAndTheCommit) {
  Result r = parbench("--version");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, fmt::format("parbench {} (commit {})\n", PARBENCH_VERSION, PARBENCH_GIT_COMMIT));
  EXPECT_TRUE(std::regex_match(std::string(PARBENCH_GIT_COMMIT), std::regex("[0-9a-f]{7,40}|unknown")));
  EXPECT_TRUE(std::regex_match(std::string(PARBENCH_VERSION), std::regex(R"(\d+\.\d+\.\d+)")));
  r = parbench("--help");
  EXPECT_THAT(r.out, HasSubstr("--version"));
}

TEST_F(ConsoleCli, DevicesNamesTheCpuOnceAndAMissingDriverPlainly) {
  Result r = parbench("devices");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  std::string model;
  std::ifstream in("/proc/cpuinfo");
  for (std::string l; std::getline(in, l);)
    if (l.rfind("model name", 0) == 0 && model.empty()) model = l.substr(l.find_first_not_of(" \t", l.find(':') + 1));
  if (!model.empty()) {
    EXPECT_THAT(r.out, HasSubstr("cpu: " + model + ", "));
  }
  std::size_t n = 0;
  for (std::size_t at = r.out.find("hardware threads"); at != std::string::npos; at = r.out.find("hardware threads", at + 1)) ++n;
  EXPECT_EQ(n, 1u) << r.out;
  EXPECT_THAT(r.out, HasSubstr(fmt::format("parbench {}", PARBENCH_VERSION)));
#ifdef PARBENCH_HAVE_CUDA
  if (void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)) {
    dlclose(lib);
    GTEST_SKIP() << "an NVIDIA driver is installed: the no-driver message cannot be seen here";
  }
  EXPECT_THAT(r.out, HasSubstr("no NVIDIA driver"));
  EXPECT_THAT(r.out, Not(HasSubstr("cudaErrorInsufficientDriver")));
#endif
}

}  // namespace
}  // namespace pb
