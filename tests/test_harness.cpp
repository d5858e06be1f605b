// End to end through the program: `parbench run` on CPU with a tiny workload, then `report`,
// then `compare` against itself (exit 0) and against a doctored 1.5x slower copy (exit 1); a
// configuration that fails is an error entry while the others finish; a run where every
// configuration fails exits 1.
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

namespace pb {
namespace {

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

TEST_F(Harness, RunReportCompare) {
  // regular asked for by name at 2 devices is skipped (one device by definition), not failed.
  const std::string run = path("run");
  Result r = parbench("run --workload linear --strategies regular --devices 1,2 --iterations 20 --warmup 1 "
                      "--device-kind cpu --out " + run + " --benchmark_repetitions=3");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("| regular | 1 |"));
  EXPECT_THAT(r.out, Not(HasSubstr("| regular | 2 |")));
  EXPECT_THAT(r.err, HasSubstr("skipped regular x2"));
  EXPECT_THAT(r.err, HasSubstr("[1/1] linear/regular/devices:1/batch:1: setting up"));
  for (const char* f : {"results.json", "report.md", "report.csv", "report.json"})
    EXPECT_TRUE(fs::exists(run + "/" + f)) << f;
  if (have_matplotlib()) {
    EXPECT_GT(fs::file_size(run + "/throughput.png"), 1000u);
  }

  // The record is Google Benchmark's JSON: context, and per benchmark GB's fields + counters.
  const json gb = load(run + "/results.json");
  EXPECT_EQ(gb["context"]["scaling"], "weak");
  EXPECT_EQ(gb["context"]["device_kind"], "cpu");
  EXPECT_EQ(gb["context"]["workload"], "linear");
  EXPECT_TRUE(gb["context"].contains("parbench_commit"));
  EXPECT_EQ(gb["context"]["single_device_strategies"], "regular");
  EXPECT_THAT(gb["context"]["strategy_order"].get<std::string>(), HasSubstr("regular"));
  EXPECT_TRUE(gb["context"].contains("PARBENCH_CPU_WINOGRAD"));
  // Every timed iteration: 3 repetitions of 20.
  const json& times = gb["iteration_times_s"]["linear/regular/devices:1/batch:1"];
  ASSERT_EQ(times.size(), 3u);
  for (const json& rep : times) EXPECT_EQ(rep.size(), 20u);
  int ok = 0, errors = 0;
  for (const json& b : gb["benchmarks"]) {
    if (b.value("error_occurred", false)) {
      ++errors;
    } else if (b["run_type"] == "iteration") {
      ++ok;
      EXPECT_EQ(b["name"], "linear/regular/devices:1/batch:1/iterations:20/process_time/manual_time");
      EXPECT_EQ(b["iterations"], 20);
      EXPECT_EQ(b["time_unit"], "ms");
      for (const char* c : {"samples_per_s", "flop_per_s", "peak_bytes_max", "peak_bytes_dev0", "bytes_sent_per_iter",
                            "transfer_s_max", "bubble_fraction", "workers_used", "oversubscribed", "global_batch",
                            "compute_share", "transfer_share", "idle_share", "other_share", "exposed_comm_s"})
        EXPECT_TRUE(b.contains(c)) << c;
      EXPECT_EQ(b["workers_used"], 1);
      EXPECT_NEAR(b["samples_per_s"].get<double>(), 1 / (b["real_time"].get<double>() * 1e-3), 1e-6 * b["samples_per_s"].get<double>());
    }
  }
  EXPECT_EQ(ok, 3);
  EXPECT_EQ(errors, 0);

  // report: CSV to stdout, all formats to a prefix, a chart.
  r = parbench("report " + run + "/results.json --format csv --out " + path("rep/table") + " --chart " + path("rep.png"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("workload,scaling,batch"));
  EXPECT_THAT(r.out, HasSubstr("linear,weak,1,fp32,cpu,regular,1,3,"));
  EXPECT_TRUE(fs::exists(path("rep/table.md")));
  EXPECT_TRUE(fs::exists(path("rep/table.json")));
  if (have_matplotlib()) {
    EXPECT_TRUE(fs::exists(path("rep.png")));
  }

  // compare with itself: no regression (3 repetitions of microsecond steps do not rule out 5%).
  r = parbench("compare " + run + "/results.json " + run + "/results.json --threshold 1 --out " + path("same.md"));
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_THAT(slurp(path("same.md")), HasSubstr("PASS"));

  // A doctored copy, every time x1.5: slower, exit 1.
  json slow = gb;
  for (json& b : slow["benchmarks"])
    if (!b.value("error_occurred", false) && b.contains("real_time") && b.value("aggregate_unit", "time") == "time") {
      b["real_time"] = b["real_time"].get<double>() * 1.5;
      b["cpu_time"] = b["cpu_time"].get<double>() * 1.5;
    }
  for (auto& [name, reps] : slow["iteration_times_s"].items())
    for (json& rep : reps)
      for (json& t : rep) t = t.get<double>() * 1.5;
  write_file_atomic(path("slower.json"), slow.dump(2));
  r = parbench("compare " + run + "/results.json " + path("slower.json") + " --gate each");
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("**slower**"));
  EXPECT_THAT(r.out, HasSubstr("FAIL"));

  // A folder of past runs is a baseline distribution.
  fs::create_directories(path("history/a"));
  fs::copy_file(run + "/results.json", path("history/a/results.json"));
  fs::copy_file(run + "/report.json", path("history/a/report.json"));  // skipped: not a GB file
  fs::copy_file(run + "/results.json", path("history/b.json"));
  fs::copy_file(run + "/results.json", path("history/c.json"));  // a history needs 3 runs
  r = parbench("compare " + path("history") + " " + run + "/results.json");
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("and 2 more run(s)"));
}

// --trace: a Chrome trace per configuration (every complete event with name, ph, ts, dur, pid,
// tid; one process per worker), the stages and buckets in the record, and timeline.png.
TEST_F(Harness, RunTraceWritesChromeTracesLayoutAndTimeline) {
  const std::string run = path("trace");
  Result r = parbench("run --workload great_net --image 8 --width 0.1875 --strategies ddp,pipeline --devices 2 "
                      "--batch 2 --micro-batches 2 --iterations 2 --warmup 1 --threads 1 --device-kind cpu --trace --out " + run);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  for (const char* strategy : {"ddp", "pipeline"}) {
    SCOPED_TRACE(strategy);
    const std::string file = fmt::format("{}/trace-great_net_image_8_width_0.1875_{}_devices_2_batch_2.json", run, strategy);
    ASSERT_TRUE(fs::exists(file)) << r.err;
    const json t = load(file);
    EXPECT_EQ(t["otherData"]["strategy"], strategy);
    std::set<int> pids;
    int complete = 0;
    for (const json& e : t["traceEvents"]) {
      for (const char* key : {"name", "ph", "pid", "tid"}) ASSERT_TRUE(e.contains(key)) << e.dump();
      if (e["ph"] != "X") continue;
      ++complete;
      ASSERT_TRUE(e.contains("ts") && e.contains("dur")) << e.dump();
      pids.insert(e["pid"].get<int>());
    }
    EXPECT_GT(complete, 20);
    EXPECT_EQ(pids, (std::set<int>{0, 1}));
  }
  const json gb = load(run + "/results.json");
  const json& layout = gb["layout"];
  EXPECT_EQ(layout["great_net/image:8/width:0.1875/pipeline/devices:2/batch:2"]["stages"].size(), 2u);
  EXPECT_GE(layout["great_net/image:8/width:0.1875/ddp/devices:2/batch:2"]["buckets"].size(), 1u);
  if (have_matplotlib()) {
    EXPECT_GT(fs::file_size(run + "/timeline.png"), 1000u);
    EXPECT_THAT(r.out, HasSubstr("timeline.png"));
  }
}

TEST_F(Harness, DifferentIterationsMatchAndAggregatesOnlyKeepsEverything) {
  const std::string common = "run --workload linear --strategies ddp --devices 1 --warmup 1 --device-kind cpu ";
  Result r = parbench(common + "--iterations 4 --out " + path("a") + " --benchmark_repetitions=3 "
                      "--benchmark_report_aggregates_only=true");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const json gb = load(path("a/results.json"));
  EXPECT_EQ(gb["iteration_times_s"]["linear/ddp/devices:1/batch:1"].size(), 3u);
  // The table keeps its counters and repetitions without GB's repetition entries.
  r = parbench("report " + path("a/results.json") + " --format csv");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("linear,weak,1,fp32,cpu,ddp,1,3,"));
  // samples/s, peak and the breakdown's columns filled (bandwidths stay empty: ddp on one device
  // runs no collective).
  auto cells = [](const std::string& line) {
    std::vector<std::string> out;
    std::stringstream ss(line.substr(0, line.find('\n')));
    std::string cell;
    while (std::getline(ss, cell, ',')) out.push_back(cell);
    return out;
  };
  const auto header = cells(r.out), row = cells(r.out.substr(r.out.find("linear,weak")));
  for (const char* col : {"samples_per_s", "allocated_mib_worker_max", "compute_share", "transfer_share", "idle_share",
                          "comm_mib_per_iteration"}) {
    const auto at = std::find(header.begin(), header.end(), col) - header.begin();
    ASSERT_LT(static_cast<std::size_t>(at), row.size()) << col;
    EXPECT_FALSE(row[at].empty()) << col;
  }
  r = parbench(common + "--iterations 6 --out " + path("b") + " --benchmark_repetitions=3");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  r = parbench("compare " + path("a/results.json") + " " + path("b/results.json"));
  EXPECT_NE(r.code, 2) << r.err;
  EXPECT_THAT(r.out, HasSubstr("3/3"));
  EXPECT_THAT(r.out, Not(HasSubstr("missing |")));
  EXPECT_THAT(r.out, HasSubstr("0 missing"));
  EXPECT_THAT(r.out, HasSubstr("0 new"));
}

TEST_F(Harness, EveryConfigurationFailedExitsOne) {
  const auto names = strategy_names();
  if (std::find(names.begin(), names.end(), "mp") == names.end()) GTEST_SKIP() << "strategy mp is not registered";
  Result r = parbench("run --workload linear --strategies mp --devices 99 --iterations 2 --warmup 1 --device-kind cpu "
                      "--out " + path("run"));
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("every configuration failed"));
  // Only single-device strategies at N > 1: nothing to run, bad flags.
  r = parbench("run --workload linear --strategies regular --devices 2 --device-kind cpu --out " + path("run2"));
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("nothing to run"));
}

// The dp x pp and dp x tp families expand to every factorization of each device count (both sides
// >= 2 unless --dp/--pp/--tp fix one), and those flags alone pick the hybrids and their device count.
TEST_F(Harness, SweepEnumeratesHybridFactorizations) {
  auto listed = [&](const std::string& args) {
    const Result r = parbench("run --workload linear --device-kind cpu --benchmark_list_tests " + args);
    EXPECT_EQ(r.code, 0) << r.err;
    std::vector<std::string> names;
    std::istringstream in(r.out);
    for (std::string line; std::getline(in, line);)
      if (line.rfind("linear/dp", 0) == 0 && (line.find("xpp") != std::string::npos || line.find("xtp") != std::string::npos))
        names.push_back(line.substr(7, line.find("/batch:") - 7));
    return names;
  };
  EXPECT_EQ(listed("--strategies dpxpp,ddp --devices 1,2,4,8,12"),
            (std::vector<std::string>{"dp2xpp2/devices:4", "dp2xpp4/devices:8", "dp4xpp2/devices:8", "dp2xpp6/devices:12",
                                      "dp3xpp4/devices:12", "dp4xpp3/devices:12", "dp6xpp2/devices:12"}));
  EXPECT_EQ(listed("--pp 2 --devices 2,4,8"),
            (std::vector<std::string>{"dp2xpp2/devices:4", "dp4xpp2/devices:8"}));
  EXPECT_EQ(listed("--dp 2 --pp 3 --schedule 1f1b"), (std::vector<std::string>{"dp2xpp3-1f1b/devices:6"}));
  EXPECT_EQ(listed("--strategies dp2xpp2 --devices 2,4"), (std::vector<std::string>{"dp2xpp2/devices:4"}));
  EXPECT_EQ(listed("--strategies dpxtp --devices 4,6"),
            (std::vector<std::string>{"dp2xtp2/devices:4", "dp2xtp3/devices:6", "dp3xtp2/devices:6"}));
  EXPECT_EQ(listed("--dp 2 --devices 4"), (std::vector<std::string>{"dp2xpp2/devices:4", "dp2xtp2/devices:4"}));
  EXPECT_EQ(listed("--dp 3 --tp 2"), (std::vector<std::string>{"dp3xtp2/devices:6"}));
  Result r = parbench("run --workload linear --strategies ddp --dp 2 --device-kind cpu");
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("add dpxpp or dpxtp to --strategies"));
  r = parbench("run --workload linear --pp 2 --tp 2 --device-kind cpu");
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--pp and --tp shape different hybrids"));
  r = parbench("run --workload linear --dp 0 --device-kind cpu");
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--dp must be a positive number of replicas, got 0"));
  r = parbench("run --workload linear --strategies dpxpp --devices 3 --device-kind cpu");
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("nothing to run"));
  // A measured one, through to the report; replay and train take --dp/--pp (and D * P devices).
  r = parbench("run --workload great_net --image 8 --width 0.1875 --dp 2 --pp 2 --batch 2 --iterations 2 --warmup 1 "
               "--device-kind cpu --threads 1 --out " + path("run"));
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_THAT(slurp(path("run/report.md")), HasSubstr("| dp2xpp2 | 4 |"));
  EXPECT_EQ(load(path("run/results.json"))["context"]["strategy_order"], "regular,dp,ddp,mp,pipeline,pipeline-1f1b,"
            "pipeline-recompute,pipeline-1f1b-recompute,fsdp,zero2,tp,dp2xpp2");
  r = parbench("replay --workload linear --dp 2 --tp 2 --batch 4 --steps 1 --device-kind cpu --out " + path("rt"));
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(load(path("rt/losses.json"))["strategy"], "dp2xtp2");
  r = parbench("train --workload great_net --image 8 --width 0.1875 --dp 2 --pp 2 --batch 4 --iterations 1 --warmup 0 "
               "--device-kind cpu --threads 1");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out + r.err, HasSubstr("dp2xpp2"));
  r = parbench("replay --workload linear --strategy dp2xpp2 --pp 3 --device-kind cpu --out " + path("rp"));
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--dp and --pp name one hybrid together"));
}

TEST_F(Harness, OneMicroBatchRuleForEveryCommand) {
  // Defaults: train and replay (global batch 2) run pipeline with min(4, 2) micro-batches.
  Result r = parbench("train --workload great_net --image 8 --width 0.1875 --strategy pipeline --devices 2 --iterations 2 --warmup 0 --device-kind cpu");
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  r = parbench("replay --workload great_net --image 8 --width 0.1875 --strategy pipeline --devices 2 --steps 1 --device-kind cpu --out " + path("rp"));
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  // Asked for more than the batch has: the same refusal everywhere.
  r = parbench("train --workload great_net --image 8 --width 0.1875 --strategy pipeline --devices 2 --micro-batches 4 --iterations 1 --device-kind cpu");
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.err, HasSubstr("micro-batches"));
  r = parbench("train --workload linear --strategy pipeline --micro-batches 0 --device-kind cpu");
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--micro-batches must be at least 1"));
}

TEST_F(Harness, DdpGradAverageIsRecordedWhenNotTheDefault) {
  Result r = parbench("run --workload linear --strategies ddp --devices 2 --batch 3 --iterations 2 --warmup 0 "
                      "--grad-average local --first-bucket-mb 0.5 --device-kind cpu --out " + path("local"));
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  json ctx = load(path("local") + "/results.json")["context"];
  EXPECT_EQ(ctx["grad_average"], "local");
  EXPECT_EQ(ctx["first_bucket_mb"], "0.5");
  r = parbench("run --workload linear --strategies ddp --devices 2 --batch 3 --iterations 2 --warmup 0 "
               "--device-kind cpu --out " + path("global"));
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  ctx = load(path("global") + "/results.json")["context"];
  EXPECT_FALSE(ctx.contains("grad_average")) << "the default (global) leaves older runs comparable";
  EXPECT_EQ(ctx["first_bucket_mb"], "1");
  // Different functions: compare refuses to pit them against each other.
  r = parbench("compare " + path("global") + "/results.json " + path("local") + "/results.json");
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("grad_average"));
  r = parbench("train --workload linear --strategy ddp --devices 2 --grad-average mean --device-kind cpu");
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--grad-average expects global or local, got 'mean'"));
  r = parbench("train --workload linear --strategy ddp --devices 2 --first-bucket-mb 0 --device-kind cpu");
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--first-bucket-mb must be positive"));
}

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

// --schedule and --recompute pick the pipeline variants of the sweep: the benchmark names carry
// them (a run of pipeline and pipeline-1f1b collapses to one pipeline-1f1b-recompute), and the
// context records the flags.
TEST_F(Harness, ScheduleFlagsNameThePipelineVariant) {
  Result r = parbench("run --workload great_net --image 8 --width 0.1875 --strategies pipeline,pipeline-1f1b,mp "
                      "--schedule 1f1b --recompute --devices 2 --batch 4 --micro-batches 4 --iterations 2 --warmup 0 "
                      "--threads 1 --device-kind cpu --out " + path("run"));
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const json gb = load(path("run/results.json"));
  std::vector<std::string> strategies;
  for (const json& b : gb["benchmarks"]) {
    const std::string name = b["name"];
    EXPECT_FALSE(b.value("error_occurred", false)) << name;
    strategies.push_back(name.substr(name.find("/width:0.1875/") + 14, name.find("/devices:") - name.find("/width:0.1875/") - 14));
  }
  EXPECT_EQ(strategies, (std::vector<std::string>{"pipeline-1f1b-recompute", "mp"}));
  EXPECT_EQ(gb["context"]["schedule"], "1f1b");
  EXPECT_EQ(gb["context"]["recompute"], "true");
  r = parbench("run --workload linear --strategies pipeline --schedule fifo --devices 1 --device-kind cpu --out " + path("bad"));
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--schedule expects gpipe or 1f1b, got 'fifo'"));
}

// The CUDA module (cuDNN, cuBLAS, NCCL) is opened only when a GPU is used or asked about: the
// dynamic loader's own log (LD_DEBUG=files) of a CPU run must not name it.
// Other processes busy on the cores during a run: it says so, naming the share they took.
TEST_F(Harness, RunBesideBusyProcessesWarns) {
  // A quarter of the cores spinning (at least one): a quarter to a half of the machine's time.
  const unsigned n = std::max(1u, (std::thread::hardware_concurrency() + 3) / 4);
  std::vector<pid_t> spinners;
  for (unsigned i = 0; i < n; ++i) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0) << "fork";
    if (pid == 0) {
      ::execl("/bin/sh", "sh", "-c", "while :; do :; done", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    spinners.push_back(pid);
  }
  const Result r = parbench("run --workload great_net --image 16 --strategies regular --devices 1 --batch 4 --iterations 20 "
                            "--warmup 1 --out " + path("run"));
  for (const pid_t pid : spinners) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("warning: other processes used")) << r.err;
  EXPECT_THAT(r.err, HasSubstr("of this machine's CPU time during the run")) << r.err;
}

TEST_F(Harness, CpuRunsDoNotLoadTheCudaModule) {
  std::vector<std::string> kinds = {"cpu"};
  if (cuda_device_count() == 0) kinds.push_back("auto");  // no GPU: auto is a CPU run too
  for (const std::string& kind : kinds) {
    SCOPED_TRACE("--device-kind " + kind);
    Result r = parbench("train --workload linear --iterations 2 --warmup 1 --device-kind " + kind, "LD_DEBUG=files");
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    ASSERT_THAT(r.err, HasSubstr("needed by")) << "no loader log: LD_DEBUG had no effect";
    EXPECT_THAT(r.err, Not(HasSubstr("libparbench_cuda"))) << r.err;
    EXPECT_THAT(r.err, Not(HasSubstr("libcudnn"))) << r.err;
  }
}

TEST_F(Harness, DevicesNamesTheCudaModuleOrWhyItIsMissingWithOrWithoutGpu) {
#ifdef PARBENCH_HAVE_CUDA
  Result r = parbench("devices");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("libparbench_cuda.so"));
  EXPECT_THAT(r.out, HasSubstr("cuDNN 9."));
  r = parbench("devices", "PARBENCH_CUDA_MODULE=/nonexistent/libparbench_cuda.so");
  if (cuda_device_count() == 0) {
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    EXPECT_THAT(r.out, HasSubstr("could not be loaded"));
  } else {
    EXPECT_EQ(r.code, 1) << r.out << r.err;  // GPUs but no usable backend: an error, not a CPU run
    EXPECT_THAT(r.err, HasSubstr("could not be loaded"));
  }
  EXPECT_THAT(r.out + r.err, HasSubstr("/nonexistent/libparbench_cuda.so"));
#else
  Result r = parbench("devices");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("cuda: not built"));
#endif
}

}  // namespace
}  // namespace pb
