// What `project` prints must not mislead: times beyond the profiled batches never make a sample
// cheaper.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "engine/fsutil.h"
#include "reports/projection.h"
#include "tests/paths.h"

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
  const pj::Machine m = pj::load_machine(fixture("machine.json"));
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

}  // namespace
}  // namespace pb
