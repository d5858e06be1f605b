// How close to the hardware a run is: the datasheet table and the roofline formula as functions
// (bench/roofline.h), then through `parbench run`: mfu = flop_per_s / (peak x devices) with a
// machine file's peak, the CPU's measured peak shared by its workers, warmup_s, the report's MFU
// column, and each traced layer span's FLOPs, bytes and roofline fraction against the net's plan.
#include <chrono>
#include <cmath>
#include <map>

#include "bench/roofline.h"
#include "engine/check.h"
#include "engine/model.h"
#include "engine/trace.h"
#include "projection/machine.h"
#include "reports/table.h"
#include "strategies/rules.h"
#include "strategies/sweep.h"
#include "tests/test_harness_support.h"
#include "workloads/workload.h"
#include "tests/paths.h"

namespace pb {
namespace {

using namespace pb::harness_test;

// A machine file with the device given (a JSON object's inside) and the fields project needs.
std::string machine_text(const std::string& device) {
  return R"({"parbench_machine": 1, "name": "test machine", "device": {)" + device +
         R"(}, "devices_per_node": 1024, "nodes": 1, "overlap": false,
            "links": {"intra_node": {"send_recv": {"direct": {"alpha_s": 1e-6, "bus_bytes_per_s": 1e9}}}}})";
}

TEST(Roofline, DatasheetMatchesGpuNamesOnWholeWords) {
  struct Case {
    const char* name;
    const char* model;  // nullptr: not in the table
  };
  const Case cases[] = {
      {"NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM"},  {"NVIDIA H100 PCIe", "NVIDIA H100 PCIe"},
      {"NVIDIA H100 NVL", "NVIDIA H100 NVL"},        {"NVIDIA H200", "NVIDIA H200 SXM"},
      {"NVIDIA H200 NVL", "NVIDIA H200 NVL"},        {"NVIDIA A100-SXM4-80GB", "NVIDIA A100 SXM 80GB"},
      {"NVIDIA A100-SXM4-40GB", "NVIDIA A100 SXM 40GB"}, {"NVIDIA A100 80GB PCIe", "NVIDIA A100 PCIe 80GB"},
      {"NVIDIA A100-PCIE-40GB", "NVIDIA A100 PCIe 40GB"}, {"NVIDIA L40S", "NVIDIA L40S"},
      {"NVIDIA L40", "NVIDIA L40"},                  {"NVIDIA L4", "NVIDIA L4"},
      {"NVIDIA A10", "NVIDIA A10"},                  {"NVIDIA B200", "NVIDIA B200 (HGX)"},
      // "H200" inside "GH200" is not the word H200; a V100 is not listed.
      {"NVIDIA GH200 480GB", nullptr},               {"Tesla V100-SXM2-16GB", nullptr},
      {"NVIDIA GeForce RTX 4090", nullptr},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const auto g = datasheet_for(c.name);
    if (!c.model) {
      EXPECT_FALSE(g.has_value()) << g->model;
      continue;
    }
    ASSERT_TRUE(g.has_value());
    EXPECT_STREQ(g->model, c.model);
  }
  // Dense peaks per precision: fp32 is the vector rate (no TF32), tf32 and bf16 the tensor cores'.
  const Roofline fp32 = datasheet_roofline("NVIDIA H100 80GB HBM3", Precision::Fp32);
  EXPECT_EQ(fp32.flops_per_s, 67e12);
  EXPECT_EQ(fp32.bytes_per_s, 3.35e12);
  EXPECT_FALSE(fp32.shared);
  EXPECT_EQ(datasheet_roofline("NVIDIA H200", Precision::Tf32).flops_per_s, 494e12);
  const Roofline bf16 = datasheet_roofline("NVIDIA H200", Precision::Bf16);
  EXPECT_EQ(bf16.flops_per_s, 989e12);
  EXPECT_EQ(bf16.bytes_per_s, 4.8e12);
  EXPECT_THAT(bf16.source, HasSubstr("datasheet table: NVIDIA H200 SXM"));
  // A miss: no peak, and the reason names the GPU and the way out.
  const Roofline miss = datasheet_roofline("NVIDIA GH200 480GB", Precision::Bf16);
  EXPECT_FALSE(miss.known());
  EXPECT_EQ(miss.bytes_per_s, 0);
  EXPECT_THAT(miss.source, HasSubstr("'NVIDIA GH200 480GB' is not in the datasheet table"));
  EXPECT_THAT(miss.source, HasSubstr("--machine"));
}

TEST(Roofline, FractionIsTheSlowerBoundOverTheMeasuredTime) {
  const Roofline r{1e12, 1e11, false, "constructed"};
  // Compute-bound: 2e9 FLOPs take 2 ms at 1e12, 1e8 bytes 1 ms at 1e11; measured 4 ms -> 0.5.
  EXPECT_DOUBLE_EQ(roofline_time(2e9, 1e8, r), 2e-3);
  EXPECT_DOUBLE_EQ(*roofline_fraction(2e9, 1e8, 4e-3, r), 0.5);
  // Memory-bound: 1e9 bytes take 10 ms; measured 40 ms -> 0.25.
  EXPECT_DOUBLE_EQ(*roofline_fraction(1e6, 1e9, 40e-3, r), 0.25);
  // No fraction without both rates, without work, or without a time.
  EXPECT_FALSE(roofline_fraction(2e9, 1e8, 4e-3, Roofline{1e12, 0, false, ""}).has_value());
  EXPECT_FALSE(roofline_fraction(2e9, 1e8, 4e-3, Roofline{0, 1e11, false, ""}).has_value());
  EXPECT_FALSE(roofline_fraction(0, 0, 4e-3, r).has_value());
  EXPECT_FALSE(roofline_fraction(2e9, 1e8, 0, r).has_value());
  // The configuration's peak: N devices have N peaks; CPU workers share one.
  EXPECT_EQ(r.peak_for(4), 4e12);
  EXPECT_EQ((Roofline{1e12, 1e11, true, ""}).peak_for(4), 1e12);
}

TEST(Roofline, MachineFileGivesPeakPerPrecisionAndBandwidth) {
  const projection::Machine m = projection::parse_machine(
      machine_text(R"("kind": "cuda", "model": "x", "peak_flops": 1e13, "peak_flops_by_precision": {"bf16": 4e13},
                      "memory_bytes": 1e10, "copy_bytes_per_s": 1e12)"),
      "gpu.json", unit_classes());
  const Roofline bf16 = machine_roofline(m, Precision::Bf16);
  EXPECT_EQ(bf16.flops_per_s, 4e13);
  EXPECT_EQ(bf16.bytes_per_s, 2e12);  // a copy reads and writes each byte
  EXPECT_FALSE(bf16.shared);
  EXPECT_THAT(bf16.source, HasSubstr("machine file gpu.json"));
  EXPECT_EQ(machine_roofline(m, Precision::Fp32).flops_per_s, 1e13);
  EXPECT_THROW(machine_roofline(m, Precision::Tf32), UsageError);  // the file has no tf32 rate
}

// One layer pass's work against the formula written out for a conv: FLOPs 2 K P Q C R S per
// sample; bytes x + y + w + b (forward), dy + dx + w (data), x + dy + dw + db (weights).
TEST(Roofline, LayerWorkCountsEachTensorOnce) {
  NetSpec net;
  net.name = "one_conv";
  net.input = {3, 8, 8};
  LayerSpec conv;
  conv.type = LayerType::Conv2d;
  conv.out_channels = 4, conv.kernel_h = 3, conv.kernel_w = 3, conv.pad_h = 1, conv.pad_w = 1;
  LayerSpec relu;
  relu.type = LayerType::ReLU;
  net.layers = {conv, relu};
  net.target = Target::Random;
  const NetPlan plan = plan_net(net);
  const double x = 2 * 3 * 8 * 8, y = 2 * 4 * 8 * 8, w = 4 * 3 * 3 * 3, b = 4, flops = 2.0 * 2 * 4 * 8 * 8 * 3 * 3 * 3;
  const LayerWork f = layer_work(plan.layers[0], 2, LayerPass::Forward, 4, 4);
  EXPECT_DOUBLE_EQ(f.flops, flops);
  EXPECT_DOUBLE_EQ(f.bytes, 4 * (x + y + w + b));
  EXPECT_DOUBLE_EQ(layer_work(plan.layers[0], 2, LayerPass::BackwardData, 2, 2).bytes, 2 * (y + x + w));
  EXPECT_DOUBLE_EQ(layer_work(plan.layers[0], 2, LayerPass::BackwardWeights, 2, 2).bytes, 2 * (x + y) + 4 * (w + b));
  EXPECT_DOUBLE_EQ(layer_work(plan.layers[1], 2, LayerPass::Forward, 4, 4).bytes, 4 * 2 * y);
  EXPECT_DOUBLE_EQ(layer_work(plan.layers[1], 2, LayerPass::BackwardData, 4, 4).bytes, 4 * 3 * y);
}

// A span cut open by a host-side communicator call: the segment before the call carries no work,
// the last one carries all of it and the time of both (busy_s), not the call's.
TEST(Roofline, ASpanCutOpenKeepsItsWorkOnceWithTheTimeOfItsSegments) {
  auto be = make_backend(cpu(0));
  Tracer t;
  t.set_detail(true);
  t.begin_step(*be, Tracer::clock::now());
  auto busy_wait = [](double s) {
    const auto end = Tracer::clock::now() + std::chrono::duration<double>(s);
    while (Tracer::clock::now() < end) {
    }
  };
  {
    Tracer::Scope span = t.compute(Phase::Backward, 0, [] { return std::string("L3 conv2d"); });
    t.add_work(1e9, 1e6);
    busy_wait(2e-3);
    t.suspend();
    busy_wait(5e-3);  // the communicator's call: not the layer's time
    t.resume();
    t.add_work(2e9, 3e6);
    busy_wait(1e-3);
  }
  t.end_step();
  ASSERT_EQ(t.spans().size(), 2u);
  const Span& first = t.spans()[0];
  const Span& last = t.spans()[1];
  EXPECT_EQ(first.flops, 0);
  EXPECT_EQ(first.busy_s, 0);
  EXPECT_EQ(last.flops, 3e9);
  EXPECT_EQ(last.bytes, 4e6);
  EXPECT_DOUBLE_EQ(last.busy_s, (first.end_s - first.start_s) + (last.end_s - last.start_s));
  EXPECT_LT(last.busy_s, last.end_s - first.start_s - 4e-3);  // the call's 5 ms left out
  // In the trace file: the work, the busy time and (once set) the fraction in args.
  std::vector<Span> spans = t.spans();
  spans[1].roofline_fraction = 0.25;
  const json doc = json::parse(chrome_trace({spans}, {"worker 0"}, {}));
  int with_work = 0;
  for (const json& e : doc["traceEvents"])
    if (e["ph"] == "X" && e["args"].contains("flops")) {
      ++with_work;
      EXPECT_EQ(e["args"]["flops"], 3e9);
      EXPECT_DOUBLE_EQ(e["args"]["busy_us"].get<double>(), last.busy_s * 1e6);
      EXPECT_EQ(e["args"]["roofline_fraction"], 0.25);
    }
  EXPECT_EQ(with_work, 1);
}

double counter(const json& b, const char* name) { return b.at(name).get<double>(); }

// With a machine file's peak P: mfu = flop_per_s / (P x devices) exactly for every benchmark, and
// the report's MFU is the record's. Without one, on CPU: the measured peak, one for all workers.
TEST_F(Harness, MfuIsFlopRateOverThePeakOfTheDevicesHeld) {
  const double peak = 2.5e9;
  write_file_atomic(path("cpu.json"), machine_text(fmt::format(R"("kind": "cpu", "model": "cpu", "peak_flops": {},
      "memory_bytes": 1e10, "copy_bytes_per_s": 5e9)", peak)));
  const std::string run = path("machine");
  Result r = parbench("run --workload linear --strategies regular,ddp --devices 1,2 --all-at-one-device --iterations 5 "
                      "--warmup 1 --device-kind cpu --machine " + path("cpu.json") + " --out " + run);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const json gb = load(run + "/results.json");
  EXPECT_EQ(gb["context"]["roofline_peak_flop_per_s"], "2500000000");
  EXPECT_EQ(gb["context"]["roofline_bytes_per_s"], "10000000000");
  EXPECT_EQ(gb["context"]["roofline_scope"], "per device");
  EXPECT_THAT(gb["context"]["roofline_source"].get<std::string>(), HasSubstr("machine file " + path("cpu.json")));
  EXPECT_THAT(gb["context"]["warmup_timing"].get<std::string>(), HasSubstr("first step after its setup"));
  std::map<std::string, double> mfu;  // benchmark -> the record's mfu
  for (const json& b : gb["benchmarks"]) {
    if (b["run_type"] != "iteration") continue;
    SCOPED_TRACE(b["name"].get<std::string>());
    const double devices = counter(b, "devices");
    EXPECT_EQ(counter(b, "peak_flop_per_s"), peak * devices);
    EXPECT_NEAR(counter(b, "mfu"), counter(b, "flop_per_s") / (peak * devices), 1e-12 * counter(b, "mfu"));
    EXPECT_GT(counter(b, "mfu"), 0);
    // warmup_s: recorded per benchmark, its own measurement on the steps' clock (not one of the
    // timed iterations, which all stay in iteration_times_s).
    EXPECT_GT(counter(b, "warmup_s"), 0);
    EXPECT_LT(counter(b, "warmup_s"), 60);
    mfu[reports::benchmark_identity(b["run_name"].get<std::string>())] = counter(b, "mfu");
  }
  EXPECT_EQ(mfu.size(), 3u);  // regular x1, ddp x1, ddp x2

  // The report's MFU column is the record's mfu: JSON exactly, the table as a percentage.
  r = parbench("report " + run + "/results.json --format json");
  ASSERT_EQ(r.code, 0) << r.err;
  int rows = 0;
  const json rep = json::parse(r.out);
  for (const json& g : rep["groups"])
    for (const json& row : g["rows"]) {
      ASSERT_TRUE(mfu.count(row["benchmark"].get<std::string>())) << row["benchmark"];
      EXPECT_EQ(row["mfu"].get<double>(), mfu.at(row["benchmark"].get<std::string>()));
      EXPECT_GT(row["warmup_s"].get<double>(), 0);
      ++rows;
    }
  EXPECT_EQ(rows, 3);
  r = parbench("report " + run + "/results.json");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("| GFLOP/s | MFU |"));
  EXPECT_THAT(r.out, HasSubstr(" | " + reports::mfu_text(mfu.at("linear/ddp/devices:2/batch:1")) + " | "));

  // No machine file on CPU: measured, and shared by the workers (x 1, not x devices).
  const std::string measured = path("measured");
  r = parbench("run --workload linear --strategies ddp --devices 2 --iterations 3 --warmup 0 --device-kind cpu --out " + measured);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("measuring this CPU's rates"));
  const json m = load(measured + "/results.json");
  EXPECT_EQ(m["context"]["roofline_scope"], "shared");
  EXPECT_THAT(m["context"]["roofline_source"].get<std::string>(), HasSubstr("measured: calibrate's conv probe"));
  const double cpu_peak = std::stod(m["context"]["roofline_peak_flop_per_s"].get<std::string>());
  EXPECT_GT(cpu_peak, 1e8);
  for (const json& b : m["benchmarks"]) {
    if (b["run_type"] != "iteration") continue;
    EXPECT_EQ(counter(b, "peak_flop_per_s"), cpu_peak);
    EXPECT_NEAR(counter(b, "mfu"), counter(b, "flop_per_s") / cpu_peak, 1e-12 * counter(b, "mfu"));
    EXPECT_GT(counter(b, "warmup_s"), 0);  // --warmup 0: the first timed step
  }

  // A record without mfu (no peak known): the report leaves the column empty, never a number.
  json old = gb;
  for (json& b : old["benchmarks"]) b.erase("mfu");
  write_file_atomic(path("old.json"), old.dump());
  r = parbench("report " + path("old.json") + " --format json");
  ASSERT_EQ(r.code, 0) << r.err;
  const json old_rep = json::parse(r.out);
  ASSERT_FALSE(old_rep["groups"].empty());
  for (const json& g : old_rep["groups"])
    for (const json& row : g["rows"]) EXPECT_TRUE(row["mfu"].is_null());
}

TEST_F(Harness, MachineFileOfAnotherDeviceKindIsRefused) {
  Result r = parbench("run --workload linear --strategies regular --devices 1 --device-kind cpu --machine " +
                      (test::source_dir() / "machines/h200_hgx.json").string() + " --out " + path("run"));
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("device.kind is cuda, but the run's devices are cpu"));
}

// The traced step's layer spans carry the work of the plan's layers at the worker's batch, and
// their roofline fraction is the roofline time at the worker's rates over the span's own time.
TEST_F(Harness, TracedLayerSpansCarryThePlansWorkAndTheirRooflineFraction) {
  write_file_atomic(path("cpu.json"), machine_text(R"("kind": "cpu", "model": "cpu", "peak_flops": 4e10,
      "memory_bytes": 1e10, "copy_bytes_per_s": 1e10, "shared_cores": 2)"));
  const std::string run = path("trace");
  Result r = parbench("run --workload great_net --image 8 --width 0.125 --strategies ddp,tp --devices 2 --batch 2 "
                      "--iterations 2 --warmup 1 --threads 1 --device-kind cpu --trace --machine " + path("cpu.json") +
                      " --out " + run);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const json t = load(run + "/trace-great_net_image_8_width_0.125_ddp_devices_2_batch_2.json");
  // Shared by 2 workers: each worker's rates are half the machine's.
  EXPECT_EQ(t["otherData"]["worker_peak_flop_per_s"], "20000000000");
  EXPECT_EQ(t["otherData"]["worker_bytes_per_s"], "10000000000");
  WorkloadOptions wo;
  wo.image = 8, wo.width = 0.125;
  const NetPlan plan = plan_net(resolve_workload("great_net", wo));
  const Roofline worker{2e10, 1e10, false, ""};
  int checked = 0;
  for (const json& e : t["traceEvents"]) {
    if (e["ph"] != "X" || e["name"].get<std::string>().rfind("L", 0) != 0) continue;
    const std::string name = e["name"];
    const int layer = std::stoi(name.substr(1));
    const LayerPlan& l = plan.layers.at(layer);
    const json& a = e["args"];
    SCOPED_TRACE(name + " " + a["phase"].get<std::string>());
    if (l.spec.type != LayerType::Conv2d) continue;
    // Batch 2 per worker (weak scaling). Forward: the plan's FLOPs; backward: weights, and data
    // except for the first layer (no input gradient).
    double flops = 0, bytes = 0;
    auto add = [&](LayerPass p) {
      const LayerWork w = layer_work(l, 2, p, 4, 4);
      flops += w.flops, bytes += w.bytes;
    };
    if (a["phase"] == "forward") {
      add(LayerPass::Forward);
      EXPECT_DOUBLE_EQ(flops, l.forward_flops * 2);
    } else {
      add(LayerPass::BackwardWeights);
      if (layer > 0) add(LayerPass::BackwardData);
    }
    if (!a.contains("flops")) continue;  // a segment before a communicator call cut the span: the last one has the work
    EXPECT_DOUBLE_EQ(a["flops"].get<double>(), flops);
    EXPECT_DOUBLE_EQ(a["bytes"].get<double>(), bytes);
    const double busy = a["busy_us"].get<double>() * 1e-6;
    EXPECT_GE(busy, e["dur"].get<double>() * 1e-6 * (1 - 1e-9));  // at least this segment
    EXPECT_NEAR(a["roofline_fraction"].get<double>(), *roofline_fraction(flops, bytes, busy, worker),
                1e-9 * a["roofline_fraction"].get<double>());
    ++checked;
  }
  EXPECT_GE(checked, 2 * 2 * 6);  // 2 workers x (forward + backward) x great_net's convolutions (at least 6)

  // tp: a span per plan action ("backward_weights layer 3"), each worker's work its channels' share.
  const json tp = load(run + "/trace-great_net_image_8_width_0.125_tp_devices_2_batch_2.json");
  const std::vector<TpSlice> slices = tp_slices(plan, 2, "tp");
  int tp_checked = 0;
  for (const json& e : tp["traceEvents"]) {
    if (e["ph"] != "X" || !e["args"].contains("flops")) continue;
    const std::string name = e["name"];
    const std::size_t at = name.find(" layer ");
    ASSERT_NE(at, std::string::npos) << name;
    const std::string kind = name.substr(0, at);
    const int layer = std::stoi(name.substr(at + 7));
    const LayerPlan& l = plan.layers.at(layer);
    const TpSlice& s = slices.at(layer);
    const int rank = e["pid"];
    const double part = s.channels > 0 ? static_cast<double>(s.k.at(rank)) / static_cast<double>(s.channels) : 1;
    const LayerPass pass = kind == "forward" ? LayerPass::Forward
                           : kind == "backward_weights" ? LayerPass::BackwardWeights : LayerPass::BackwardData;
    // tp runs at the whole replica's batch (2 workers x 2 samples), each worker its channels.
    const LayerWork w = layer_work(l, 4, pass, 4, 4, part);
    SCOPED_TRACE(name);
    EXPECT_DOUBLE_EQ(e["args"]["flops"].get<double>(), w.flops);
    EXPECT_DOUBLE_EQ(e["args"]["bytes"].get<double>(), w.bytes);
    if (l.spec.type == LayerType::Conv2d && pass == LayerPass::Forward) {
      EXPECT_DOUBLE_EQ(w.flops, l.forward_flops * 4 * part);
    }
    ++tp_checked;
  }
  EXPECT_GE(tp_checked, 2 * 3 * 6);  // 2 workers x (forward, data, weights) x at least 6 convolutions
}

}  // namespace
}  // namespace pb
