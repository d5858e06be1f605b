// What the projection's tests share (tests/test_projection_*.cpp): the fixture profile and
// machine, machines with free links or no group fits, a configuration, the UsageError check, and
// the fixture of the tests that run parbench project / calibrate.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>
#include <thread>

#include <nlohmann/json.hpp>

#include "engine/check.h"
#include "engine/cpu_steal.h"
#include "engine/fsutil.h"
#include "scenarios/scenarios.h"
#include "reports/stats.h"
#include "strategies/stages.h"
#include "strategies/strategy.h"
#include "tests/cli_fixture.h"
#include "workloads/workload.h"

namespace pb::projection_test {

namespace pj = projection;
using nlohmann::json;

inline std::string fixture(const std::string& name) { return (test::source_dir() / "tests/fixtures/projection" / name).string(); }

inline json fixture_json(const std::string& name) { return json::parse(read_file(fixture(name))); }

// The fixture machine as CPUs named "test cpu", written to `path`; returns it.
inline std::string write_cpu_machine(const std::string& path) {
  json m = fixture_json("machine.json");
  m["name"] = "test cpu";
  m["device"]["kind"] = "cpu";
  write_file_atomic(path, m.dump());
  return path;
}

inline pj::Profile uniform() { return pj::load_profile(fixture("uniform.json")); }
inline pj::Machine machine() { return pj::load_machine(fixture("machine.json"), unit_classes()); }

// A machine whose links cost nothing: only compute and schedule remain.
inline pj::Machine free_links() {
  pj::Machine m = machine();
  for (auto* level : {&m.intra_node, &m.inter_node})
    for (auto& [c, algs] : *level)
      for (auto& [a, ab] : algs) ab = {0, 1e30, {}, {}};
  return m;
}

inline pj::Machine machine_without_groups(pj::Machine m) {
  for (auto* level : {&m.intra_node, &m.inter_node})
    for (auto& [c, algs] : *level)
      for (auto& [a, ab] : algs) ab.in_groups.clear();
  return m;
}

inline pj::Config config(const std::string& s, int n, int64_t batch) {
  pj::Config c;
  c.strategy = s;
  c.devices = n;
  c.global_batch = batch;
  return c;
}

// A profile of `net` whose times follow its FLOPs (every layer's backward-data and weights each
// take its forward's time), for nets other than the fixture's.
inline pj::Profile profile_of(const NetPlan& net) {
  static const std::map<LayerType, std::string> names = {
      {LayerType::Conv2d, "conv2d"}, {LayerType::Linear, "linear"}, {LayerType::ReLU, "relu"}, {LayerType::Flatten, "flatten"}};
  pj::Profile p;
  p.source = "flops-profile";
  p.device_kind = "cuda";  // the fixture machine's kind
  p.context = {{"workload", "flops"}, {"device_kind", "cuda"}};
  p.batches = {1, 2, 4, 8};
  for (const LayerPlan& l : net.layers) {
    pj::LayerProfile lp;
    lp.index = l.index;
    lp.type = names.at(l.spec.type);
    lp.in = l.in, lp.out = l.out;
    lp.params = l.weight_numel + l.bias_numel;
    lp.forward_flops = l.forward_flops;
    for (int64_t b : p.batches) {
      const double t = 1e-6 + l.forward_flops * 1e-11 * static_cast<double>(b);
      lp.forward_s.push_back(t), lp.backward_data_s.push_back(t), lp.backward_weights_s.push_back(t);
    }
    p.layers.push_back(lp);
  }
  p.loss_s.assign(p.batches.size(), 1e-6);
  p.optimizer_s_per_param = 1e-9;
  return p;
}

// profile_of(`net`) as a CPU's, written to `path`; returns it.
inline std::string write_cpu_profile(const std::string& path, const NetSpec& net) {
  json prof = pj::profile_json(profile_of(plan_net(net)));
  prof["context"]["device_kind"] = "cpu";
  write_file_atomic(path, prof.dump());
  return path;
}

// Throws UsageError whose message contains every needle.
template <class F>
void expect_usage_error(F&& f, std::initializer_list<std::string> needles) {
  try {
    f();
    ADD_FAILURE() << "no error";
  } catch (const UsageError& e) {
    for (const std::string& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
  }
}

class ProjectCli : public test::CliTest {
 protected:
  ProjectCli() : CliTest("parbench_project_") {}

  // The example net run with `run_flags`, calibrated at 2 workers, and validated timing its own
  // profile once (--reps `reps`), written as v.json and prof-*.json; returns the validation.
  test::Result validate_example(const std::string& run_flags, int reps) {
    test::Result r = parbench("run --workload " + example_net() + " " + run_flags + " --batch 2 --iterations 2 --warmup 1 --out " + path("run"));
    if (r.code != 0) return r;
    r = parbench("calibrate --ranks 2 --sizes 4,64 --reps 1 --pools 1 --out " + path("cpu.json"));
    if (r.code != 0) return r;
    return parbench("project --validate " + path("run/results.json") + " --machine " + path("cpu.json") +
                    fmt::format(" --reps {} --profile-rounds 1 --out ", reps) + path("v") + " --save-profile " + path("prof"));
  }
  static std::string example_net() { return (test::source_dir() / "workloads" / "examples" / "mixed_stride_pad.json").string(); }
};

}  // namespace pb::projection_test
