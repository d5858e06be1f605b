// What `parbench run` sweeps: the hybrids' factorizations, the micro-batch rule, the recorded ddp
// gradient average, and the pipeline variants the schedule flags pick.
#include "tests/test_harness_support.h"

namespace pb {
namespace {

using namespace pb::harness_test;

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
            "pipeline-zb,pipeline-interleaved,pipeline-zbv,pipeline-recompute,pipeline-1f1b-recompute,fsdp,zero2,fsdp-prefetch,zero2-prefetch,tp,dp2xpp2");
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
  r = parbench("replay --workload linear --strategy pipeline-zb --recompute --device-kind cpu --out " + path("zb"));
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--recompute: pipeline-zb is a schedule of its own, without recompute"));
}

}  // namespace
}  // namespace pb
