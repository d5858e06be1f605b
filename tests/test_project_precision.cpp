// The projection per precision: a profile records the precision it was timed in, a machine its
// peak per precision, and `project` prices compute in the profile's precision unless told to
// scale it to another by the peaks of the two, saying so.
#include "tests/test_projection_support.h"

#include "plan/memory.h"
#include "strategies/plan_gen.h"
#include "projection/plan_price.h"

namespace pb::projection_test {
namespace {

class ProjectPrecision : public test::CliTest {
 protected:
  ProjectPrecision() : CliTest("parbench_project_precision_") {}
  // uniform.json, timed in `precision`.
  std::string profile(const std::string& precision) {
    json p = fixture_json("uniform.json");
    p["context"]["precision"] = precision;
    write_file_atomic(path(precision + ".json"), p.dump());
    return path(precision + ".json");
  }
  // The fixture machine with tf32 at 2x and bf16 at 4x its fp32 peak, of `kind`.
  std::string machine_with_peaks(const std::string& kind) {
    json m = fixture_json("machine.json");
    m["device"]["kind"] = kind;
    const double fp32 = m["device"]["peak_flops"].get<double>();
    m["device"]["peak_flops_by_precision"] = {{"tf32", 2 * fp32}, {"bf16", 4 * fp32}};
    write_file_atomic(path(kind + "-peaks.json"), m.dump());
    return path(kind + "-peaks.json");
  }
  std::string cpu_machine() { return write_cpu_machine(path("cpu.json")); }
  // `project ... --format json` for regular and ddp at 1 and 2 devices, batch 4: its document.
  json project(const std::string& flags, test::Result* out = nullptr) {
    test::Result r = parbench("project --strategies regular,ddp --devices 1,2 --batch 4 --format json " + flags);
    if (out) *out = r;
    if (r.code != 0) return json();
    return json::parse(r.out);
  }
  static const json& row(const json& doc, const std::string& strategy, int devices) {
    for (const json& g : doc.at("groups"))
      for (const json& r : g.at("rows"))
        if (r.at("strategy") == strategy && r.at("devices") == devices) return r;
    throw std::runtime_error("no row " + strategy);
  }
};

TEST(ProfilePrecision, RecordedOrFp32AndOnlyAKnownOne) {
  EXPECT_EQ(uniform().precision, "fp32");  // not recorded
  json p = fixture_json("uniform.json");
  p["context"]["precision"] = "bf16";
  EXPECT_EQ(pj::parse_profile(p.dump(), "p.json").precision, "bf16");
  p["context"]["precision"] = "fp16";
  expect_usage_error([&] { pj::parse_profile(p.dump(), "p.json"); }, {"p.json", "context.precision", "fp16", "bf16"});
}

TEST(MachinePrecision, PeakPerPrecisionOrAnErrorNamingTheField) {
  json m = fixture_json("machine.json");
  pj::Machine plain = pj::parse_machine(m.dump(), "m.json", unit_classes());
  EXPECT_EQ(plain.peak("fp32"), plain.peak_flops);
  expect_usage_error([&] { (void)plain.peak("bf16"); }, {"m.json", "device.peak_flops_by_precision.bf16", "missing"});
  m["device"]["peak_flops_by_precision"] = {{"bf16", 4e12}};
  const pj::Machine with = pj::parse_machine(m.dump(), "m.json", unit_classes());
  EXPECT_EQ(with.peak("bf16"), 4e12);
  expect_usage_error([&] { (void)with.peak("tf32"); }, {"device.peak_flops_by_precision.tf32"});
  // Written and read back alike.
  EXPECT_EQ(pj::parse_machine(pj::machine_json(with).dump(), "again.json", unit_classes()).peak("bf16"), 4e12);
  m["device"]["peak_flops_by_precision"] = {{"fp16", 4e12}};
  expect_usage_error([&] { pj::parse_machine(m.dump(), "m.json", unit_classes()); }, {"device.peak_flops_by_precision.fp16", "unknown"});
  m["device"]["peak_flops_by_precision"] = {{"bf16", -1}};
  expect_usage_error([&] { pj::parse_machine(m.dump(), "m.json", unit_classes()); }, {"device.peak_flops_by_precision.bf16"});
}

TEST_F(ProjectPrecision, ABf16ProfileIsPricedInBf16AndItsMemoryIsBf16s) {
  test::Result r;
  const std::string to = " --machine " + machine_with_peaks("cuda") + " --from-machine " + cpu_machine();
  const json fp32 = project("--profile " + profile("fp32") + to, &r);
  ASSERT_EQ(r.code, 0) << r.err;
  // A bf16 profile on the fixture CPU machine, which has no bf16 peak: nothing to scale it from.
  project("--profile " + profile("bf16") + to, &r);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.err.find("device.peak_flops_by_precision.bf16"), std::string::npos) << r.err;
  const json bf16 = project("--profile " + profile("bf16") + " --machine " + machine_with_peaks("cuda") +
                                " --from-machine " + machine_with_peaks("cpu"),
                            &r);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(bf16.at("precision"), "bf16");
  EXPECT_EQ(bf16.at("profile_precision"), "bf16");
  EXPECT_EQ(fp32.at("precision"), "fp32");
  // Both machines 4x faster in bf16: the same scale as fp32's; only the memory differs.
  EXPECT_DOUBLE_EQ(bf16.at("compute_scale").get<double>(), fp32.at("compute_scale").get<double>());
  for (const auto& [s, n] : std::vector<std::pair<std::string, int>>{{"regular", 1}, {"ddp", 2}}) {
    EXPECT_DOUBLE_EQ(row(bf16, s, n).at("compute_s").get<double>(), row(fp32, s, n).at("compute_s").get<double>()) << s;
    StrategyOptions o;
    o.devices = n;
    o.backend.precision = Precision::Bf16;
    WorkspaceProbes none;
    none.layers = [](const std::vector<LayerPlan>&, int64_t) { return 0.0; };
    const NetPlan net = pj::net_of(uniform());
    const double want =
        plan_memory(make_plan(s, net, o, row(bf16, s, n).at("global_batch").get<int64_t>()), net, none).worker_peak();
    EXPECT_DOUBLE_EQ(row(bf16, s, n).at("peak_bytes_per_device").get<double>(), want) << s;
    EXPECT_LT(row(bf16, s, n).at("peak_bytes_per_device").get<double>(),
              row(fp32, s, n).at("peak_bytes_per_device").get<double>()) << s;
  }
  // The table titles say the precision.
  const test::Result md = parbench("project --strategies regular --devices 1 --batch 4 --profile " + profile("bf16") +
                                   " --machine " + machine_with_peaks("cuda") + " --from-machine " + machine_with_peaks("cpu"));
  ASSERT_EQ(md.code, 0) << md.err;
  EXPECT_NE(md.out.find("on test machine, bf16"), std::string::npos) << md.out;
}

TEST_F(ProjectPrecision, AnotherPrecisionOnlyScaledOnPurposeByThePeaks) {
  test::Result r;
  const std::string fp32_profile = "--profile " + profile("fp32") + " --machine " + machine_with_peaks("cuda") +
                                   " --from-machine " + cpu_machine();
  const json base = project(fp32_profile, &r);
  ASSERT_EQ(r.code, 0) << r.err;
  project(fp32_profile + " --precision bf16", &r);
  EXPECT_EQ(r.code, 2) << r.out;
  for (const char* needle : {"--precision bf16", "fp32.json", "timed in fp32", "--scale-precision"})
    EXPECT_NE(r.err.find(needle), std::string::npos) << needle << ": " << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  // Scaled: the target's bf16 peak is 4x its fp32 one; the source's fp32 stays.
  const json scaled = project(fp32_profile + " --precision bf16 --scale-precision", &r);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(scaled.at("precision"), "bf16");
  EXPECT_EQ(scaled.at("profile_precision"), "fp32");
  EXPECT_DOUBLE_EQ(scaled.at("compute_scale").get<double>(), base.at("compute_scale").get<double>() / 4);
  EXPECT_NEAR(row(scaled, "regular", 1).at("compute_s").get<double>(), row(base, "regular", 1).at("compute_s").get<double>() / 4,
              1e-9 * row(base, "regular", 1).at("compute_s").get<double>());
  const test::Result md = parbench("project --strategies regular --devices 1 --batch 4 " + fp32_profile +
                                   " --precision tf32 --scale-precision");
  ASSERT_EQ(md.code, 0) << md.err;
  EXPECT_NE(md.out.find("tf32 scaled from fp32 by peaks"), std::string::npos) << md.out;
  // The same machine's own peaks, no other scaling.
  const json same = project("--profile " + profile("fp32") + " --machine " + machine_with_peaks("cpu") +
                                " --precision bf16 --scale-precision",
                            &r);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_DOUBLE_EQ(same.at("compute_scale").get<double>(), 0.25);
  project(fp32_profile + " --scale-precision", &r);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("already fp32"), std::string::npos) << r.err;
  project(fp32_profile + " --precision fp16", &r);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--precision expects fp32, tf32 or bf16"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace pb::projection_test
