// device_roofline: the machine file, the datasheet row of the GPU, or this CPU measured (the
// probe `parbench calibrate` makes, and a copy on all cores).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "bench/calibrate.h"
#include "bench/roofline.h"
#include "engine/check.h"
#include "projection/machine.h"
#include "strategies/sweep.h"

namespace pb {

namespace {

// Bytes per second of one copy on all cores at once, each thread its slice: read + write bytes.
double cpu_copy_bytes_per_s(int threads) {
  constexpr std::size_t kBytes = 64u << 20;  // well past the last-level cache
  std::vector<char> src(kBytes, 1), dst(kBytes, 0);
  double best = 0;
  for (int k = 0; k < 5; ++k) {
    std::vector<std::thread> ts;
    const std::size_t slice = kBytes / threads;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < threads; ++i)
      ts.emplace_back([&, i] { std::memcpy(dst.data() + i * slice, src.data() + i * slice, slice); });
    for (auto& t : ts) t.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 2.0 * static_cast<double>(slice * threads) / s);
  }
  return best;
}

}  // namespace

Roofline device_roofline(Device d, Precision p, const std::string& machine_file) {
  const std::string kind = d.kind == DeviceKind::Cuda ? "cuda" : "cpu";
  if (!machine_file.empty()) {
    const projection::Machine m = projection::load_machine(machine_file, unit_classes());
    if (m.kind != kind)
      throw UsageError(fmt::format("--machine {}: device.kind is {}, but the run's devices are {}", machine_file, m.kind, kind));
    return machine_roofline(m, p);
  }
  if (d.kind == DeviceKind::Cuda) {
    const SystemInfo info = system_info();
    if (d.index >= static_cast<int>(info.gpus.size())) {
      Roofline r;
      r.source = fmt::format("none: no GPU {} visible", d.index);
      return r;
    }
    return datasheet_roofline(info.gpus[d.index].name, p);
  }
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  fmt::print(stderr, "parbench: measuring this CPU's rates for mfu and rooflines ({} convolution and a copy on {} "
             "cores, about a second)\n", precision_name(p), cores);
  std::fflush(stderr);
  Roofline r;
  // calibrate's probe is 6 calls, tens of milliseconds: repeated for about a second, the best, so
  // that a moment of other load does not set the peak.
  const auto t0 = std::chrono::steady_clock::now();
  do r.flops_per_s = std::max(r.flops_per_s, calibration::conv_flops(cores, p));
  while (std::chrono::steady_clock::now() - t0 < std::chrono::seconds(1));
  r.bytes_per_s = cpu_copy_bytes_per_s(cores);
  r.shared = true;
  r.source = fmt::format("measured: calibrate's conv probe (the engine's best {} rate over a second of 3x3 conv "
                         "64->64, 32x32, batch 8, on {} cores; not a datasheet peak) and a 64 MiB copy on {} cores",
                         precision_name(p), cores, cores);
  return r;
}

}  // namespace pb
