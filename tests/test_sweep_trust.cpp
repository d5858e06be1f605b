// `parbench run` end to end, for the figures people act on: the process is primed before any
// configuration is timed, one device runs regular only unless asked, every row carries its threads
// and its predicted and measured memory, and a configuration's memory does not depend on what
// ran before it in the process.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "reports/gbjson.h"
#include "tests/cli_fixture.h"

namespace pb {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;
using test::Result;
using test::slurp;

class SweepTrust : public test::CliTest {
 protected:
  SweepTrust() : CliTest("parbench_sweep_trust_") {}
  // The benchmarks --benchmark_list_tests names, without GB's suffixes.
  std::vector<std::string> listed(const std::string& args) {
    const Result r = parbench("run --device-kind cpu --benchmark_list_tests " + args);
    EXPECT_EQ(r.code, 0) << r.err;
    std::vector<std::string> names;
    std::istringstream in(r.out);
    for (std::string line; std::getline(in, line);)
      if (line.find("/devices:") != std::string::npos) names.push_back(line.substr(0, line.find("/iterations:")));
    return names;
  }
  // benchmark name (without GB's suffixes) -> its JSON entry.
  std::map<std::string, json> benchmarks(const std::string& results) {
    std::map<std::string, json> out;
    const json doc = json::parse(reports::nan_to_null(slurp(results)));
    for (const json& b : doc["benchmarks"]) {
      const std::string name = b["name"];
      out[name.substr(0, name.find("/iterations:"))] = b;
    }
    return out;
  }
};

TEST_F(SweepTrust, OneDeviceRunsRegularOnlyUnlessAsked) {
  const auto plain = listed("--workload linear --strategies regular,dp,ddp --devices 1,2");
  EXPECT_EQ(plain, (std::vector<std::string>{"linear/regular/devices:1/batch:1", "linear/dp/devices:2/batch:1",
                                             "linear/ddp/devices:2/batch:1"}));
  // No single-device strategy named: regular still runs on one device, as the baseline.
  EXPECT_EQ(listed("--workload linear --strategies ddp --devices 1,2"),
            (std::vector<std::string>{"linear/regular/devices:1/batch:1", "linear/ddp/devices:2/batch:1"}));
  const auto all = listed("--workload linear --strategies regular,dp,ddp --devices 1,2 --all-at-one-device");
  EXPECT_THAT(all, testing::Contains("linear/ddp/devices:1/batch:1"));
  EXPECT_EQ(all.size(), 5u);
  // One device alone: what was named runs there.
  EXPECT_EQ(listed("--workload linear --strategies ddp --devices 1"), (std::vector<std::string>{"linear/ddp/devices:1/batch:1"}));
}

TEST_F(SweepTrust, PrimedBeforeTimingAndEveryRowHasThreadsAndPredictedMemory) {
  const Result r = parbench("run --workload linear --strategies regular,ddp --devices 1,2 --iterations 2 --warmup 0 "
                            "--device-kind cpu --gbench-console --out " + path("run"));
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  // The first configuration's kind is set up and stepped, untimed, before the first one is timed.
  const auto primed = r.err.find("priming the process with linear/regular/devices:1/batch:1");
  ASSERT_NE(primed, std::string::npos) << r.err;
  EXPECT_LT(primed, r.err.find("[1/2]")) << r.err;
  EXPECT_THAT(r.err, HasSubstr("priming the process with linear/ddp/devices:2/batch:1"));
  const auto b = benchmarks(path("run/results.json"));
  ASSERT_EQ(b.size(), 2u);
  const json& one = b.at("linear/regular/devices:1/batch:1");
  const json& two = b.at("linear/ddp/devices:2/batch:1");
  for (const json* j : {&one, &two}) {
    EXPECT_GE(j->value("worker_threads", 0.0), 1) << j->dump();
    EXPECT_GT(j->value("predicted_bytes", 0.0), 0) << j->dump();
    EXPECT_GT(j->value("allocated_bytes", 0.0), 0) << j->dump();
  }
  EXPECT_LE(two["worker_threads"].get<double>(), one["worker_threads"].get<double>());  // N workers share the cores
  const std::string md = slurp(path("run/report.md"));
  EXPECT_THAT(md, HasSubstr("| threads/worker |"));
  EXPECT_THAT(md, HasSubstr("Memory, predicted before each run against measured"));
  // Google Benchmark's console says MiB where it shows memory, as the tables do, not GB's "M" of bytes.
  EXPECT_THAT(r.out, HasSubstr("device_peak_MiB="));
  EXPECT_THAT(r.out, Not(HasSubstr("device_peak_bytes=")));
}

TEST_F(SweepTrust, MemoryDoesNotDependOnWhatRanBefore) {
  // tp x2 after four other configurations and alone: the issue saw 30.36 against 26.64 MiB.
  const std::string net = "--workload great_net --image 32 --width 0.25 --iterations 1 --warmup 1 --device-kind cpu ";
  Result r = parbench("run " + net + "--strategies regular,ddp,tp --devices 1,2 --all-at-one-device --out " + path("sweep"));
  ASSERT_EQ(r.code, 0) << r.err;
  r = parbench("run " + net + "--strategies tp --devices 2 --out " + path("alone"));
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string tp2 = "great_net/image:32/width:0.25/tp/devices:2/batch:1";
  const double in_sweep = benchmarks(path("sweep/results.json")).at(tp2)["device_peak_bytes"];
  const double alone = benchmarks(path("alone/results.json")).at(tp2)["device_peak_bytes"];
  EXPECT_NEAR(in_sweep, alone, 0.01 * alone) << "MiB in the sweep " << in_sweep / 1048576 << ", alone " << alone / 1048576;
}

}  // namespace
}  // namespace pb
