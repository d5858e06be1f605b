// The roofline's two rates from a machine file or the GPU datasheet table, and the fraction of its
// roofline an action achieved (bench/roofline_probe.cpp picks the source for a device).
#include "bench/roofline.h"

#include <algorithm>
#include <cctype>
#include <set>
#include <vector>

#include <fmt/format.h>

#include "engine/check.h"
#include "projection/machine.h"

namespace pb {

namespace {

// Dense peaks (the datasheets' sparse figures halved) and HBM/GDDR bandwidth, per device.
struct Entry {
  std::vector<const char*> words;  // every one must be a word of the name (case-insensitive)
  GpuDatasheet sheet;
};
const std::vector<Entry>& table() {
  static const std::vector<Entry> t = {
      // Most specific first: an H200 NVL is also an "H200".
      {{"H200", "NVL"}, {"NVIDIA H200 NVL", 60e12, 417.5e12, 835.5e12, 4.8e12}},
      {{"H200"}, {"NVIDIA H200 SXM", 67e12, 494e12, 989e12, 4.8e12}},
      {{"H100", "NVL"}, {"NVIDIA H100 NVL", 60e12, 417.5e12, 835.5e12, 3.9e12}},
      {{"H100", "PCIE"}, {"NVIDIA H100 PCIe", 51e12, 378e12, 756e12, 2.0e12}},
      {{"H100"}, {"NVIDIA H100 SXM", 67e12, 494e12, 989e12, 3.35e12}},
      {{"A100", "PCIE", "80GB"}, {"NVIDIA A100 PCIe 80GB", 19.5e12, 156e12, 312e12, 1.935e12}},
      {{"A100", "PCIE"}, {"NVIDIA A100 PCIe 40GB", 19.5e12, 156e12, 312e12, 1.555e12}},
      {{"A100", "40GB"}, {"NVIDIA A100 SXM 40GB", 19.5e12, 156e12, 312e12, 1.555e12}},
      {{"A100"}, {"NVIDIA A100 SXM 80GB", 19.5e12, 156e12, 312e12, 2.039e12}},
      {{"B200"}, {"NVIDIA B200 (HGX)", 75e12, 1125e12, 2250e12, 8.0e12}},
      {{"L40S"}, {"NVIDIA L40S", 91.6e12, 183e12, 366e12, 864e9}},
      {{"L40"}, {"NVIDIA L40", 90.5e12, 90.5e12, 181e12, 864e9}},
      {{"L4"}, {"NVIDIA L4", 30.3e12, 60e12, 121e12, 300e9}},
      {{"A10"}, {"NVIDIA A10", 31.2e12, 62.5e12, 125e12, 600e9}},
  };
  return t;
}

std::set<std::string> words_of(const std::string& name) {
  std::set<std::string> out;
  std::string cur;
  for (char ch : name + " ") {
    if (std::isalnum(static_cast<unsigned char>(ch))) {
      cur += static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    } else if (!cur.empty()) {
      out.insert(cur);
      cur.clear();
    }
  }
  return out;
}

double rate_in(const GpuDatasheet& g, Precision p) {
  switch (p) {
    case Precision::Fp32: return g.fp32;
    case Precision::Tf32: return g.tf32;
    case Precision::Bf16: return g.bf16;
  }
  return 0;
}

}  // namespace

std::optional<GpuDatasheet> datasheet_for(const std::string& gpu_name) {
  const std::set<std::string> words = words_of(gpu_name);
  for (const Entry& e : table())
    if (std::all_of(e.words.begin(), e.words.end(), [&](const char* w) { return words.count(w) > 0; })) return e.sheet;
  return std::nullopt;
}

Roofline datasheet_roofline(const std::string& gpu_name, Precision p) {
  Roofline r;
  const std::optional<GpuDatasheet> g = datasheet_for(gpu_name);
  if (!g) {
    r.source = fmt::format("none: '{}' is not in the datasheet table (bench/roofline.cpp); give --machine FILE", gpu_name);
    return r;
  }
  r.flops_per_s = rate_in(*g, p);
  r.bytes_per_s = g->bytes_per_s;
  r.source = r.known() ? fmt::format("datasheet table: {} (dense {})", g->model, precision_name(p))
                       : fmt::format("none: {} has no {} rate in the datasheet table", g->model, precision_name(p));
  return r;
}

Roofline machine_roofline(const projection::Machine& m, Precision p) {
  Roofline r;
  r.flops_per_s = m.peak(precision_name(p));
  r.bytes_per_s = 2 * m.copy_bytes_per_s;
  r.shared = m.kind == "cpu" && m.shared_cores > 0;
  r.source = fmt::format("machine file {} ({})", m.source, m.name);
  return r;
}

double roofline_time(double flops, double bytes, const Roofline& r) {
  const double compute = r.flops_per_s > 0 ? flops / r.flops_per_s : 0;
  const double memory = r.bytes_per_s > 0 ? bytes / r.bytes_per_s : 0;
  return std::max(compute, memory);
}

std::optional<double> roofline_fraction(double flops, double bytes, double seconds, const Roofline& r) {
  // Both rates: with one missing, an action bound by the other would look slow or fast for nothing.
  if (r.flops_per_s <= 0 || r.bytes_per_s <= 0 || seconds <= 0 || (flops <= 0 && bytes <= 0)) return std::nullopt;
  return roofline_time(flops, bytes, r) / seconds;
}

}  // namespace pb
