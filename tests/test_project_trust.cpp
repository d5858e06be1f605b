// What `project` prints must not mislead: a profile from another kind of device is scaled on
// purpose or refused, times beyond the profiled batches never make a sample cheaper, its memory
// per device is the estimate runs are checked against, an
// implausible efficiency is marked, a strategy with nothing to project is an error, and the
// projected table has no column only a measurement fills.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "engine/fsutil.h"
#include "plan/memory.h"
#include "scenarios/scenarios.h"
#include "strategies/plan_gen.h"
#include "strategies/stages.h"
#include "tests/cli_fixture.h"
#include "tests/test_projection_support.h"

namespace pb {
namespace {

namespace pj = projection;
using nlohmann::json;

std::string fixture(const std::string& name) { return (test::source_dir() / "tests/fixtures/projection" / name).string(); }
json fixture_json(const std::string& name) { return json::parse(read_file(fixture(name))); }

// uniform.json's layers timed at batches 1 and 2 only, the larger faster than the smaller per
// layer and pass (a noisy profile): 2 ms, then 1.5 ms.
json noisy_profile() {
  json j = fixture_json("uniform.json");
  j["batches"] = {1, 2};
  for (json& l : j["layers"]) {
    l["forward_s"] = {0.002, 0.0015};
    l["backward_data_s"] = {0.002, 0.0015};
    l["backward_weights_s"] = {0.002, 0.0015};
  }
  j["loss_s"] = {0, 0};
  return j;
}

TEST(ProjectionTrust, TimePerSampleNeverFallsBeyondTheProfiledBatches) {
  const pj::Profile p = pj::parse_profile(noisy_profile().dump(), "noisy.json");
  for (int l = 0; l < 4; ++l)
    for (double b : {3.0, 4.0, 8.0, 64.0}) {
      EXPECT_GE(p.forward(l, b) / b, p.forward(l, 2) / 2 * (1 - 1e-12)) << "layer " << l << " at batch " << b;
      EXPECT_GE(p.backward_weights(l, b) / b, p.backward_weights(l, 2) / 2 * (1 - 1e-12)) << "layer " << l << " at batch " << b;
    }
  const pj::Machine m = pj::load_machine(fixture("machine.json"), unit_classes());
  double last = 0;
  for (int64_t b : {2, 4, 8, 16}) {
    pj::Config c;
    c.strategy = "regular";
    c.global_batch = b;
    const pj::Prediction r = pj::predict(p, m, c);
    ASSERT_TRUE(r.feasible) << r.reason;
    const double per_sample = r.step_s / static_cast<double>(b);
    EXPECT_GE(per_sample, last * (1 - 1e-12)) << "regular at batch " << b << ": " << r.step_s * 1e3 << " ms";
    last = per_sample;
  }
}

// project's memory per device ("fits") is the run's per-worker estimate, not a second model: on
// uniform.json's net (four 3x3 convolutions of 4 channels, 8x8, no workspace) every strategy's
// peak is plan/memory.h's of the plan the run makes, which the allocators are checked against.
TEST(ProjectionTrust, MemoryPerDeviceIsTheEstimateRunsAreCheckedAgainst) {
  NetSpec net;
  net.input = {4, 8, 8};
  for (int i = 0; i < 4; ++i) {
    LayerSpec conv;
    conv.type = LayerType::Conv2d;
    conv.out_channels = 4, conv.kernel_h = conv.kernel_w = 3, conv.pad_h = conv.pad_w = 1;
    net.layers.push_back(conv);
  }
  const NetPlan plan = plan_net(net);
  const pj::Profile p = pj::load_profile(fixture("uniform.json"));
  const pj::Machine m = pj::load_machine(fixture("machine.json"), unit_classes());
  ASSERT_EQ(plan.param_count, p.param_count());
  for (const char* s : {"regular", "dp", "ddp", "mp", "pipeline", "pipeline-1f1b", "pipeline-recompute", "fsdp", "zero2", "tp",
                        "dp2xpp2", "dp2xtp2"})
    for (int n = 1; n <= 4; ++n) {
      pj::Config c;
      c.strategy = s;
      c.devices = n;
      c.global_batch = 8;
      c.micro_batches = std::string(s).find("pp") != std::string::npos || std::string(s).rfind("pipeline", 0) == 0 ? 2 : 1;
      const pj::Prediction r = pj::predict(p, m, c);
      if (!r.feasible) continue;  // regular beyond one device, hybrids off their 4
      StrategyOptions o;
      o.devices = n;
      o.micro_batches = c.micro_batches;
      WorkspaceProbes none;
      none.layers = [](const std::vector<LayerPlan>&, int64_t) { return 0.0; };
      EXPECT_DOUBLE_EQ(r.peak_bytes, plan_memory(make_plan(s, plan, o, 8), plan, none).worker_peak()) << s << " x" << n;
    }
}

class ProjectTrust : public test::CliTest {
 protected:
  ProjectTrust() : CliTest("parbench_project_trust_") {}
  std::string cpu_machine() { return projection_test::write_cpu_machine(path("cpu.json")); }
};

TEST_F(ProjectTrust, AProfileFromAnotherKindOfDeviceIsScaledOnPurposeOrRefused) {
  // uniform.json was measured on a CPU; machine.json describes GPUs.
  const std::string common = "project --profile " + fixture("uniform.json") + " --machine " + fixture("machine.json") +
                             " --devices 1,2 --batch 2";
  test::Result r = parbench(common);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.err.find("--from-machine"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--from-profile-peak"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("cpu"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("projected on"), std::string::npos) << "no table without a scaling";

  r = parbench(common + " --from-profile-peak 0.5");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("projected on test machine, compute x"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(--from-profile-peak)"), std::string::npos) << r.out;

  r = parbench(common + " --from-machine " + cpu_machine());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("compute x1 from test cpu (--from-machine)"), std::string::npos) << r.out;

  r = parbench(common + " --from-machine " + cpu_machine() + " --from-profile-peak 0.5");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.err.find("give one"), std::string::npos) << r.err;

  // A CPU profile on a CPU machine needs no scaling, and the title says so.
  r = parbench("project --profile " + fixture("uniform.json") + " --machine " + cpu_machine() + " --devices 1,2 --batch 2");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("compute at the profile's measured cpu speed"), std::string::npos) << r.out;
}

TEST_F(ProjectTrust, NothingToProjectExitsTwoSayingWhy) {
  const std::string common = "project --profile " + fixture("uniform.json") + " --machine " + fixture("machine.json") +
                             " --from-profile-peak 0.5 --batch 4";
  test::Result r = parbench(common + " --strategies dp2xpp2 --devices 2");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.err.find("--strategies dp2xpp2"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("4 devices"), std::string::npos) << r.err;
  r = parbench(common + " --strategies dp2xtp2 --devices 2,8");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.err.find("--strategies dp2xtp2"), std::string::npos) << r.err;
  r = parbench(common + " --strategies regular --devices 2");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.err.find("one device"), std::string::npos) << r.err;
  r = parbench(common + " --strategies dp2xpp2,ddp --devices 4");
  EXPECT_EQ(r.code, 0) << r.err;  // where it has a configuration
}

TEST_F(ProjectTrust, ProjectedTableHasOnlyProjectedColumnsAndMarksImplausibleEfficiency) {
  // Every layer takes the same time at batch 1, 2 and 4: a sample costs a quarter at 4 of what
  // it costs at 1, so weak-scaled tp (each worker a slice of a larger batch) looks superlinear.
  json j = fixture_json("uniform.json");
  for (json& l : j["layers"]) l["forward_s"] = l["backward_weights_s"] = {0.002, 0.002, 0.002};
  write_file_atomic(path("flat.json"), j.dump());
  json m = fixture_json("machine.json");  // links that cost nothing: compute alone decides
  for (auto& [where, colls] : m["links"].items())
    for (auto& [coll, algs] : colls.items())
      for (auto& [alg, ab] : algs.items()) ab = {{"alpha_s", 0}, {"bus_bytes_per_s", 1e18}};
  write_file_atomic(path("fast.json"), m.dump());
  const test::Result r = parbench("project --profile " + path("flat.json") + " --machine " + path("fast.json") +
                                  " --from-profile-peak 0.5 --strategies regular,tp,ddp --devices 1,2,4 --batch 1 --scaling weak");
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* measured : {"ms/iteration (median)", "| CV |", "bubble measured", "transfer |"})
    EXPECT_EQ(r.out.find(measured), std::string::npos) << measured << " in\n" << r.out;
  EXPECT_NE(r.out.find("## Projected: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("projected ms/step"), std::string::npos) << r.out;
  // tp x4 at weak scaling computes a quarter of each layer of 4 samples in the time of one.
  std::string tp4;
  for (std::size_t at = r.out.find("| tp | 4 |"); at != std::string::npos && tp4.empty(); at = r.out.find("| tp | 4 |", at + 1))
    tp4 = r.out.substr(at, r.out.find('\n', at) - at);
  ASSERT_FALSE(tp4.empty()) << r.out;
  EXPECT_NE(tp4.find("% !"), std::string::npos) << tp4;
  EXPECT_NE(r.out.find("! above 100% efficiency"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace pb
