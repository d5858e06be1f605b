// Bad input to the strategies is refused with a clear UsageError, also through the parbench binary
// (exit code 2); a batch smaller than the workers uses fewer of them.
#include "tests/test_strategies_support.h"

namespace pb {
namespace {

using namespace pb::strategies_test;

std::string usage_error(const std::string& strategy, StrategyOptions o, const NetSpec& net, int64_t batch) {
  try {
    train(strategy, o, net, {batch}, 1);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "no UsageError";
}

TEST(Strategies, BadInput) {
  EXPECT_THAT(usage_error("nope", options(1), linear_net(), 4),
              HasSubstr("unknown strategy 'nope': expected one of regular, dp, ddp, mp, pipeline, pipeline-1f1b, "
                        "pipeline-zb, pipeline-interleaved, pipeline-zbv, pipeline-recompute, pipeline-1f1b-recompute"));
  EXPECT_THAT(usage_error("dp", options(0), linear_net(), 4), HasSubstr("--devices must be at least 1, got 0"));
  EXPECT_THAT(usage_error("mp", options(2), linear_net(), 4),
              HasSubstr("mp: 2 stages but the net has only 1 layer(s)"));
  EXPECT_THAT(usage_error("pipeline", options(29), small_great_net(), 4), HasSubstr("only 28 layer(s)"));
  StrategyOptions o = options(2);
  o.balance = {10, 10};
  EXPECT_THAT(usage_error("mp", o, small_great_net(), 4), HasSubstr("--balance 10,10 sums to 20, but the net has 28 layers"));
  o.balance = {28, 0};
  EXPECT_THAT(usage_error("pipeline", o, small_great_net(), 4), HasSubstr("every stage needs at least one layer"));
  o.balance = {28};
  EXPECT_THAT(usage_error("mp", o, small_great_net(), 4), HasSubstr("has 1 entries for 2 stages"));
  o = options(2);
  o.micro_batches = 5;
  EXPECT_THAT(usage_error("pipeline", o, small_great_net(), 4), HasSubstr("5 micro-batches but the batch has only 4"));
  o.micro_batches = 0;
  EXPECT_THAT(usage_error("pipeline", o, small_great_net(), 4), HasSubstr("--micro-batches must be at least 1"));
  o = options(2);
  o.kind = DeviceKind::Cuda;
  if (cuda_device_count() == 0) {
    EXPECT_THAT(usage_error("ddp", o, linear_net(), 4), HasSubstr("no CUDA device"));
  } else {
    o.devices = cuda_device_count() + 1;
    EXPECT_THAT(usage_error("ddp", o, linear_net(), 4), HasSubstr("pass --oversubscribe"));
  }
}

// One grammar: every name the program takes comes back as the registry line it names and the
// factors, schedule and recompute the name fixes.
TEST(Strategies, NamesParseIntoATypedSpec) {
  const StrategySpec zbr = parse_strategy("dp2xpp4-1f1b-recompute").value();
  EXPECT_EQ(zbr.entry, kHybridFamily);
  EXPECT_TRUE(zbr.family && zbr.fill_drain && zbr.recompute);
  EXPECT_EQ(zbr.schedule, Schedule::OneFOneB);
  EXPECT_EQ(std::make_pair(zbr.first, zbr.second), std::make_pair(2, 4));
  EXPECT_EQ(zbr.devices(), 8);
  const StrategySpec tp = parse_strategy("dp3xtp2").value();
  EXPECT_TRUE(tp.member_of(kDpTpFamily) && !tp.member_of(kHybridFamily) && !tp.fill_drain);
  EXPECT_EQ(parse_strategy("hsdp2x4").value().devices(), 8);
  EXPECT_TRUE(parse_strategy("hsdp2x4")->member_of(kHsdpFamily));
  const StrategySpec family = parse_strategy(kHsdpFamily).value();  // the family's word: no factors
  EXPECT_TRUE(family.family && !family.member());
  const StrategySpec p = parse_strategy("pipeline-1f1b-recompute").value();
  EXPECT_EQ(p.entry, "pipeline-1f1b-recompute");
  EXPECT_TRUE(p.fill_drain && p.recompute && !p.member());
  EXPECT_EQ(p.schedule, Schedule::OneFOneB);
  EXPECT_FALSE(parse_strategy("pipeline-zb")->fill_drain);  // a schedule of its own
  EXPECT_FALSE(parse_strategy("ddp")->fill_drain);
  for (const std::string& n : strategy_names()) EXPECT_EQ(parse_strategy(n).value().entry, n);
  for (const char* bad : {"dp02xpp2", "dp2xtp2-1f1b", "hsdp2x", "Ddp", "pipeline-gpipe", "", "dpxpp2"})
    EXPECT_FALSE(parse_strategy(bad)) << bad;
  EXPECT_THROW(parse_strategy("dp70000xpp2"), UsageError);  // beyond a run's devices, not a wrapped int
}

TEST(Strategies, HybridNamesAndRefusals) {
  int dp = 0, pp = 0;
  Schedule sc = Schedule::GPipe;
  bool rc = false;
  EXPECT_EQ(hybrid_name(2, 4, Schedule::OneFOneB, true), "dp2xpp4-1f1b-recompute");
  ASSERT_TRUE(parse_hybrid_name("dp4xpp2-1f1b", &dp, &pp, &sc, &rc));
  EXPECT_EQ(dp, 4);
  EXPECT_EQ(pp, 2);
  EXPECT_EQ(sc, Schedule::OneFOneB);
  EXPECT_FALSE(rc);
  for (const char* bad : {"dp02xpp2", "dp2xpp", "dp2xpp2-", "dp2xpp2-gpipe", "dp0xpp2", "dp+2xpp2", "dpxpp", "xdp2xpp2"})
    EXPECT_FALSE(parse_hybrid_name(bad, &dp, &pp, &sc, &rc)) << bad;
  EXPECT_TRUE(strategy_info("dp2xpp2").multi_process);
  EXPECT_EQ(dptp_name(3, 2), "dp3xtp2");
  ASSERT_TRUE(parse_dptp_name("dp3xtp2", &dp, &pp));
  EXPECT_EQ(dp, 3);
  EXPECT_EQ(pp, 2);
  for (const char* bad : {"dp3xtp2-1f1b", "dp03xtp2", "dp3xtp", "dpxtp", "dp3xpp2"})
    EXPECT_FALSE(parse_dptp_name(bad, &dp, &pp)) << bad;
  EXPECT_EQ(strategy_info("dp2xtp2").name, "dpxtp");
  EXPECT_THAT(usage_error("dp2xtp2", options(2), small_great_net(), 8),
              HasSubstr("dp2xtp2: 2 replicas of a 2-way tp group run on 4 devices, got --devices 2"));
  EXPECT_THAT(usage_error("dpxtp", options(4), small_great_net(), 8), HasSubstr("pick one as dp<D>xtp<T>"));
  EXPECT_THAT(usage_error("dp2xtp3", options(6), linear_net(), 8),
              HasSubstr("dp2xtp3: no layer of the net has 3 or more output channels"));
  StrategyOptions o = options(4);
  o.schedule = Schedule::OneFOneB;
  EXPECT_EQ(make_strategy("dp2xpp2", o)->name(), "dp2xpp2-1f1b");  // as "pipeline" takes the options
  EXPECT_THAT(usage_error("dp2xpp2", options(3), small_great_net(), 8),
              HasSubstr("dp2xpp2: 2 replicas of a 2-stage pipeline run on 4 devices, got --devices 3"));
  EXPECT_THAT(usage_error("dpxpp", options(4), small_great_net(), 8), HasSubstr("pick one as dp<D>xpp<P>"));
  EXPECT_THAT(usage_error("dp4xpp1", options(4), small_great_net(), 3),
              HasSubstr("cuts the batch of 3 into 3 piece(s) for 4 replicas"));
  o = options(4);
  o.micro_batches = 3;
  EXPECT_THAT(usage_error("dp2xpp2", o, small_great_net(), 5),
              HasSubstr("3 micro-batches but replica 1's piece of the batch of 5 has only 2 sample(s)"));
  EXPECT_THAT(usage_error("dp2xpp2", options(4), linear_net(), 4), HasSubstr("only 1 layer(s)"));
}

TEST(Strategies, BatchSmallerThanWorkersUsesFewerWorkers) {
  for (const char* s : {"dp", "ddp"}) {
    SCOPED_TRACE(s);
    ::testing::internal::CaptureStderr();
    const Trained r = train(s, options(4), linear_net(), {3}, 2);
    EXPECT_THAT(::testing::internal::GetCapturedStderr(), HasSubstr("gives 3 chunk(s) (1,1,1); 1 worker(s) sit idle"));
    EXPECT_EQ(r.stats.workers_used, 3);
    EXPECT_EQ(r.stats.workers[3].samples, 0);
    expect_matches(r, reference(linear_net(), {3}, 2));
  }
}

// parbench replay through the binary: ddp on 3 workers writes the losses regular writes.
int parbench(const std::string& args) {
  const std::string cmd = pb::test::parbench_binary() + " " + args + " >/dev/null 2>&1";
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

TEST(Strategies, ReplayThroughTheBinary) {
  const fs::path dir = fs::path(::testing::TempDir()) / fmt::format("pb_strategies_{}", ::getpid());
  const std::string common = "replay --workload linear --batch 7 --steps 4 --threads 1 --device-kind cpu";
  ASSERT_EQ(parbench(fmt::format("{} --strategy regular --out {}", common, (dir / "regular").string())), 0);
  ASSERT_EQ(parbench(fmt::format("{} --strategy ddp --devices 3 --out {}", common, (dir / "ddp").string())), 0);
  const auto reg = nlohmann::json::parse(read_file((dir / "regular" / "losses.json").string()));
  const auto ddp = nlohmann::json::parse(read_file((dir / "ddp" / "losses.json").string()));
  ASSERT_EQ(ddp["losses"].size(), 4u);
  for (std::size_t k = 0; k < 4; ++k) {
    const double want = reg["losses"][k].get<double>();
    EXPECT_NEAR(ddp["losses"][k].get<double>(), want, 1e-5 * std::abs(want)) << "step " << k + 1;
  }
  EXPECT_EQ(ddp["worker_samples"], nlohmann::json::array({3, 3, 1}));
  EXPECT_EQ(parbench(fmt::format("{} --strategy nope --out {}", common, (dir / "x").string())), 2);
  EXPECT_EQ(parbench(fmt::format("{} --strategy mp --devices 2 --out {}", common, (dir / "x").string())), 2);
  EXPECT_EQ(parbench(fmt::format("{} --strategy pipeline --micro-batches 8 --out {}", common, (dir / "x").string())), 2);
  // --schedule and --recompute name the pipeline variant; the 1F1B-with-recompute stages of
  // great_net write regular's losses.
  const std::string net = "replay --workload great_net --image 8 --width 0.1875 --batch 7 --steps 3 --threads 1 --device-kind cpu";
  ASSERT_EQ(parbench(fmt::format("{} --strategy regular --out {}", net, (dir / "gn").string())), 0);
  ASSERT_EQ(parbench(fmt::format("{} --strategy pipeline --devices 3 --micro-batches 4 --schedule 1f1b --recompute --out {}",
                                 net, (dir / "gn1f1b").string())), 0);
  const auto gn = nlohmann::json::parse(read_file((dir / "gn" / "losses.json").string()));
  const auto f1b = nlohmann::json::parse(read_file((dir / "gn1f1b" / "losses.json").string()));
  EXPECT_EQ(f1b["strategy"], "pipeline-1f1b-recompute");
  ASSERT_EQ(f1b["losses"].size(), 3u);
  for (std::size_t k = 0; k < 3; ++k) {
    const double want = gn["losses"][k].get<double>();
    EXPECT_NEAR(f1b["losses"][k].get<double>(), want, 1e-5 * std::abs(want)) << "step " << k + 1;
  }
  EXPECT_EQ(parbench(fmt::format("{} --strategy pipeline --schedule zigzag --out {}", common, (dir / "x").string())), 2);
  EXPECT_EQ(parbench(fmt::format("{} --strategy ddp --devices 2 --recompute --out {}", common, (dir / "x").string())), 2);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace pb
