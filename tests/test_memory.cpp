// Memory by part: the allocators' pools (engine tensors, library workspace) and their parts at
// the peak, library scratch counted as workspace, the measured breakdown, and the run counters.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "engine/cpu_backend.h"
#include "engine/memory_estimate.h"
#include "reports/gbjson.h"
#include "reports/schema.h"
#include "tests/cli_fixture.h"

namespace pb {
namespace {

using ::testing::ContainsRegex;

TEST(Memory, PoolsAndTheirPartsAtThePeak) {
  Allocator& a = allocator_for(cpu(61));  // a slot no other test uses
  a.reset_peak();
  ASSERT_EQ(a.current_bytes(), 0u);
  void* t = a.allocate(1000);
  a.note(MemoryPool::Workspace, 300);
  EXPECT_EQ(a.current_bytes(), 1300u);
  EXPECT_EQ(a.current_bytes(MemoryPool::Tensors), 1000u);
  EXPECT_EQ(a.current_bytes(MemoryPool::Workspace), 300u);
  a.release(t, 1000);
  void* w = a.allocate(200, MemoryPool::Workspace);  // 500 in all: below the peak of 1300
  EXPECT_EQ(a.peak_bytes(), 1300u);
  EXPECT_EQ(a.at_peak_bytes(MemoryPool::Tensors), 1000u);
  EXPECT_EQ(a.at_peak_bytes(MemoryPool::Workspace), 300u);
  EXPECT_EQ(a.peak_bytes(MemoryPool::Workspace), 500u) << "the pool's own peak is later";
  a.reset_peak();
  EXPECT_EQ(a.peak_bytes(), 500u);
  EXPECT_EQ(a.at_peak_bytes(MemoryPool::Tensors) + a.at_peak_bytes(MemoryPool::Workspace), a.peak_bytes());
  a.release(w, 200, MemoryPool::Workspace);
  a.note(MemoryPool::Workspace, -300);
  EXPECT_EQ(a.current_bytes(), 0u);
  EXPECT_EQ(a.current_bytes(MemoryPool::Workspace), 0u);
}

TEST(Memory, ConvScratchIsTheDevicesWorkspace) {
  ConvGeom g;
  g.n = 2, g.c = 32, g.h = g.w = 12, g.k = 32, g.r = g.s = 3, g.pad_h = g.pad_w = 1;
  const std::vector<float> x(static_cast<std::size_t>(g.n * g.c * g.h * g.w), 0.5f),
      w(static_cast<std::size_t>(g.k * g.c * g.r * g.s), 0.1f), b(static_cast<std::size_t>(g.k), 0.f);
  std::vector<float> y(static_cast<std::size_t>(g.n * g.k * g.p() * g.q()));
  for (bool reference : {false, true}) {
    SCOPED_TRACE(reference ? "im2col" : "default conv (oneDNN where built)");
    const Device d = cpu(62);
    Allocator& a = allocator_for(d);
    const std::size_t before = a.current_bytes(MemoryPool::Workspace);
    {
      BackendOptions o;
      o.threads = 1;
      o.cpu_reference_conv = reference;
      CpuBackend be(d, o);
      be.conv2d_forward(g, x.data(), w.data(), b.data(), y.data());
      EXPECT_GT(a.current_bytes(MemoryPool::Workspace), before);
      EXPECT_EQ(a.current_bytes(MemoryPool::Tensors), 0u) << "scratch is not counted as tensors";
    }
    EXPECT_EQ(a.current_bytes(MemoryPool::Workspace), before) << "released with the backend";
  }
}

TEST(Memory, MeasuredPartsAddUpOnCpu) {
  const Device d = cpu(63);
  allocator_for(d).reset_peak();
  Tensor t = Tensor::zeros({1 << 20}, d);  // 4 MiB of engine tensors
  const MemoryUse m = measure_memory({d});
  EXPECT_GE(m.tensors, 4.0 * (1 << 20));
  EXPECT_GT(m.runtime, 0) << "the program itself is resident";
  EXPECT_DOUBLE_EQ(m.total(), m.tensors + m.workspace + m.runtime);
  EXPECT_GT(resident_bytes(), static_cast<std::size_t>(m.tensors));
}

class MemoryCli : public test::CliTest {
 protected:
  MemoryCli() : CliTest("parbench_memory_") {}
};

TEST_F(MemoryCli, RunReportsTheDevicePeakAndItsParts) {
  const test::Result r = parbench("run --device-kind cpu --image 16 --width 0.25 --strategies regular,mp --devices 1,2 --all-at-one-device "
                                  "--iterations 2 --warmup 1 --threads 1 --out " + path("run"));
  ASSERT_EQ(r.code, 0) << r.err;
  const reports::RunFile f = reports::load_run_json(path("run/results.json"));
  namespace k = reports::schema::counter;
  int checked = 0;
  for (const reports::BenchRun& b : f.runs) {
    if (b.aggregate) continue;
    SCOPED_TRACE(b.name);
    const double total = b.counters.at(k::device_peak_bytes.name), tensors = b.counters.at(k::tensor_bytes.name),
                 workspace = b.counters.at(k::workspace_bytes.name), runtime = b.counters.at(k::runtime_bytes.name);
    EXPECT_GT(tensors, 0);
    EXPECT_GT(workspace, 0) << "the conv layers' library scratch";
    EXPECT_GT(runtime, 0);
    EXPECT_NEAR(total, tensors + workspace + runtime, 1.0);
    // The allocators' peak is tensors + workspace: on one worker exactly peak_bytes_max.
    if (b.counters.at(k::devices.name) == 1) {
      EXPECT_NEAR(b.counters.at(k::peak_bytes_max.name), tensors + workspace, 1.0);
    }
    ++checked;
  }
  EXPECT_EQ(checked, 3);  // regular x1, mp x1, mp x2
  EXPECT_THAT(test::slurp(path("run/report.md")), ContainsRegex("\\| [0-9.]+ \\([0-9.]+ \\+ [0-9.]+ \\+ [0-9.]+\\) \\|"));
}

}  // namespace
}  // namespace pb
