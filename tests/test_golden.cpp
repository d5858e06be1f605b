// The engine against PyTorch: golden trajectories made by scripts/make_fixtures.py (initial
// parameters, input, per-step losses, final parameters after 5 Adam steps).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <nlohmann/json.hpp>

#include "tests/gpu_skip.h"
#include "tests/paths.h"
#include "tests/support.h"
#include "engine/check.h"
#include "engine/fsutil.h"
#include "engine/npy.h"
#include "engine/state_dict.h"
#include "strategies/batch.h"
#include "strategies/strategy.h"
#include "workloads/workload.h"

namespace pb {
namespace {

namespace fs = std::filesystem;
using test::ScopedEnv;

std::vector<std::string> fixture_names() {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(pb::test::source_dir() / "tests/fixtures"))
    if (fs::exists(e.path() / "net.json")) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

class Golden : public ::testing::TestWithParam<std::string> {
 protected:
  fs::path dir() const { return pb::test::source_dir() / "tests/fixtures" / GetParam(); }
};

// Tolerances: the 1e-5 (relative on losses, absolute on parameters). Measured here:
// about 2e-7 and 5e-8, the size of fp32 rounding differences in summation order.
void expect_pytorch_trajectory(const fs::path& dir, const std::string& strategy, const StrategyOptions& o) {
  SCOPED_TRACE(fmt::format("{} on {} device(s){}", strategy, o.devices,
                           o.balance.empty() ? std::string() : fmt::format(", --balance {}", fmt::join(o.balance, ","))));
  const NetSpec net = load_net_json((dir / "net.json").string());
  const NetPlan plan = plan_net(net);
  const auto expected = nlohmann::json::parse(read_file((dir / "expected.json").string()));
  const NpyArray x = read_npy((dir / "input.npy").string());
  const int64_t batch = x.shape[0];
  std::vector<float> t = x.data;
  if (net.target == Target::Random) {
    Shape ts = plan.output;
    ts.insert(ts.begin(), batch);
    t = read_npy((dir / "target.npy").string(), ts).data;
  }
  auto s = make_strategy(strategy, o);
  s->setup(plan, read_state_dict(plan, (dir / "params").string()), net.adam);
  s->load_batch(x.data, t, batch);
  const auto want = expected["losses"].get<std::vector<double>>();
  ASSERT_EQ(expected["steps"].get<int>(), static_cast<int>(want.size()));
  for (std::size_t k = 0; k < want.size(); ++k) {
    s->step();
    EXPECT_NEAR(s->loss(), want[k], 1e-5 * std::abs(want[k])) << "step " << k + 1;
  }
  const std::vector<float> got = s->params();
  const std::vector<float> final = read_state_dict(plan, (dir / "final").string());
  double worst = 0;
  std::size_t at = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (std::abs(got[i] - final[i]) > worst) worst = std::abs(got[i] - final[i]), at = i;
  EXPECT_LE(worst, 1e-5) << "worst parameter " << at << ": got " << got[at] << ", PyTorch " << final[at];
  // The parameters did move: the comparison is not of untouched initial values.
  const std::vector<float> init = read_state_dict(plan, (dir / "params").string());
  double moved = 0;
  for (std::size_t i = 0; i < final.size(); ++i) moved = std::max(moved, double(std::abs(final[i] - init[i])));
  EXPECT_GT(moved, 1e-4);
}

void expect_pytorch_trajectory(const fs::path& dir, const std::string& strategy, int devices) {
  StrategyOptions o;
  o.devices = devices;
  o.backend.threads = devices > 1 ? 1 : 0;
  expect_pytorch_trajectory(dir, strategy, o);
}

// Every pipeline schedule, with and without recompute, on 2-4 stages (uneven micro-batches where
// the batch allows) follows PyTorch's single-device trajectory within the same tolerances.
TEST_P(Golden, PipelineSchedulesReproducePyTorchTrajectory) {
  const NetSpec net = load_net_json((dir() / "net.json").string());
  const NetPlan plan = plan_net(net);
  const int layers = static_cast<int>(plan.layers.size());
  if (layers < 2) GTEST_SKIP() << "one layer: no two stages";
  const auto expected = nlohmann::json::parse(read_file((dir() / "expected.json").string()));
  const NpyArray x = read_npy((dir() / "input.npy").string());
  const int64_t batch = x.shape[0];
  std::vector<float> t = x.data;
  if (net.target == Target::Random) {
    Shape ts = plan.output;
    ts.insert(ts.begin(), batch);
    t = read_npy((dir() / "target.npy").string(), ts).data;
  }
  const auto want = expected["losses"].get<std::vector<double>>();
  const std::vector<float> final = read_state_dict(plan, (dir() / "final").string());
  auto follows = [&](const std::string& name, int n, int micro) {
    SCOPED_TRACE(fmt::format("{} on {} workers, {} micro-batches", name, n, micro));
    StrategyOptions o;
    o.devices = n;
    o.backend.threads = 1;
    o.micro_batches = micro;
    auto s = make_strategy(name, o);
    s->setup(plan, read_state_dict(plan, (dir() / "params").string()), net.adam);
    s->load_batch(x.data, t, batch);
    for (std::size_t k = 0; k < want.size(); ++k) {
      s->step();
      EXPECT_NEAR(s->loss(), want[k], 1e-5 * std::abs(want[k])) << "step " << k + 1;
    }
    const std::vector<float> got = s->params();
    double worst = 0;
    for (std::size_t i = 0; i < got.size(); ++i) worst = std::max(worst, double(std::abs(got[i] - final[i])));
    EXPECT_LE(worst, 1e-5);
  };
  for (const char* name : {"pipeline", "pipeline-1f1b", "pipeline-zb", "pipeline-recompute", "pipeline-1f1b-recompute"})
    for (int n = 2; n <= std::min(4, layers); ++n) follows(name, n, static_cast<int>(std::min<int64_t>(3, batch)));
  // Interleaved 1F1B: two chunks a worker (2P stages), M a multiple of P.
  for (int n = 2; 2 * n <= layers && n <= batch && n <= 4; ++n) follows("pipeline-interleaved", n, n);
  // Zero-bubble V: two chunks a worker in a V (one worker: both stages, handed over in place),
  // fewer micro-batches than its warm-up fills and as many as the batch.
  for (int n = 1; 2 * n <= layers && n <= 4; ++n)
    for (int64_t m : {std::min<int64_t>(2, batch), batch}) follows("pipeline-zbv", n, static_cast<int>(m));
}

// dp x pp and dp x tp hybrids: replicas of the pipeline (tp group) on their pieces of the batch,
// each stage's (slice's) gradients all-reduced, follow PyTorch's single-device trajectory too.
TEST_P(Golden, HybridsReproducePyTorchTrajectory) {
  const NetPlan plan = plan_net(load_net_json((dir() / "net.json").string()));
  const int layers = static_cast<int>(plan.layers.size());
  const int64_t batch = read_npy((dir() / "input.npy").string()).shape[0];
  int64_t widest = 0;
  for (const LayerPlan& l : plan.layers)
    if (l.weight_numel > 0) widest = std::max(widest, l.out[0]);
  std::vector<std::string> names;
  for (const auto& [dp, side] : {std::pair{2, 1}, {1, 2}, {2, 2}}) {
    if (static_cast<int>(chunk_sizes(batch, dp).size()) < dp) continue;
    if (side <= layers)
      for (Schedule schedule : {Schedule::GPipe, Schedule::OneFOneB}) names.push_back(hybrid_name(dp, side, schedule, false));
    if (side <= widest) names.push_back(dptp_name(dp, side));
  }
  EXPECT_FALSE(names.empty()) << "no factorization fits this fixture";
  for (const std::string& name : names) {
    StrategyOptions o;
    o.devices = parse_strategy(name).value().devices();
    o.backend.threads = 1;
    o.micro_batches = 2;
    o.cap_micro_batches = true;
    expect_pytorch_trajectory(dir(), name, o);
  }
}

// With each conv's ReLU fused into it (the default) and without.
TEST_P(Golden, EngineReproducesPyTorchTrajectory) {
  for (const char* fuse : {"1", "0"}) {
    SCOPED_TRACE(fmt::format("PARBENCH_CPU_FUSE_RELU={}", fuse));
    ScopedEnv env("PARBENCH_CPU_FUSE_RELU", fuse);
    expect_pytorch_trajectory(dir(), "regular", 1);
  }
}

// Sharded parameters, gradients and Adam state: the same trajectory on every split of the batch.
TEST_P(Golden, FsdpReproducesPyTorchTrajectory) {
  for (int n = 2; n <= 4; ++n) {
    expect_pytorch_trajectory(dir(), "fsdp", n);
    expect_pytorch_trajectory(dir(), "zero2", n);
  }
}

// The prefetching variants and every hsdp<R>x<S> factorization: the same trajectory.
TEST_P(Golden, FsdpPrefetchAndHsdpReproducePyTorchTrajectory) {
  for (int n = 2; n <= 4; ++n) {
    expect_pytorch_trajectory(dir(), "fsdp-prefetch", n);
    expect_pytorch_trajectory(dir(), "zero2-prefetch", n);
    for (int r = 1; r <= n; ++r)
      if (n % r == 0) expect_pytorch_trajectory(dir(), hsdp_name(r, n / r), n);
  }
}

// Channel slices of every layer (pooling, upsampling: on the gathered outputs; transposed convs
// split too), the whole batch on each worker; nets whose layers all have fewer outputs than
// workers are refused (nothing to split).
TEST_P(Golden, TpReproducesPyTorchTrajectory) {
  const NetPlan plan = plan_net(load_net_json((dir() / "net.json").string()));
  int64_t widest = 0;
  for (const LayerPlan& l : plan.layers)
    if (l.weight_numel > 0) widest = std::max(widest, l.out[0]);
  for (int n = 2; n <= 4; ++n) {
    if (widest >= n) {
      expect_pytorch_trajectory(dir(), "tp", n);
      continue;
    }
    try {
      expect_pytorch_trajectory(dir(), "tp", n);
      ADD_FAILURE() << "tp over " << n << " workers ran with at most " << widest << " channels per layer";
    } catch (const UsageError& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr("no layer of the net has"));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Golden, ::testing::ValuesIn(fixture_names()),
                         [](const auto& info) { return info.param; });

TEST(GoldenFixtures, CoverTheRequiredCases) {
  const auto names = fixture_names();
  for (const char* n : {"conv_stride2", "conv_pad0", "conv_pad2", "conv_nonsquare", "conv_odd", "linear"})
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
}

// Nets with skips (tests/fixtures/graph/): the strategies whose workers run the whole net follow
// PyTorch's trajectory on every split of the batch -- fsdp's with skips crossing one unit and
// several -- and the rest refuse them (tests/test_graph_nets.cpp).
TEST(GraphFixtures, WholeNetStrategiesReproducePyTorchTrajectory) {
  int nets = 0;
  for (const auto& e : fs::directory_iterator(pb::test::source_dir() / "tests/fixtures/graph")) {
    SCOPED_TRACE(e.path().filename().string());
    ++nets;
    ASSERT_TRUE(plan_net(load_net_json((e.path() / "net.json").string())).has_skips());
    expect_pytorch_trajectory(e.path(), "regular", 1);
    const int64_t batch = read_npy((e.path() / "input.npy").string()).shape[0];
    for (int n = 2; n <= 4; ++n) {
      if (n <= batch)  // dp and ddp take a torch.chunk piece each
        for (const char* s : {"dp", "ddp"}) expect_pytorch_trajectory(e.path(), s, n);
      for (const char* s : {"fsdp", "zero2", "fsdp-prefetch", "zero2-prefetch"}) expect_pytorch_trajectory(e.path(), s, n);
    }
    expect_pytorch_trajectory(e.path(), "hsdp2x2", 4);
  }
  EXPECT_GE(nets, 2);
}

// Pipelines over nets with skips: a value crossing one stage or several is sent from the stage
// making it to every stage reading it, and its gradients back (summed where several read it).
// Every schedule, at 2-4 workers, then every 2-way cut under 1F1B and ZB-H1 and every 3-way cut
// under 1F1B.
TEST(GraphFixtures, PipelinesSendingSkipsReproducePyTorchTrajectory) {
  int nets = 0;
  for (const auto& e : fs::directory_iterator(pb::test::source_dir() / "tests/fixtures/graph")) {
    SCOPED_TRACE(e.path().filename().string());
    ++nets;
    const NetPlan plan = plan_net(load_net_json((e.path() / "net.json").string()));
    const int layers = static_cast<int>(plan.layers.size());
    const int64_t batch = read_npy((e.path() / "input.npy").string()).shape[0];
    StrategyOptions o;
    o.backend.threads = 1;
    o.micro_batches = static_cast<int>(std::min<int64_t>(3, batch));
    for (int n = 2; n <= 4; ++n) {
      o.devices = n;
      expect_pytorch_trajectory(e.path(), "mp", o);
      for (const char* s : {"pipeline", "pipeline-1f1b", "pipeline-zb", "pipeline-recompute", "pipeline-1f1b-recompute"})
        expect_pytorch_trajectory(e.path(), s, o);
    }
    // Chunked schedules: a value from a stage on the same worker read in place, its gradient
    // handed back in place; from another worker on a channel of its flow. Interleaved 1F1B with two
    // and three chunks a worker (M a multiple of P), ZB-V with fewer micro-batches than its warm-up
    // fills and as many as the batch.
    for (int n = 2; n <= 4; ++n) {
      o.devices = n;
      for (int v : {2, 3}) {
        o.virtual_stages = v, o.micro_batches = n;
        if (v * n <= layers && n <= batch) expect_pytorch_trajectory(e.path(), "pipeline-interleaved", o);
      }
      o.virtual_stages = 2;
      for (int64_t m : {std::min<int64_t>(2, batch), batch}) {
        o.micro_batches = static_cast<int>(m);
        if (2 * n <= layers) expect_pytorch_trajectory(e.path(), "pipeline-zbv", o);
      }
    }
    o.devices = 4, o.micro_batches = 1;  // a piece of the batch each replica
    for (const char* s : {"dp2xpp2", "dp2xpp2-1f1b-recompute"}) expect_pytorch_trajectory(e.path(), s, o);
    o.micro_batches = static_cast<int>(std::min<int64_t>(2, batch));
    for (int a = 1; a < layers; ++a) {
      o.devices = 2, o.balance = {a, layers - a};
      expect_pytorch_trajectory(e.path(), "pipeline-1f1b", o);
      expect_pytorch_trajectory(e.path(), "pipeline-zb", o);
      for (int c = 1; a + c < layers; ++c) {
        o.devices = 3, o.balance = {a, c, layers - a - c};
        expect_pytorch_trajectory(e.path(), "pipeline-1f1b", o);
      }
    }
  }
  EXPECT_GE(nets, 2);
}

// tp over nets with skips: convs (transposed too) split by output channels, adds, concats, pooling
// and upsampling on the gathered outputs, each output's gradient summed over its readers; dp x tp
// on pieces of the batch.
TEST(GraphFixtures, TpSplittingSkipNetsReproducesPyTorchTrajectory) {
  int nets = 0;
  for (const auto& e : fs::directory_iterator(pb::test::source_dir() / "tests/fixtures/graph")) {
    SCOPED_TRACE(e.path().filename().string());
    ++nets;
    for (int n = 2; n <= 4; ++n) expect_pytorch_trajectory(e.path(), "tp", n);
    if (read_npy((e.path() / "input.npy").string()).shape[0] >= 2) {
      expect_pytorch_trajectory(e.path(), "dp2xtp2", 4);
      expect_pytorch_trajectory(e.path(), "dp2xtp1", 2);
    }
  }
  EXPECT_GE(nets, 2);
}

int run(const std::string& args) {
  const std::string cmd = pb::test::parbench_binary() + " " + args + " >/dev/null 2>&1";
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

// The replay command end to end on DEVICE_KIND: files in, files out, compared with PyTorch's
// (within TOL: the GPU sums in another order).
void expect_replay_reproduces_fixture(const std::string& device_kind, double tol, const std::string& layout = "nchw") {
  const fs::path d = pb::test::source_dir() / "tests/fixtures/conv_nonsquare";
  const fs::path out = fs::path(::testing::TempDir()) / ("replay_nonsquare_" + device_kind + "_" + layout);
  fs::remove_all(out);
  ASSERT_EQ(run(fmt::format("replay --workload {0}/net.json --params {0}/params --input {0}/input.npy "
                            "--target {0}/target.npy --steps 5 --device-kind {2} --layout {3} --out {1}",
                            d.string(), out.string(), device_kind, layout)),
            0);
  const auto got = nlohmann::json::parse(read_file((out / "losses.json").string()));
  const auto want = nlohmann::json::parse(read_file((d / "expected.json").string()));
  ASSERT_EQ(got["losses"].size(), want["losses"].size());
  for (std::size_t k = 0; k < want["losses"].size(); ++k)
    EXPECT_NEAR(got["losses"][k].get<double>(), want["losses"][k].get<double>(),
                tol * std::abs(want["losses"][k].get<double>()));
  for (const auto& e : fs::directory_iterator(d / "final")) {
    const NpyArray a = read_npy(e.path().string());
    const NpyArray b = read_npy((out / "params" / e.path().filename()).string(), a.shape);
    for (std::size_t i = 0; i < a.data.size(); ++i) EXPECT_NEAR(a.data[i], b.data[i], tol) << e.path().filename();
  }
}

TEST(Replay, CommandReproducesFixtureFiles) { expect_replay_reproduces_fixture("cpu", 1e-5); }

// fp32 on the GPU (no TF32): cuDNN's algorithms reorder the sums, a few float roundings.
TEST(Replay, CommandReproducesFixtureFilesGpu) {
  PB_REQUIRE_GPU();
  expect_replay_reproduces_fixture("cuda", 1e-4);
}

// --layout nhwc: conv, ReLU, conv, ReLU, conv keeps both activations between them NHWC, so the
// three convolutions take NCHW -> NHWC, NHWC -> NHWC and NHWC -> NCHW; the same PyTorch fixture.
TEST(Replay, CommandReproducesFixtureFilesNhwcGpu) {
  PB_REQUIRE_GPU();
  expect_replay_reproduces_fixture("cuda", 1e-4, "nhwc");
}

TEST(Replay, BadInputExitsTwoAndWritesNothing) {
  const fs::path d = pb::test::source_dir() / "tests/fixtures/conv_pad0";
  const fs::path out = fs::path(::testing::TempDir()) / "replay_bad";
  fs::remove_all(out);
  // the input of another net: wrong shape
  EXPECT_EQ(run(fmt::format("replay --workload {0}/net.json --input {1}/input.npy --device-kind cpu --out {2}",
                            d.string(), (d.parent_path() / "linear").string(), out.string())),
            2);
  EXPECT_EQ(run(fmt::format("replay --workload {0}/net.json --params {1}/params --device-kind cpu --out {2}",
                            d.string(), (d.parent_path() / "conv_pad2").string(), out.string())),
            2);
  EXPECT_EQ(run(fmt::format("replay --workload {}/net.json", d.string())), 2);  // no --out
  EXPECT_EQ(run(fmt::format("replay --workload {}/net.json --steps x --out {}", d.string(), out.string())), 2);
  EXPECT_EQ(run(fmt::format("replay --workload {}/net.json --bogus 1 --out {}", d.string(), out.string())), 2);
  EXPECT_EQ(run(fmt::format("replay --workload nope --out {}", out.string())), 2);
  EXPECT_FALSE(fs::exists(out / "losses.json"));
  EXPECT_EQ(run("replay --help"), 0);
}

}  // namespace
}  // namespace pb
