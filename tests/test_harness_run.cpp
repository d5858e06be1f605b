// End to end through the program: `parbench run` on CPU with a tiny workload, then `report`,
// then `compare` against itself (exit 0) and a steadied copy against a 1.5x slower one (exit 1); a
// configuration that fails is an error entry while the others finish; a run where every
// configuration fails exits 1; --trace writes Chrome traces.
#include "tests/test_harness_support.h"

namespace pb {
namespace {

using namespace pb::harness_test;

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

  // A doctored copy, every time x1.5: slower, exit 1. Against a steadied baseline (each
  // repetition the first one's steps, 1% apart): three measured repetitions of microsecond
  // steps on a shared machine can spread so far that a 1.5x slowdown is rightly inconclusive.
  json steady = gb;
  for (auto& [name, reps] : steady["iteration_times_s"].items())
    for (size_t i = 1; i < reps.size(); ++i) {
      reps[i] = reps[0];
      for (json& t : reps[i]) t = t.get<double>() * (1 + 0.01 * static_cast<double>(i));
    }
  write_file_atomic(path("steady.json"), steady.dump(2));
  json slow = steady;
  for (json& b : slow["benchmarks"])
    if (!b.value("error_occurred", false) && b.contains("real_time") && b.value("aggregate_unit", "time") == "time") {
      b["real_time"] = b["real_time"].get<double>() * 1.5;
      b["cpu_time"] = b["cpu_time"].get<double>() * 1.5;
    }
  for (auto& [name, reps] : slow["iteration_times_s"].items())
    for (json& rep : reps)
      for (json& t : rep) t = t.get<double>() * 1.5;
  write_file_atomic(path("slower.json"), slow.dump(2));
  r = parbench("compare " + path("steady.json") + " " + path("slower.json") + " --gate each");
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("**slower**"));
  EXPECT_THAT(r.out, HasSubstr("FAIL"));

  // A folder of past runs is a baseline distribution: here the run as if made on three other
  // days (the same run twice, or the contender again, is refused: HostileFiles).
  fs::create_directories(path("history/a"));
  const json measured = load(run + "/results.json");
  auto past = [&](const std::string& file, int day) {
    json j = measured;
    j["context"]["date"] = fmt::format("2020-01-0{}T00:00:00+00:00", day);
    write_file_atomic(path(file), j.dump());
  };
  past("history/a/results.json", 1);
  fs::copy_file(run + "/report.json", path("history/a/report.json"));  // skipped: not a GB file
  past("history/b.json", 2);
  past("history/c.json", 3);  // a history needs 3 runs
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

}  // namespace
}  // namespace pb
