// --plan FILE: a plan written by hand (tests/fixtures/plans/) runs as its strategy's step, computes
// what the strategy's own plan computes bit for bit, and projects to the same time; a plan that
// would compute something else is refused naming the worker and the action.
#include "projection/plan_price.h"
#include "strategies/plan_gen.h"
#include "tests/bf16_skip.h"
#include "tests/test_projection_support.h"
#include "tests/test_strategies_support.h"

namespace pb {
namespace {

using namespace projection_test;
namespace st = strategies_test;

std::string plan_fixture() { return (test::source_dir() / "tests/fixtures/plans/onefoneb_2stages.json").string(); }
std::string example_net() { return (test::source_dir() / "workloads/examples/mixed_stride_pad.json").string(); }
NetSpec net() { return resolve_workload(example_net(), WorkloadOptions{}); }

StrategyOptions with_plan(const Plan& p) {
  StrategyOptions o = st::options(2);
  o.micro_batches = 2;
  o.plan = std::make_shared<const Plan>(p);
  o.plan_source = "test plan";
  return o;
}

// The fixture with one action changed.
Plan changed(const std::function<void(Plan&)>& edit) {
  Plan p = read_plan_file(plan_fixture());
  edit(p);
  return p;
}

TEST(PlanFile, HandWrittenOneFOneBMatchesPipeline1f1bBitForBit) {
  const Plan p = read_plan_file(plan_fixture());
  StrategyOptions own = st::options(2);
  own.micro_batches = 2;
  const st::Trained a = st::train("pipeline-1f1b", own, net(), {4}, 4), b = st::train("pipeline-1f1b", with_plan(p), net(), {4}, 4);
  EXPECT_EQ(a.losses, b.losses);
  ASSERT_EQ(a.params.size(), b.params.size());
  EXPECT_EQ(a.params, b.params);  // bit for bit
  // It is not the generated plan: its waits are merged, its buffers in another order.
  const Plan generated = make_plan("pipeline-1f1b", plan_net(net()), own, 4);
  EXPECT_NE(plan_to_json(generated), plan_to_json(p));
  EXPECT_LT(p.actions[0].size(), generated.actions[0].size());
}

TEST(PlanFile, HandWrittenOneFOneBProjectsToPipeline1f1bsTime) {
  const pj::Profile prof = profile_of(plan_net(net()));
  for (const pj::Machine& m : {machine(), free_links()}) {
    pj::Config own = config("pipeline-1f1b", 2, 4), file = own;
    own.micro_batches = file.micro_batches = 2;
    file.plan = std::make_shared<const Plan>(read_plan_file(plan_fixture()));
    const pj::Prediction a = pj::predict(prof, m, own), b = pj::predict(prof, m, file);
    ASSERT_TRUE(a.feasible && b.feasible) << a.reason << b.reason;
    EXPECT_NEAR(a.step_s, b.step_s, 1e-12);
    EXPECT_NEAR(a.compute_s, b.compute_s, 1e-12);
    EXPECT_EQ(a.comm_bytes, b.comm_bytes);
    EXPECT_EQ(a.peak_bytes, b.peak_bytes);
  }
  // A plan of another net: refused, naming the layer.
  pj::Config other = config("pipeline-1f1b", 2, 4);
  other.plan = std::make_shared<const Plan>(read_plan_file(plan_fixture()));
  const pj::Prediction r = pj::predict(uniform(), machine(), other);
  EXPECT_FALSE(r.feasible);
  EXPECT_NE(r.reason.find("the plan's net has 10 layers, the profile's 4"), std::string::npos) << r.reason;
}

TEST(PlanFile, APlanThatComputesSomethingElseIsRefusedNamingWorkerAndAction) {
  auto refused = [&](const Plan& p, std::initializer_list<std::string> needles) {
    SCOPED_TRACE(*needles.begin() + std::string(" ") + *(needles.end() - 1));
    expect_usage_error([&] { st::train("pipeline-1f1b", with_plan(p), net(), {4}, 1); }, needles);
  };
  // Micro-batch 1's forward on micro-batch 0's input.
  refused(changed([](Plan& p) { p.actions[0][4].reads[0] = 0; }),
          {"test plan", "worker 0 action 4", "'x[0]' holds micro-batch 0 here, not 1"});
  // The first backward adding to gradients that hold nothing yet.
  refused(changed([](Plan& p) { p.actions[1][6].reads.push_back(10); }),
          {"worker 1 action 6", "the stage's first backward writes the gradients"});
  // A buffer the pipeline does not keep.
  refused(changed([](Plan& p) {
            // As large as the message sent from it (a smaller one the validator refuses first).
            PlanBuffer scratch{1, BufferRole::Gathered, 7};
            scratch.bytes = p.buffers[p.actions[1][18].reads[0]].bytes;
            p.buffers.push_back(scratch);
            p.actions[1][16].writes = {static_cast<int>(p.buffers.size()) - 1};
            p.actions[1][18].reads = {static_cast<int>(p.buffers.size()) - 1};
          }),
          {"worker 1 action 16", "buffer 'gathered[7]' is none that pipeline-1f1b keeps on worker 1"});
  // What the validator finds comes first: a wait deleted (the send's buffer is then reused unordered).
  refused(changed([](Plan& p) { p.actions[1][20].waits = {18}; }), {"test plan", "worker 1"});
  // Strategies other than the staged ones run only their own plans.
  StrategyOptions o = with_plan(read_plan_file(plan_fixture()));
  expect_usage_error([&] { make_strategy("fsdp", o); }, {"test plan", "fsdp runs only the plan it makes"});
}

// A plan file's transfers name one dtype (both sides of each the same), bf16 only under bf16
// compute (a stage's output is then bf16 values; under fp32 bf16 would round them); an fp32 file
// runs under bf16 compute bit for bit as the strategy's own bf16 transfers.
TEST(PlanFile, TransfersInOneDtypeAndBf16OnlyUnderBf16Compute) {
  auto transfers = [](Plan& p, const std::function<bool(int w, const Action&)>& which) {
    for (int w = 0; w < p.workers; ++w)
      for (Action& a : p.actions[w])
        if ((a.kind == ActionKind::Send || a.kind == ActionKind::Recv) && which(w, a)) on_wire(a, DType::Bf16);
  };
  const Plan all = changed([&](Plan& p) { transfers(p, [](int, const Action&) { return true; }); });
  expect_usage_error([&] { st::train("pipeline-1f1b", with_plan(all), net(), {4}, 1); },
                     {"test plan", "pipeline-1f1b sends its activations in fp32 (bf16 only under --precision bf16)"});
  const Plan one = changed([&](Plan& p) {
    bool first = true;
    transfers(p, [&](int w, const Action& a) { return w == 1 && a.kind == ActionKind::Send && std::exchange(first, false); });
  });
  expect_usage_error([&] { st::train("pipeline-1f1b", with_plan(one), net(), {4}, 1); },
                     {"test plan", "worker 1 action", "does not match its partner worker 0 action", "dtype bf16 against fp32"});
  SKIP_WITHOUT_BF16();
  StrategyOptions own = st::options(2);
  own.micro_batches = 2;
  own.backend.precision = Precision::Bf16;
  StrategyOptions file = with_plan(read_plan_file(plan_fixture())), file16 = with_plan(all);
  file.backend.precision = file16.backend.precision = Precision::Bf16;
  const st::Trained a = st::train("pipeline-1f1b", own, net(), {4}, 3), b = st::train("pipeline-1f1b", file, net(), {4}, 3),
                    c = st::train("pipeline-1f1b", file16, net(), {4}, 3);
  EXPECT_EQ(a.losses, b.losses);
  EXPECT_EQ(a.params, b.params);
  EXPECT_EQ(a.params, c.params);
}

TEST(PlanFile, DdpPlanFileRunsAsDdpBitForBitAndOnlyItsOwnCalls) {
  StrategyOptions own = st::options(2);
  own.first_bucket_bytes = 2 << 10;  // several buckets on the small net
  own.bucket_bytes = 8 << 10;
  const Plan made = make_plan("ddp", plan_net(net()), own, 4);
  const Plan file = plan_from_json(plan_to_json(made), "test plan");  // as parbench plan --format json writes it
  StrategyOptions with = own;
  with.plan = std::make_shared<const Plan>(file);
  with.plan_source = "test plan";
  const st::Trained a = st::train("ddp", own, net(), {4}, 4), b = st::train("ddp", with, net(), {4}, 4);
  EXPECT_EQ(a.losses, b.losses);
  EXPECT_EQ(a.params, b.params);  // bit for bit
  // A bucket's all-reduce over fewer values than its own plan's (on every member alike, so the
  // validator sees nothing wrong) is refused, naming the worker and the action.
  Plan wrong = file;
  int first = -1;
  for (auto& list : wrong.actions)
    for (Action& x : list)
      if (x.kind == ActionKind::Collective) {
        first = x.id;
        x.count -= 1, x.bytes -= 4;
        break;
      }
  ASSERT_GE(first, 0);
  expect_usage_error([&] { check_replica_plan(wrong, made, "test plan"); },
                     {"test plan", fmt::format("worker 0 action {}", first), "ddp makes no such call"});
  expect_usage_error([&] { check_replica_plan(file, make_plan("ddp", plan_net(net()), st::options(2), 4), "test plan"); },
                     {"test plan", "is none that ddp keeps"});  // other bucket sizes
}

TEST_F(ProjectCli, DdpPlanFileFromParbenchPlanRuns) {
  test::Result r = parbench("plan --strategy ddp --devices 2 --batch 4 --workload " + example_net() +
                            " --format json --out " + path("ddp.json"));
  ASSERT_EQ(r.code, 0) << r.err;
  r = parbench("run --plan " + path("ddp.json") + " --workload " + example_net() + " --iterations 1 --warmup 0 --out " + path("run"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(read_file(path("run/results.json")).find("ddp/devices:2/batch:4"), std::string::npos);
  // Another bucket size than the file's: refused before the run, naming the buffer.
  r = parbench("run --plan " + path("ddp.json") + " --workload " + example_net() + " --bucket-mb 0.001 --first-bucket-mb 0.001 --iterations 1 --out " + path("run2"));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("none that ddp keeps"), std::string::npos) << r.err;
}

TEST_F(ProjectCli, PlanFileRunsAndProjects) {
  const std::string file = plan_fixture();
  test::Result r = parbench("run --plan " + file + " --workload " + example_net() + " --iterations 1 --warmup 0 --out " + path("run"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(read_file(path("run/results.json")).find("pipeline-1f1b/devices:2/batch:4"), std::string::npos);
  // Flags the plan sets are refused beside it, naming them.
  r = parbench("run --plan " + file + " --workload " + example_net() + " --devices 4");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--devices does not apply"), std::string::npos) << r.err;
  // A bad plan file: exit 2 naming the file, the worker and the action.
  Plan bad = read_plan_file(file);
  bad.actions[0][9].waits = {7};  // the send of micro-batch 0 never waited for
  write_file_atomic(path("bad.json"), plan_to_json(bad));
  r = parbench("run --plan " + path("bad.json") + " --workload " + example_net());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--plan " + path("bad.json") + ": refused"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("worker 0 action 2"), std::string::npos) << r.err;
  // One the validator passes but the pipeline would compute wrong: refused before anything runs.
  bad = read_plan_file(file);
  bad.actions[0][4].reads[0] = 0;  // micro-batch 1's forward on micro-batch 0's samples
  write_file_atomic(path("wrong_input.json"), plan_to_json(bad));
  r = parbench("run --plan " + path("wrong_input.json") + " --workload " + example_net() + " --out " + path("never"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("worker 0 action 4 (forward layers [0, 2) mb 1 x2): its input 'x[0]' holds micro-batch 0"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(path("never")));
  // project --plan: the plan's one configuration, at pipeline-1f1b's time.
  write_file_atomic(path("p.json"), pj::profile_json(profile_of(plan_net(net()))).dump());
  const std::string m = " --machine " + fixture("machine.json") + " --profile " + path("p.json") + " --format json";
  r = parbench("project --plan " + file + m);
  ASSERT_EQ(r.code, 0) << r.err;
  const json a = json::parse(r.out);
  r = parbench("project --strategies pipeline-1f1b --devices 2 --batch 4 --scaling strong --micro-batches 2" + m);
  ASSERT_EQ(r.code, 0) << r.err;
  const json b = json::parse(r.out);
  ASSERT_EQ(a["groups"][0]["rows"].size(), 1u);
  EXPECT_NEAR(a["groups"][0]["rows"][0]["step_s"].get<double>(), b["groups"][0]["rows"][0]["step_s"].get<double>(), 1e-12);
  r = parbench("project --plan " + path("bad.json") + m);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("worker 0 action 2"), std::string::npos) << r.err;
}

// A run keeps the plan of every configuration it ran: the plan `parbench plan` prints for it, and
// a file `run --plan` reruns as the same benchmark.
TEST_F(ProjectCli, RunFolderHoldsThePlansItRan) {
  auto plan_file_name = [](std::string bench) {  // the benchmark's name, '/' and ':' as '_'
    for (char& ch : bench)
      if (ch == '/' || ch == ':') ch = '_';
    return bench + ".json";
  };
  const std::string w = " --workload " + example_net() + " --device-kind cpu";
  test::Result r = parbench("run" + w + " --strategies pipeline-1f1b,fsdp --devices 2 --batch 4 --scaling strong "
                            "--micro-batches 2 --iterations 1 --warmup 0 --out " + path("run"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("plans/ (2 plan file(s)"), std::string::npos) << r.out;
  for (const std::string s : {"pipeline-1f1b", "fsdp"}) {
    SCOPED_TRACE(s);
    const std::string bench = "mixed_stride_pad/" + s + "/devices:2/batch:4";
    const std::string kept = path("run/plans/" + plan_file_name(bench));
    ASSERT_TRUE(std::filesystem::exists(kept)) << kept;
    r = parbench("plan" + w + " --strategy " + s + " --devices 2 --batch 4 --micro-batches 2 --format json");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(read_file(kept), r.out);
  }
  r = parbench("run --plan " + path("run/plans/" + plan_file_name("mixed_stride_pad/pipeline-1f1b/devices:2/batch:4")) + w +
               " --iterations 1 --warmup 0 --out " + path("again"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(read_file(path("again/results.json")).find("\"mixed_stride_pad/pipeline-1f1b/devices:2/batch:4\""),
            std::string::npos);
}

}  // namespace
}  // namespace pb
