// How fast a device could go: its dense peak FLOP/s in a precision and its memory bandwidth, from a
// machine file, a built-in table of GPU datasheets, or (CPU) a short measurement; and an action's
// achieved fraction of its roofline. `run` (mfu, trace fractions) and `profile` share these.
#pragma once

#include <optional>
#include <string>

#include "engine/backend.h"
#include "engine/device.h"

namespace pb {

namespace projection {
struct Machine;
}

struct Roofline {
  double flops_per_s = 0;  // dense peak of one device in the run's precision; 0: unknown
  double bytes_per_s = 0;  // memory bandwidth of one device (read + write bytes per second); 0: unknown
  // CPU: every worker of a run shares this one rate (the cores); else each device has its own.
  bool shared = false;
  // Where the figures come from ("machine file machines/x.json", "datasheet table: NVIDIA H200",
  // "measured: calibrate's conv probe ..."), or, with flops_per_s 0, why there are none.
  std::string source;
  bool known() const { return flops_per_s > 0; }
  // The peak the devices of a configuration have together: flops_per_s x devices (shared: x 1).
  double peak_for(int devices) const { return shared ? flops_per_s : flops_per_s * devices; }
};

// A row of the datasheet table: dense (no sparsity) tensor/vector peaks and memory bandwidth.
struct GpuDatasheet {
  const char* model;  // "NVIDIA H100 SXM"
  double fp32, tf32, bf16;  // FLOP/s; 0 where the GPU has no such unit
  double bytes_per_s;       // memory bandwidth
};
// The table's row for a device name as CUDA reports it ("NVIDIA H100 80GB HBM3", "NVIDIA
// A100-SXM4-40GB"), matched on whole words; nullopt for a GPU the table does not list.
std::optional<GpuDatasheet> datasheet_for(const std::string& gpu_name);
// The table's roofline for that name and precision; unknown (with the reason) on a miss.
Roofline datasheet_roofline(const std::string& gpu_name, Precision p);
// A machine file's device: peak(precision) (UsageError naming the file where it lacks the
// precision), bandwidth 2 x copy_bytes_per_s (a copy reads and writes each byte; 0: unknown).
Roofline machine_roofline(const projection::Machine& m, Precision p);

// The roofline of `d` in precision p: machine_file when given (its device kind must be d's:
// UsageError otherwise), else on CUDA the datasheet row of the GPU's name, else on CPU
// measured here (`calibrate`'s convolution probe on all cores and a copy on all cores: about a
// second, a progress line on stderr).
Roofline device_roofline(Device d, Precision p, const std::string& machine_file = "");

// max(flops / peak, bytes / bandwidth); a term whose rate is unknown counts 0. 0 when neither.
double roofline_time(double flops, double bytes, const Roofline& r);
// roofline_time / seconds: 1 = the action ran at its roofline; nullopt when either rate is
// unknown, the action has no work, or seconds <= 0.
std::optional<double> roofline_fraction(double flops, double bytes, double seconds, const Roofline& r);

}  // namespace pb
