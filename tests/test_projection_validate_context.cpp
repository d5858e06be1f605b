// project --validate predicts a run as its context records it: precision, reduce and param
// dtypes, pipeline-interleaved's virtual stages.
#include "tests/bf16_skip.h"
#include "tests/test_projection_support.h"

namespace pb {
namespace {

using namespace projection_test;

// --validate predicts a run in the dtypes its context records: a run whose gradients were
// all-reduced in bf16 is priced at half the bytes; a profile timed in another precision than the
// run's is refused, and so are the flags that would set them otherwise.
TEST_F(ProjectCli, ValidatePricesTheRunsOwnPrecisionAndDtypes) {
  test::Result r = parbench("run --workload " + example_net() + " --strategies ddp --devices 2 --batch 2 --iterations 2 "
                            "--warmup 1 --reduce-dtype bf16 --out " + path("run"));
  ASSERT_EQ(r.code, 0) << r.err;
  write_cpu_profile(path("p.json"), resolve_workload(example_net(), WorkloadOptions{}));
  json machine = fixture_json("machine.json");  // links slow enough that bytes set the time
  machine["device"]["kind"] = "cpu";
  for (auto& [c, algs] : machine["links"]["intra_node"].items())
    for (auto& [a, fit] : algs.items()) fit["alpha_s"] = 0, fit["bus_bytes_per_s"] = 1e5;
  write_file_atomic(path("slow.json"), machine.dump());
  json run = json::parse(read_file(path("run/results.json")));
  ASSERT_EQ(run["context"].value("reduce_dtype", ""), "bf16");
  run["context"].erase("reduce_dtype");
  write_file_atomic(path("run/as_fp32.json"), run.dump());
  auto predicted = [&](const std::string& results, const std::string& out) {
    test::Result v = parbench("project --validate " + results + " --machine " + path("slow.json") + " --profile " + path("p.json") +
                              " --out " + path(out));
    EXPECT_EQ(v.code, 0) << v.err;
    return json::parse(read_file(path(out + ".json")))["rows"].at(0).at("predicted_s").get<double>();
  };
  const double bf16 = predicted(path("run/results.json"), "bf16"), fp32 = predicted(path("run/as_fp32.json"), "fp32");
  EXPECT_LT(bf16, 0.75 * fp32) << "bf16 " << bf16 << " fp32 " << fp32;
  // A bf16 run against an fp32 profile.
  run["context"]["precision"] = "bf16";
  write_file_atomic(path("run/bf16_compute.json"), run.dump());
  r = parbench("project --validate " + path("run/bf16_compute.json") + " --machine " + path("slow.json") + " --profile " +
               path("p.json"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("the run computed in bf16, but profile " + path("p.json") + " was timed in fp32"), std::string::npos) << r.err;
  for (const char* flag : {"--reduce-dtype fp32", "--precision fp32"}) {
    r = parbench("project --validate " + path("run/results.json") + " --machine " + path("slow.json") + " --profile " +
                 path("p.json") + " " + flag);
    EXPECT_EQ(r.code, 2) << flag;
    EXPECT_NE(r.err.find(std::string(flag).substr(0, std::string(flag).find(' ')) + " does not apply"), std::string::npos) << r.err;
  }
}

// A run records --virtual-stages where it is not the default 2, and --validate prices the run's.
TEST_F(ProjectCli, RunRecordsVirtualStagesAndValidatePricesThem) {
  const std::string net = " --workload great_net --image 16 --width 0.25 --devices 2 --batch 4 --iterations 1 --warmup 1 ";
  test::Result r = parbench("run" + net + "--strategies pipeline-interleaved --virtual-stages 3 --out " + path("three"));
  ASSERT_EQ(r.code, 0) << r.err;
  json run = json::parse(read_file(path("three/results.json")));
  EXPECT_EQ(run["context"].value("virtual_stages", ""), "3");
  r = parbench("run" + net + "--strategies pipeline-interleaved --out " + path("two"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_FALSE(json::parse(read_file(path("two/results.json")))["context"].contains("virtual_stages"));
  write_cpu_profile(path("p.json"), resolve_workload("great_net", WorkloadOptions{16, 0.25}));
  const std::string validate = "project --machine " + write_cpu_machine(path("cpu.json")) + " --profile " + path("p.json") + " --validate ";
  r = parbench(validate + path("three/results.json"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.find("not modelled"), std::string::npos) << r.out;
  run["context"]["virtual_stages"] = "20";  // 40 stages of great_net's 28 layers: as the run would refuse them
  write_file_atomic(path("three/twenty.json"), run.dump());
  r = parbench(validate + path("three/twenty.json"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("not modelled"), std::string::npos) << r.out;
}

// A bf16 run validated without --profile times its layers in bf16, as it ran them.
TEST_F(ProjectCli, ValidateTimesABf16RunsLayersInBf16) {
  SKIP_WITHOUT_BF16();
  test::Result r = parbench("run --workload linear --strategies regular --devices 1 --batch 2 --iterations 2 --warmup 1 "
                            "--precision bf16 --out " + path("run"));
  ASSERT_EQ(r.code, 0) << r.err;
  r = parbench("project --validate " + path("run/results.json") + " --machine " + write_cpu_machine(path("cpu.json")) +
               " --reps 1 --save-profile " + path("prof") + " --out " + path("v"));
  ASSERT_EQ(r.code, 0) << r.err;
  int saved = 0;
  for (const auto& e : std::filesystem::directory_iterator(path("")))
    if (e.path().filename().string().rfind("prof-", 0) == 0) {
      ++saved;
      EXPECT_EQ(pj::load_profile(e.path().string()).precision, "bf16") << e.path();
    }
  EXPECT_GE(saved, 1);
}

}  // namespace
}  // namespace pb
