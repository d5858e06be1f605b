// The memory estimate and the check against device memory / RAM.
#include "engine/memory_estimate.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include "engine/bf16.h"
#include "engine/check.h"
#include "engine/graph_stage.h"
#include "engine/model.h"
#include "engine/process.h"

namespace pb {

namespace {
double numel_d(const Shape& s) {
  double n = 1;
  for (int64_t d : s) n *= static_cast<double>(d);
  return n;
}
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
}  // namespace

MemoryEstimate estimate_memory(const NetPlan& plan, int64_t global_batch) {
  MemoryEstimate m;
  const double f = sizeof(float), b = static_cast<double>(global_batch);
  double largest_out = -1;
  double act = numel_d(plan.input);  // the input batch stays resident
  for (const LayerPlan& l : plan.layers) {
    m.params += (numel_d(l.weight_shape) * (l.weight_shape.empty() ? 0 : 1) + numel_d(l.bias_shape) * (l.bias_shape.empty() ? 0 : 1)) * f;
    const double out = numel_d(l.out);
    act += out;
    if (out > largest_out) {
      largest_out = out;
      m.largest = fmt::format("layer {} ({}), output {}", l.index, layer_type_name(l.spec.type), shape_str(l.out));
    }
  }
  m.workspace = im2col_workspace(plan.layers);
  m.grads_and_moments = 3 * m.params;
  m.activations = act * b * f;
  return m;
}

SequentialBuffers sequential_buffers(const NetPlan& net, int begin, int end, int64_t n, bool bf16) {
  SequentialBuffers s;
  if (n <= 0 || begin >= end) return s;
  if (is_graph_stage(net, begin, end)) {
    // bf16: the outputs, the rounded entries and the pool in bf16, the exits widened to fp32, the
    // output's gradient rounded (model_graph_bf16.cpp).
    const GraphBuffers g = graph_buffers(net, begin, end, bf16);
    const StageBoundary sb = stage_boundary(net, begin, end);
    int64_t entries = 0, exits = 0;
    for (int e : sb.entries) entries += numel_of(e == kNetInput ? net.input : net.layers[e].out);
    for (int e : sb.exits) exits += numel_of(net.layers[e].out);
    const int64_t out = numel_of(net.layers[end - 1].out);
    const int64_t f = sizeof(float), h = sizeof(Bf16);
    int64_t params = 0;
    for (int i = begin; i < end; ++i) params += net.layers[i].weight_numel + net.layers[i].bias_numel;
    s.activations = bf16 ? h * (g.activations + entries) * n + f * exits * n : f * g.activations * n;
    s.scratch_parts = {bf16 ? h * out * n : 0, 0};
    for (int64_t v : plan_graph_backward(net, begin, end, bf16).pool) s.scratch_parts.push_back((bf16 ? h : f) * v * n);
    for (int64_t b : s.scratch_parts) s.scratch += b;
    s.param_copy = bf16 ? h * params : 0;
    int64_t weighted = 0;
    for (int i = begin; i < end; ++i)
      if (net.layers[i].weight_numel + net.layers[i].bias_numel > 0) weighted += numel_of(net.layers[i].out);
    s.kept = (bf16 ? h : f) * weighted * n;
    return s;
  }
  int64_t keep = 0, widest_in = 0, params = 0, weighted = 0;
  bool owned = false;
  for (int i = begin; i < end; ++i) {
    const LayerPlan& l = net.layers[i];
    const LayerType t = l.spec.type;
    const bool alias = t == LayerType::Flatten || (t == LayerType::ReLU && (owned || bf16));
    if (!alias) keep += numel_of(l.out);
    owned = owned || !alias;
    widest_in = std::max(widest_in, numel_of(l.in));
    params += l.weight_numel + l.bias_numel;
    if (l.weight_numel + l.bias_numel > 0) weighted += numel_of(l.out);
  }
  const int64_t in = numel_of(net.layers[begin].in), out = numel_of(net.layers[end - 1].out);
  const int64_t f = sizeof(float), h = sizeof(Bf16);
  s.activations = bf16 ? h * (keep + in) * n + f * out * n : f * keep * n;
  const int64_t pair = bf16 ? h * std::max(out, widest_in) * n : f * widest_in * n;  // each of the two
  s.scratch_parts = {pair, pair};
  s.scratch = 2 * pair;
  s.param_copy = bf16 ? h * params : 0;
  s.kept = (bf16 ? h : f) * weighted * n;
  return s;
}

int64_t shared_scratch(const std::vector<SequentialBuffers>& stages) {
  std::vector<int64_t> most;
  for (const SequentialBuffers& s : stages) {
    if (most.size() < s.scratch_parts.size()) most.resize(s.scratch_parts.size(), 0);
    for (std::size_t k = 0; k < s.scratch_parts.size(); ++k) most[k] = std::max(most[k], s.scratch_parts[k]);
  }
  int64_t total = 0;
  for (int64_t b : most) total += b;
  return total;
}

double im2col_workspace(const std::vector<LayerPlan>& layers) {
  double w = 0;
  for (const LayerPlan& l : layers)
    if (l.spec.type == LayerType::Conv2d)
      w = std::max(w, static_cast<double>(l.in[0]) * l.spec.kernel_h * l.spec.kernel_w * numel_d(l.out) /
                          static_cast<double>(l.out[0]) * sizeof(float));
  return w;
}

std::size_t resident_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) {
      std::istringstream ls(line.substr(6));
      unsigned long long kb = 0;
      if (ls >> kb) return static_cast<std::size_t>(kb) * 1024;
    }
  return 0;
}

MemoryUse measure_memory(const std::vector<Device>& devices) {
  MemoryUse best;
  if (devices.empty()) return best;
  if (devices.front().kind == DeviceKind::Cpu) {
    double held = 0;
    for (const Device& d : devices) {
      const Allocator& a = allocator_for(d);
      best.tensors += static_cast<double>(a.at_peak_bytes(MemoryPool::Tensors));
      best.workspace += static_cast<double>(a.at_peak_bytes(MemoryPool::Workspace));
      held += static_cast<double>(a.current_bytes());
    }
    best.runtime = std::max(0.0, static_cast<double>(resident_bytes()) - held);
    return best;
  }
  for (const Device& d : devices) {
    const Allocator& a = allocator_for(d);
    if (a.peak_bytes() == 0) continue;  // a GPU this process does not use: no context to make there
    MemoryUse m;
    m.tensors = static_cast<double>(a.at_peak_bytes(MemoryPool::Tensors));
    m.workspace = static_cast<double>(a.at_peak_bytes(MemoryPool::Workspace));
    // This process's use beyond its allocator (other processes on the GPU are not counted).
    m.runtime = std::max(0.0, static_cast<double>(a.process_used_bytes()) - static_cast<double>(a.current_bytes()));
    if (m.total() > best.total()) best = m;
  }
  return best;
}

std::size_t available_ram_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  unsigned long long kb = 0;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    if (ls >> key >> kb && key == "MemAvailable:") return static_cast<std::size_t>(kb) * 1024;
  }
  return 0;
}

void check_memory_fits(const NetPlan& plan, int64_t global_batch, DeviceKind kind, int devices,
                       double limit_bytes, const std::string& what) {
  const MemoryEstimate m = estimate_memory(plan, global_batch);
  double have = 0;
  std::string source;
  if (kind == DeviceKind::Cpu) {
    have = limit_bytes > 0 ? limit_bytes : static_cast<double>(available_ram_bytes());
    source = limit_bytes > 0 ? "--memory-limit" : "available RAM (MemAvailable)";
  } else {
    const SystemInfo info = system_info();
    const int gpus = std::min<int>(devices, static_cast<int>(info.gpus.size()));
    for (int i = 0; i < gpus; ++i)
      have += limit_bytes > 0 ? limit_bytes : static_cast<double>(info.gpus[i].total_bytes);
    source = fmt::format("{} GPU(s){}", gpus, limit_bytes > 0 ? " at --memory-limit each" : "");
  }
  // Every rank of a job must decide alike (a configuration skipped on one rank alone would leave
  // the others waiting in a collective): all use the smallest capacity any rank sees.
  if (multi_process()) have = -world_max(-have);
  if (have <= 0 || m.total() <= have) return;
  throw UsageError(fmt::format(
      "{} needs at least {:.3g} GiB at global batch {} (parameters {:.3g}, gradients and Adam moments {:.3g}, "
      "activations {:.3g}, workspace {:.3g}; largest {}), device has {:.3g} GiB ({})",
      what, m.total() / kGiB, global_batch, m.params / kGiB, m.grads_and_moments / kGiB, m.activations / kGiB,
      m.workspace / kGiB, m.largest, have / kGiB, source));
}

}  // namespace pb
