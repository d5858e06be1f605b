// --show-shapes lines (bench/shapes.h).
#include "bench/shapes.h"

#include <fmt/ranges.h>

namespace pb {

namespace {

// torch.Size's contents: [samples, ...per sample].
std::string batch_shape(int64_t samples, const Shape& per_sample) {
  std::vector<int64_t> dims = {samples};
  dims.insert(dims.end(), per_sample.begin(), per_sample.end());
  return fmt::format("[{}]", fmt::join(dims, ", "));
}

}  // namespace

std::string shapes_heading(const std::string& strategy, int devices, DeviceKind kind) {
  return fmt::format("Let's use {} devices! ({} on {})\n", devices, strategy, kind == DeviceKind::Cuda ? "cuda" : "cpu");
}

std::string shapes_of_step(const NetPlan& plan, const StepStats& st, int64_t batch) {
  std::string out;
  for (std::size_t i = 0; i < st.workers.size(); ++i) {
    const WorkerStats& w = st.workers[i];
    const std::string who = fmt::format("worker {}, {}", i, w.device);
    if (w.samples <= 0) {
      out += fmt::format("    no piece ({})\n", who);
      continue;
    }
    Shape in = plan.input, outs = plan.output;
    if (st.staged && w.layer_begin < w.layer_end && static_cast<std::size_t>(w.layer_end) <= plan.layers.size()) {
      in = plan.layers[static_cast<std::size_t>(w.layer_begin)].in;
      outs = plan.layers[static_cast<std::size_t>(w.layer_end - 1)].out;
      out += fmt::format("    In Model: input size {} output size {}  ({}, layers {}-{})\n", batch_shape(w.samples, in),
                         batch_shape(w.samples, outs), who, w.layer_begin, w.layer_end - 1);
      continue;
    }
    out += fmt::format("    In Model: input size {} output size {}  ({})\n", batch_shape(w.samples, in),
                       batch_shape(w.samples, outs), who);
  }
  out += fmt::format("Outside: input size {} output size {}\n", batch_shape(batch, plan.input),
                     batch_shape(batch, plan.output));
  return out;
}

}  // namespace pb
