// The projection's input files (projection/profile.h, machine.h): interpolation, image scaling,
// errors that name the file and field, the shipped machine presets.
#include "tests/test_projection_support.h"

namespace pb {
namespace {

using namespace projection_test;

TEST(Projection, ProfileInterpolatesAndExtrapolatesLinearly) {
  const pj::Profile p = uniform();
  EXPECT_EQ(p.param_count(), 4 * 148);
  EXPECT_NEAR(p.forward(0, 3), 0.003, 1e-12);  // between 2 and 4
  EXPECT_NEAR(p.forward(0, 8), 0.008, 1e-12);  // beyond 4, along the last two
  EXPECT_DOUBLE_EQ(p.forward(0, 0), 0);
}

TEST(Projection, ScaleImageScalesPixelsNotParameters) {
  const pj::Profile p = uniform(), q = pj::scale_image(p, 8, 16);
  EXPECT_EQ(q.layers[0].in, (std::vector<int64_t>{4, 16, 16}));
  EXPECT_EQ(q.param_count(), p.param_count());
  EXPECT_NEAR(q.forward(0, 2), 4 * p.forward(0, 2), 1e-15);
  EXPECT_NEAR(q.forward_flops(), 4 * p.forward_flops(), 1e-3);
  EXPECT_NEAR(q.input_bytes_per_sample(), 4 * p.input_bytes_per_sample(), 1e-9);
  json j = fixture_json("uniform.json");
  j["layers"][3]["type"] = "flatten";
  expect_usage_error([&] { pj::scale_image(pj::parse_profile(j.dump(), "f.json"), 8, 16); }, {"f.json", "layer 3 (flatten)"});
}

TEST(Projection, ProfileErrorsNameFileAndField) {
  json j = fixture_json("uniform.json");
  j["layers"][1]["forward_s"] = {0.001, 0.002};
  expect_usage_error([&] { pj::parse_profile(j.dump(), "p.json"); }, {"p.json", "layers[1].forward_s", "3 number(s)"});
  j = fixture_json("uniform.json");
  j["layers"][2]["speed"] = 1;
  expect_usage_error([&] { pj::parse_profile(j.dump(), "p.json"); }, {"p.json", "layers[2].speed", "unknown"});
  j = fixture_json("uniform.json");
  j["batches"] = {2, 1, 4};
  expect_usage_error([&] { pj::parse_profile(j.dump(), "p.json"); }, {"batches[1]", "ascending"});
  j = fixture_json("uniform.json");
  j["layers"][0]["backward_weights_s"][0] = -1;
  expect_usage_error([&] { pj::parse_profile(j.dump(), "p.json"); }, {"layers[0].backward_weights_s[0]", ">= 0"});
  expect_usage_error([&] { pj::parse_profile("{\"parbench_profile\": 1,", "p.json"); }, {"p.json", "malformed JSON"});
}

TEST(Projection, MachineErrorsNameFileAndField) {
  json j = fixture_json("machine.json");
  j["device"].erase("peak_flops");
  expect_usage_error([&] { pj::parse_machine(j.dump(), "m.json", unit_classes()); }, {"m.json", "device.peak_flops", "missing"});
  j = fixture_json("machine.json");
  j["links"]["intra_node"]["all_reduce"]["butterfly"] = {{"alpha_s", 0}, {"bus_bytes_per_s", 1}};
  expect_usage_error([&] { pj::parse_machine(j.dump(), "m.json", unit_classes()); }, {"links.intra_node.all_reduce.butterfly", "ring, tree or direct"});
  j = fixture_json("machine.json");
  j["links"]["intra_node"]["send_recv"]["direct"]["bus_bytes_per_s"] = 0;
  expect_usage_error([&] { pj::parse_machine(j.dump(), "m.json", unit_classes()); }, {"links.intra_node.send_recv.direct.bus_bytes_per_s", "> 0"});
  j = fixture_json("machine.json");
  j["links"].erase("inter_node");
  expect_usage_error([&] { pj::parse_machine(j.dump(), "m.json", unit_classes()); }, {"links.inter_node", "nodes > 1"});
  for (const char* key : {"1", "two", "2x"}) {
    j = fixture_json("machine.json");
    j["links"]["intra_node"]["all_reduce"]["ring"]["ranks"][key] = {{"alpha_s", 1e-5}, {"bus_bytes_per_s", 1e9}};
    expect_usage_error([&] { pj::parse_machine(j.dump(), "m.json", unit_classes()); },
                       {fmt::format("links.intra_node.all_reduce.ring.ranks.{}", key), "worker count of 2 or more"});
  }
  j = fixture_json("machine.json");
  j["unit_overhead_s"] = {{"ddp", 1e-6}};
  expect_usage_error([&] { pj::parse_machine(j.dump(), "m.json", unit_classes()); }, {"unit_overhead_s.ddp", "unknown"});
  j["unit_overhead_s"] = {{"fsdp", -1e-6}};
  expect_usage_error([&] { pj::parse_machine(j.dump(), "m.json", unit_classes()); }, {"unit_overhead_s.fsdp", ">= 0"});
  j = fixture_json("machine.json");
  j["links"]["intra_node"]["all_reduce"]["ring"]["ranks"]["4"] = {{"alpha_s", 1e-5}};
  expect_usage_error([&] { pj::parse_machine(j.dump(), "m.json", unit_classes()); }, {"links.intra_node.all_reduce.ring.ranks.4.bus_bytes_per_s", "missing"});
  j = fixture_json("machine.json");
  j["devices_per_node"] = int64_t{1} << 40;  // an int cannot hold it: an error, not a wrapped count
  expect_usage_error([&] { pj::parse_machine(j.dump(), "m.json", unit_classes()); }, {"m.json", "devices_per_node", "an integer from 1 to 2147483647"});
}

TEST(Projection, PresetsParseAndRoundTrip) {
  for (const auto& e : std::filesystem::directory_iterator(test::source_dir() / "machines")) {
    const pj::Machine m = pj::load_machine(e.path().string(), unit_classes());
    const pj::Machine again = pj::parse_machine(pj::machine_json(m).dump(), "again", unit_classes());
    EXPECT_EQ(again.name, m.name);
    EXPECT_EQ(again.total_devices(), m.total_devices());
    EXPECT_EQ(pj::machine_json(again), pj::machine_json(m)) << e.path();
  }
}

}  // namespace
}  // namespace pb
