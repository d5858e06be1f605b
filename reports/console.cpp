// The console lines of `parbench run` (reports/console.h).
#include "reports/console.h"

#include <fmt/format.h>

#include "reports/schema.h"
#include "reports/units.h"

namespace pb::reports {

namespace {

constexpr const char* kLine = "{:<26} {:>3} {:>9} {:>6} {:>10} {:>6} {:>9} {:>7} {:>8} {:>6}";

std::string pct(const std::optional<double>& v) { return v ? fmt::format("{:.1f}%", *v * 100) : "-"; }

// The strategy with the options its name carries (micro_batches:2), without workload and batch,
// which every line of a run shares.
std::string label(const Row& r) {
  std::string out = r.strategy;
  if (const auto n = parse_bench_name(r.name))
    for (const std::string& o : n->options) out += " " + o;
  return out;
}

}  // namespace

std::vector<std::string> console_header() {
  return {
      "time: the median of every timed iteration (all repetitions); +-: its CV (over the",
      "  repetitions, or * over the iterations of one); samples/s: samples per iteration / median;",
      "  MFU: achieved FLOP/s / the devices' peak (context roofline_source);",
      fmt::format("  peak: {} (tensors + workspace + runtime); compute, transfer, idle: % of the", schema::figure::device_peak.heading),
      "  device time (N x step time), median over repetitions. Every counter: results.json.",
  };
}

std::string console_columns() {
  return fmt::format(fmt::runtime(kLine), "strategy", "N", "time", "+-", "samples/s", "MFU", "peak MiB", "compute",
                     "transfer", "idle");
}

std::string console_line(const Row& r) {
  if (r.error || !r.median_ms)
    return fmt::format("{:<26} {:>3} error: {}", label(r), r.devices, r.error_message.empty() ? "no measurement" : r.error_message);
  std::string cv = "-";
  if (r.cv) cv = fmt::format("{:.1f}%{}", *r.cv * 100, r.cv_within_run ? "*" : "");
  const std::optional<double> peak = r.device_peak_mib ? r.device_peak_mib : r.peak_mib_max;
  return fmt::format(fmt::runtime(kLine), label(r), r.devices, format_time(*r.median_ms / 1e3), cv,
                     r.samples_per_s ? num(*r.samples_per_s) : "-", mfu_text(r.mfu), peak ? num(*peak) : "-",
                     pct(r.compute_share),
                     pct(r.transfer_share), pct(r.idle_share));
}

}  // namespace pb::reports
