// parbench profile: the per-layer observer hook, the profiler's structure and consistency with a
// whole forward/backward on CPU, first calls and per-call workspace on one backend, the device
// fill of its data, profile.json's fields (read back by the projection), and bad flags.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "engine/check.h"
#include "engine/cpu_backend.h"
#include "engine/fsutil.h"
#include "engine/layer_profile.h"
#include "engine/model.h"
#include "engine/model_detail.h"
#include "engine/random_fill.h"
#include "projection/profile.h"
#include "tests/cli_fixture.h"
#include "workloads/workload.h"

namespace pb {
namespace {

using ::testing::HasSubstr;

struct Recorder final : LayerObserver {
  std::vector<std::pair<int, LayerPass>> calls;
  int open = -1;
  void before(int layer, LayerPass pass) override {
    EXPECT_EQ(open, -1) << "calls nest";
    open = layer;
    calls.emplace_back(layer, pass);
  }
  void after(int layer, LayerPass) override {
    EXPECT_EQ(open, layer);
    open = -1;
  }
};

TEST(LayerObserver, SeesEveryCallOfEveryLayerInOrder) {
  const NetPlan plan = plan_net(great_net(8, 0.125));  // 28 layers
  BackendOptions o;
  o.cpu_fuse_relu = false;  // every ReLU its own call (fused, it is part of its conv's)
  CpuBackend be(cpu(), o);
  Sequential s(plan, 0, 28, be);
  s.load_params(init_params(plan, 1));
  const std::vector<float> x = synthetic_values(2 * numel_of(plan.input), 2);
  Tensor xt = Tensor::from_host({2 * numel_of(plan.input)}, x, cpu());
  Tensor dy = Tensor::from_host({2 * numel_of(plan.output)}, synthetic_values(2 * numel_of(plan.output), 3), cpu());
  Recorder r;
  s.set_observer(&r);
  s.forward(xt.data(), 2);
  ASSERT_EQ(r.calls.size(), 28u);
  for (int i = 0; i < 28; ++i) {
    EXPECT_EQ(r.calls[i], std::make_pair(i, LayerPass::Forward));
  }
  r.calls.clear();
  s.backward(dy.data(), nullptr, false);
  // Last layer first; a conv's weights before its data gradient; none for the first layer's input.
  std::vector<std::pair<int, LayerPass>> want;
  for (int i = 27; i >= 0; --i) {
    if (plan.layers[i].spec.type == LayerType::Conv2d) want.emplace_back(i, LayerPass::BackwardWeights);
    if (i > 0) want.emplace_back(i, LayerPass::BackwardData);
  }
  EXPECT_EQ(r.calls, want);
  s.set_observer(nullptr);
  r.calls.clear();
  s.forward(xt.data(), 2);
  EXPECT_TRUE(r.calls.empty()) << "detached";
}

TEST(Profile, LayerTimesAddUpToTheWholePasses) {
  const NetPlan plan = plan_net(great_net(32, 0.25));
  CpuBackend be(cpu(), {});
  NetProfile p = profile_net(plan, be, {2, 1, 5, 0});
  ASSERT_EQ(p.layers.size(), plan.layers.size());
  EXPECT_EQ(p.batch, 2);
  double fwd = 0, bwd = 0;
  for (std::size_t i = 0; i < plan.layers.size(); ++i) {
    const LayerTimes& t = p.layers[i];
    SCOPED_TRACE(fmt::format("layer {}", i));
    // A ReLU after a conv may run fused into it (its own forward then takes no time).
    const bool fusable = plan.layers[i].spec.type == LayerType::ReLU && i > 0 &&
                         plan.layers[i - 1].spec.type == LayerType::Conv2d;
    if (fusable) {
      EXPECT_GE(t.forward_s, 0);
    } else {
      EXPECT_GT(t.forward_s, 0);
    }
    if (plan.layers[i].spec.type == LayerType::Conv2d) {
      EXPECT_GT(t.backward_weights_s, 0);
    } else {
      EXPECT_EQ(t.backward_weights_s, 0) << "no parameters";
    }
    if (i == 0) {
      EXPECT_EQ(t.backward_data_s, 0) << "the input needs no gradient";
    } else {
      EXPECT_GT(t.backward_data_s, 0);
    }
    fwd += t.forward_s;
    bwd += t.backward_data_s + t.backward_weights_s;
  }
  EXPECT_GT(p.loss_s, 0);
  EXPECT_GT(p.optimizer_s, 0);
  // Separate repetitions: a generous bound, enough to catch a pass timed twice or not at all. On
  // a machine shared with other work one profile can still land outside it, so a few are allowed.
  std::string seen;
  bool within = false;
  for (int attempt = 0; attempt < 4 && !within; ++attempt) {
    if (attempt > 0) {
      p = profile_net(plan, be, {2, 1, 5, 0});
      fwd = bwd = 0;
      for (const LayerTimes& t : p.layers) fwd += t.forward_s, bwd += t.backward_data_s + t.backward_weights_s;
    }
    const double rf = fwd / p.forward_s, rb = bwd / p.backward_s;
    seen += fmt::format(" forward {:.2f}, backward {:.2f};", rf, rb);
    within = rf > 0.6 && rf < 1.5 && rb > 0.6 && rb < 1.5;
  }
  EXPECT_TRUE(within) << "sum of layers / whole pass:" << seen;
}

// Workers timed side by side: the mean of each time, at the pace of the slowest worker's total.
TEST(Profile, SideBySideWorkersGoAtTheSlowestPace) {
  NetProfile a, b;
  a.layers = {{1e-3, 2e-3, 3e-3}, {4e-3, 0, 1e-3}};
  a.loss_s = 1e-4, a.optimizer_s = 9e-4;  // total 12 ms
  b.layers = {{2e-3, 3e-3, 4e-3}, {5e-3, 0, 1e-3}};
  b.loss_s = 1e-4, b.optimizer_s = 2.9e-3;  // total 18 ms
  double s = 0;
  const NetProfile one = at_slowest_pace({a, b}, &s);
  EXPECT_NEAR(s, 18.0 / 15.0, 1e-12);
  EXPECT_NEAR(one.layers[0].forward_s, 1.5e-3 * s, 1e-15);
  EXPECT_NEAR(one.layers[0].backward_data_s, 2.5e-3 * s, 1e-15);
  EXPECT_NEAR(one.layers[1].backward_weights_s, 1e-3 * s, 1e-15);
  EXPECT_NEAR(one.optimizer_s, 1.9e-3 * s, 1e-15);
  // The whole the step waits for: the slowest worker's.
  double total = one.loss_s + one.optimizer_s;
  for (const LayerTimes& l : one.layers) total += l.total_s();
  EXPECT_NEAR(total, 18e-3, 1e-12);
  // One worker, or workers at one speed: their mean, unscaled.
  EXPECT_NEAR(at_slowest_pace({a}).layers[1].forward_s, 4e-3, 1e-15);
  EXPECT_NEAR(at_slowest_pace({a, a}, &s).layers[0].backward_weights_s, 3e-3, 1e-15);
  EXPECT_DOUBLE_EQ(s, 1.0);
}

// Each call's workspace, measured on the profiling backend itself: with the im2col path its
// buffers are known exactly (forward: the columns of one image; backward-data: the transposed
// weights and the columns; backward-weights: the columns and their transpose), for every conv
// layer, later ones needing less than earlier ones included (a growth-only count would give
// them 0). Other layers need none.
TEST(Profile, EachCallsWorkspaceOnTheProfilingBackend) {
  const NetPlan plan = plan_net(great_net(16, 0.25));
  BackendOptions o;
  o.cpu_reference_conv = true;
  CpuBackend be(cpu(), o);
  const NetProfile p = profile_net(plan, be, {2, 1, 1, 0});
  ASSERT_EQ(p.workspace_bytes.size(), plan.layers.size());
  int smaller_than_earlier = 0;
  std::size_t most = 0;
  for (std::size_t i = 0; i < plan.layers.size(); ++i) {
    const LayerPlan& l = plan.layers[i];
    const PerPass<std::size_t>& w = p.workspace_bytes[i];
    SCOPED_TRACE(fmt::format("layer {} ({})", i, layer_type_name(l.spec.type)));
    if (l.spec.type != LayerType::Conv2d) {
      EXPECT_EQ(w, (PerPass<std::size_t>{0, 0, 0}));
      continue;
    }
    const ConvGeom g = model_detail::geom(l, 2);
    const std::size_t crs = static_cast<std::size_t>(g.c * g.r * g.s), pq = static_cast<std::size_t>(g.p() * g.q());
    EXPECT_EQ(w[0], 4 * crs * pq);
    EXPECT_EQ(w[1], i == 0 ? 0 : 4 * (crs * static_cast<std::size_t>(g.k) + crs * pq));
    EXPECT_EQ(w[2], 4 * 2 * crs * pq);
    if (w[2] < most) ++smaller_than_earlier;
    most = std::max(most, w[2]);
  }
  EXPECT_GT(smaller_than_earlier, 0) << "the net has a conv needing less than an earlier one";
  // The layer's figure (profile.json's workspace_bytes) is its largest call's.
  const std::vector<std::size_t> per_layer = layer_workspace_bytes(p);
  for (std::size_t i = 0; i < per_layer.size(); ++i)
    EXPECT_EQ(per_layer[i], *std::max_element(p.workspace_bytes[i].begin(), p.workspace_bytes[i].end()));
}

// The first step's calls are reported apart, for every layer and pass: present where the layer
// makes that call, 0 where it makes none; the default backend names each conv pass's algorithm.
TEST(Profile, FirstCallsApartForEveryLayerAndPass) {
  const NetPlan plan = plan_net(great_net(16, 0.25));
  CpuBackend be(cpu(), {});
  const NetProfile p = profile_net(plan, be, {2, 2, 3, 0});
  ASSERT_EQ(p.first_call.size(), plan.layers.size());
  ASSERT_EQ(p.algorithms.size(), plan.layers.size());
  ASSERT_EQ(p.layers.size(), plan.layers.size());
  EXPECT_GE(p.setup_s, 0);
  EXPECT_GT(p.first_step_s, 0);
  for (std::size_t i = 0; i < plan.layers.size(); ++i) {
    const LayerPlan& l = plan.layers[i];
    const LayerTimes& f = p.first_call[i];
    SCOPED_TRACE(fmt::format("layer {} ({})", i, layer_type_name(l.spec.type)));
    EXPECT_GE(f.forward_s, 0);
    if (l.spec.type == LayerType::Conv2d) {
      EXPECT_GT(f.forward_s, 0);
      EXPECT_GT(f.backward_weights_s, 0);
      for (const std::string& a : p.algorithms[i]) EXPECT_FALSE(a.empty());
    } else {
      EXPECT_EQ(f.backward_weights_s, 0) << "no parameters";
      for (const std::string& a : p.algorithms[i]) EXPECT_TRUE(a.empty()) << a;
    }
    if (i == 0) {
      EXPECT_EQ(f.backward_data_s, 0) << "the input needs no gradient";
    } else if (l.spec.type != LayerType::Flatten) {
      EXPECT_GT(f.backward_data_s, 0);
    }
  }
}

// Backend::fill_normal: the hash's values at (seed, offset + i), so a slice is the whole's slice
// and any thread count gives the same bits; sd `scale`, mean 0, within Irwin-Hall's bounds.
TEST(Profile, DeviceFillIsReproducibleAndNormalish) {
  const int64_t n = 1 << 20;
  BackendOptions one, two;
  one.threads = 1, two.threads = 2;
  CpuBackend a(cpu(), one), b(cpu(), two);
  std::vector<float> x(n), y(n), z(1000);
  a.fill_normal(x.data(), n, 7, 0, 2.0f);
  b.fill_normal(y.data(), n, 7, 0, 2.0f);
  EXPECT_EQ(x, y) << "threads change nothing";
  b.fill_normal(z.data(), 1000, 7, 5000, 2.0f);
  EXPECT_TRUE(std::equal(z.begin(), z.end(), x.begin() + 5000)) << "offset continues the stream";
  b.fill_normal(y.data(), n, 8, 0, 2.0f);
  EXPECT_NE(x, y) << "another seed, other values";
  double sum = 0, sq = 0, most = 0;
  for (float v : x) sum += v, sq += double(v) * v, most = std::max(most, std::abs(double(v)));
  const double mean = sum / n, sd = std::sqrt(sq / n - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.01);
  EXPECT_NEAR(sd, 2.0, 0.01);
  EXPECT_LE(most, 2.0 * std::sqrt(12.0) + 1e-4) << "four uniforms sum within +-sqrt(12) sd";
  EXPECT_GT(most, 2.0 * 3.0) << "the tails are reached";
}

class ProfileCli : public test::CliTest {
 protected:
  ProfileCli() : CliTest("parbench_profile_") {}
};

TEST_F(ProfileCli, WritesEveryFieldOfProfileJson) {
  const test::Result r = parbench("profile --device-kind cpu --image 16 --width 0.125 --batch 4,1 --warmup 1 "
                                  "--reps 2 --threads 1 --out " + path("p/profile.json"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("bwd-data"));
  const nlohmann::json j = nlohmann::json::parse(test::slurp(path("p/profile.json")));
  EXPECT_EQ(j.at("parbench_profile"), 1);
  EXPECT_EQ(j.at("batches"), nlohmann::json({1, 4})) << "ascending";
  const nlohmann::json& c = j.at("context");
  for (const char* k : {"workload", "workload_params", "device", "device_kind", "cpu_model", "cpu_threads",
                        "threads_per_worker", "date", "parbench_version", "precision", "param_count"})
    EXPECT_TRUE(c.contains(k)) << k;
  EXPECT_EQ(c.at("workload"), "great_net");
  const NetPlan plan = plan_net(great_net(16, 0.125));
  const nlohmann::json& layers = j.at("layers");
  ASSERT_EQ(layers.size(), plan.layers.size());
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const nlohmann::json& l = layers[i];
    const LayerPlan& p = plan.layers[i];
    SCOPED_TRACE(l.dump());
    EXPECT_EQ(l.at("index"), i);
    EXPECT_EQ(l.at("type"), layer_type_name(p.spec.type));
    EXPECT_EQ(l.at("in").get<Shape>(), p.in);
    EXPECT_EQ(l.at("out").get<Shape>(), p.out);
    EXPECT_EQ(l.at("params"), p.weight_numel + p.bias_numel);
    EXPECT_DOUBLE_EQ(l.at("forward_flops").get<double>(), p.forward_flops);
    EXPECT_EQ(l.at("activation_bytes_per_sample"), 4 * numel_of(p.out));
    for (const char* k : {"forward_s", "backward_data_s", "backward_weights_s"}) {
      ASSERT_EQ(l.at(k).size(), 2u) << k;
      for (double v : l.at(k)) {
        EXPECT_GE(v, 0) << k;
      }
    }
    if (p.spec.type != LayerType::ReLU) {  // a ReLU may be fused into its conv
      EXPECT_GT(l.at("forward_s")[1].get<double>(), 0);
    }
    if (i == 0) {
      EXPECT_EQ(l.at("backward_data_s"), nlohmann::json({0.0, 0.0}));
    }
    if (p.spec.type != LayerType::Conv2d) {
      EXPECT_EQ(l.at("backward_weights_s"), nlohmann::json({0.0, 0.0}));
    }
    if (p.spec.type == LayerType::Conv2d) {
      EXPECT_GT(l.at("workspace_bytes").get<double>(), 0);
    }
    // Per pass: steady and first-call times, workspace, algorithm, FLOPs; one entry per batch.
    const nlohmann::json& passes = l.at("passes");
    EXPECT_EQ(passes.size(), 3u);
    std::size_t most_ws = 0;
    for (const char* pass : {"forward", "backward_data", "backward_weights"}) {
      SCOPED_TRACE(pass);
      const nlohmann::json& q = passes.at(pass);
      for (const char* k : {"s", "first_call_s", "workspace_bytes", "algorithm", "flops_per_sample"})
        EXPECT_TRUE(q.contains(k)) << k;
      for (const char* k : {"s", "first_call_s", "workspace_bytes", "algorithm"}) ASSERT_EQ(q.at(k).size(), 2u) << k;
      const std::string flat = std::string(pass) + "_s";
      EXPECT_EQ(q.at("s"), l.at(flat)) << "the same medians as the flat field";
      for (double v : q.at("first_call_s")) EXPECT_GE(v, 0);
      for (std::size_t b = 0; b < 2; ++b) {
        most_ws = std::max(most_ws, q.at("workspace_bytes")[b].get<std::size_t>());
        EXPECT_EQ(q.at("algorithm")[b].get<std::string>().empty(), p.spec.type != LayerType::Conv2d);
      }
      const bool called = std::string(pass) == "forward" || (std::string(pass) == "backward_data" ? i > 0 : p.weight_numel > 0);
      EXPECT_DOUBLE_EQ(q.at("flops_per_sample").get<double>(), called ? p.forward_flops : 0.0);
      if (!called) {
        EXPECT_EQ(q.at("first_call_s"), nlohmann::json({0.0, 0.0}));
      }
    }
    EXPECT_EQ(l.at("workspace_bytes").get<std::size_t>(), most_ws) << "the layer's figure: its largest call's";
  }
  // The projection reads the new file (and keeps reading files without "passes").
  EXPECT_NO_THROW(projection::load_profile(path("p/profile.json")));
  nlohmann::json old = j;
  for (nlohmann::json& l : old.at("layers")) l.erase("passes");
  write_file_atomic(path("old.json"), old.dump());
  EXPECT_NO_THROW(projection::load_profile(path("old.json")));
  old = j;
  old.at("layers")[0].at("passes").at("forward").erase("first_call_s");
  write_file_atomic(path("bad.json"), old.dump());
  try {
    projection::load_profile(path("bad.json"));
    ADD_FAILURE() << "a pass without first_call_s was read";
  } catch (const UsageError& e) {
    EXPECT_THAT(e.what(), HasSubstr("layers[0].passes.forward.first_call_s"));
  }
  for (const char* k : {"loss_s", "forward_total_s", "backward_total_s"}) {
    EXPECT_EQ(j.at(k).size(), 2u) << k;
  }
  EXPECT_GT(j.at("optimizer_s_per_param").get<double>(), 0);
}

// --machine sets the peak and bandwidth every pass is held against: each pass's roofline_fraction
// is max(flops / peak, bytes / bandwidth) / s with its work from layer_work, null where the layer
// makes no such call, and the table marks a layer below 10% of its roofline.
TEST_F(ProfileCli, RooflineFractionsAgainstTheMachineFilesPeak) {
  const double peak = 1e15, copy = 5e14;  // bandwidth: a copy reads and writes, 2 x copy
  write_file_atomic(path("cpu.json"),
                    fmt::format(R"({{"parbench_machine": 1, "name": "test machine", "device": {{"kind": "cpu",
      "model": "cpu", "peak_flops": {}, "memory_bytes": 1e10, "copy_bytes_per_s": {}}}, "devices_per_node": 1,
      "nodes": 1, "overlap": false, "links": {{"intra_node": {{"send_recv": {{"direct": {{"alpha_s": 1e-6,
      "bus_bytes_per_s": 1e9}}}}}}}}}})", peak, copy));
  const test::Result r = parbench("profile --device-kind cpu --image 16 --width 0.125 --batch 2 --warmup 1 --reps 1 "
                                  "--threads 1 --machine " + path("cpu.json") + " --out " + path("profile.json"));
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(test::slurp(path("profile.json")));
  EXPECT_EQ(j.at("context").at("roofline_peak_flop_per_s"), "1e+15");
  EXPECT_EQ(j.at("context").at("roofline_bytes_per_s"), "1e+15");
  EXPECT_THAT(j.at("context").at("roofline_source").get<std::string>(), HasSubstr("machine file"));
  const NetPlan plan = plan_net(great_net(16, 0.125));
  int fractions = 0;
  for (std::size_t i = 0; i < plan.layers.size(); ++i) {
    const LayerPlan& l = plan.layers[i];
    const nlohmann::json& passes = j.at("layers")[i].at("passes");
    const LayerPass kinds[] = {LayerPass::Forward, LayerPass::BackwardData, LayerPass::BackwardWeights};
    const char* names[] = {"forward", "backward_data", "backward_weights"};
    for (int q = 0; q < 3; ++q) {
      SCOPED_TRACE(fmt::format("layer {} {}", i, names[q]));
      const nlohmann::json& p = passes.at(names[q]);
      const double s = p.at("s")[0].get<double>(), first = p.at("first_call_s")[0].get<double>();
      if (s == 0 && first == 0) {
        EXPECT_TRUE(p.at("roofline_fraction")[0].is_null());
        EXPECT_EQ(p.at("flops")[0].get<double>(), 0.0);
        continue;
      }
      const LayerWork w = layer_work(l, 2, kinds[q], 4, 4);
      EXPECT_DOUBLE_EQ(p.at("flops")[0].get<double>(), w.flops);
      EXPECT_DOUBLE_EQ(p.at("bytes")[0].get<double>(), w.bytes);
      if (s == 0) continue;  // a ReLU fused into its conv takes no time of its own
      ASSERT_FALSE(p.at("roofline_fraction")[0].is_null());
      EXPECT_NEAR(p.at("roofline_fraction")[0].get<double>(), std::max(w.flops / peak, w.bytes / (2 * copy)) / s,
                  1e-12);
      ++fractions;
    }
  }
  EXPECT_GT(fractions, 10);
  // A CPU at a peak of 1 PFLOP/s: every layer far below its roofline, so every row is marked.
  int marked = 0;
  for (std::size_t at = r.out.find("!\n"); at != std::string::npos; at = r.out.find("!\n", at + 1)) ++marked;
  EXPECT_GE(marked, static_cast<int>(plan.layers.size()) - 2) << r.out;  // Flatten, a fused ReLU: no time
  EXPECT_THAT(r.out, HasSubstr("roof %"));
}

TEST_F(ProfileCli, BadFlagsNameThemselvesAndWriteNothing) {
  const std::string common = "profile --device-kind cpu --image 8 --width 0.125 --reps 1 --out " + path("x.json");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {" --batch 0", "--batch 0: every batch size must be at least 1"},
      {" --batch 1,x", "--batch expects a comma-separated list of integers"},
      {" --reps 0", "--reps must be at least 1"},
      {" --warmup -1", "--warmup must be >= 0"},
      {" --device 3", "--device 3: expected 0"},
      {" --balance 1,2", "unknown flag --balance"},
  };
  for (const auto& [extra, message] : cases) {
    const test::Result r = parbench(common + extra);
    EXPECT_EQ(r.code, 2) << extra << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr(message)) << extra;
    EXPECT_FALSE(std::filesystem::exists(path("x.json"))) << extra;
  }
  const test::Result r = parbench("profile --device-kind cpu --image 8 --width 0.125 --out " + dir_.string());
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--out expects a file"));
}

}  // namespace
}  // namespace pb
