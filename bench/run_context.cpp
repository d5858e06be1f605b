// The JSON context of `parbench run`: machine facts and everything that defines the work, under
// the names of reports/schema.h.
#include <algorithm>
#include <cstdlib>

#include <fmt/ranges.h>

#include "bench/cli.h"
#include "bench/run.h"
#include "engine/check.h"
#include "engine/conv_policy.h"
#include "engine/layer_profile.h"
#include "engine/cpu_model.h"
#include "engine/process.h"
#include "reports/schema.h"

namespace pb {

namespace {

namespace ctx = reports::schema::context;

void put(const reports::schema::Key& k, const std::string& value) { benchmark::AddCustomContext(k.name, value); }

std::string env_or_unset(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : "unset";
}

}  // namespace

std::vector<std::pair<std::string, std::string>> system_context(DeviceKind kind) {
  std::vector<std::pair<std::string, std::string>> out;
  auto put = [&](const reports::schema::Key& k, const std::string& value) { out.emplace_back(k.name, value); };
  const SystemInfo info = system_info();
  put(ctx::device_kind, kind == DeviceKind::Cuda ? "cuda" : "cpu");
  put(ctx::cpu_model, cpu_model_name());
  put(ctx::cpu_threads, std::to_string(info.cpu_threads));
  put(ctx::conv_backend,
#ifdef PARBENCH_HAVE_DNNL
      "oneDNN"
#else
      "im2col+gemm"
#endif
  );
  put(ctx::gpu_count, std::to_string(info.gpus.size()));
  // The backends read these at setup; they change which kernels run.
  put(ctx::conv_search, env_or_unset(ctx::conv_search.name));
  put(ctx::cpu_winograd, env_or_unset(ctx::cpu_winograd.name));
  put(ctx::cudnn_api, env_or_unset(ctx::cudnn_api.name));
  if (!info.cuda_built) return out;
  std::vector<std::string> names;
  for (const GpuInfo& g : info.gpus)
    names.push_back(fmt::format("{} (cc {}.{}, {:.0f} GiB)", g.name, g.cc_major, g.cc_minor, g.total_bytes / double(1u << 30)));
  put(ctx::gpu_names, fmt::format("{}", fmt::join(names, "; ")));
  // Versions as device.h documents them: driver/runtime 1000*major + 10*minor, cuDNN and
  // NCCL 10000*major + 100*minor + patch.
  auto mm = [](int v) { return v > 0 ? fmt::format("{}.{}", v / 1000, v % 1000 / 10) : std::string("none"); };
  auto mmp = [](int v) { return v > 0 ? fmt::format("{}.{}.{}", v / 10000, v % 10000 / 100, v % 100) : std::string("none"); };
  put(ctx::cuda_driver, mm(info.cuda_driver_version));
  put(ctx::cuda_runtime, mm(info.cuda_runtime_version));
  put(ctx::cudnn, mmp(info.cudnn_version));
  put(ctx::nccl, info.nccl_built ? mmp(info.nccl_version) : "not built");
  return out;
}

namespace {
void add_system_context(DeviceKind kind) {
  for (const auto& [k, v] : system_context(kind)) benchmark::AddCustomContext(k, v);
}
}  // namespace

namespace {
// Each convolution layer alone on a fresh backend of the run's options, at the one-device batch:
// its workspace and what cuDNN's search chose per direction (schema conv_layers), on device 0,
// freed before the sweep. Not on CPU: oneDNN's primitive caches would outlive the probe and
// change what the configurations after it allocate.
std::string conv_layer_choices(const RunPlan& p, const Sweep& sw) {
  if (p.kind != DeviceKind::Cuda) return "n/a";
  if (p.configs.empty()) return "";
  const BackendOptions bo = p.configs.front().options.backend;
  const Device dev{DeviceKind::Cuda, 0};
  std::vector<LayerConvChoice> choices;
  try {
    choices = layer_conv_choices(sw.plan, p.batch, [&] { return make_backend(dev, bo); });
  } catch (const Error& e) {  // the sweep reports its own failures; the context says why this one is missing
    return fmt::format("not measured: {}", e.what());
  }
  std::vector<std::string> out;
  for (std::size_t i = 0; i < choices.size(); ++i) {
    const LayerType t = sw.plan.layers[i].spec.type;
    if (t != LayerType::Conv2d && t != LayerType::ConvTranspose2d) continue;
    const LayerConvChoice& c = choices[i];
    out.push_back(fmt::format("layer {}: workspace {} B{}", i, c.workspace_bytes,
                              c.algorithms.empty() ? std::string() : "; " + c.algorithms));
  }
  return fmt::format("{}", fmt::join(out, " / "));
}
}  // namespace

void add_run_context(const RunPlan& p, const Flags& f, const Sweep& sw) {
  add_system_context(p.kind);
  put(ctx::conv_workspace_policy,
      p.kind == DeviceKind::Cuda ? conv_workspace_policy_name(conv_workspace_cap(f)) : "n/a");
  put(ctx::conv_layout, p.kind == DeviceKind::Cuda ? f.str("layout") : "n/a");
  if (process().rank == 0) put(ctx::conv_layers, conv_layer_choices(p, sw));
  // Debian builds Google Benchmark without NDEBUG, so its "library_build_type" says debug; the
  // times are parbench's own (SetIterationTime), which that build type does not touch.
  put(ctx::timing, ctx::timing.meaning);
  put(ctx::parbench_version, PARBENCH_VERSION);
  put(ctx::parbench_commit, PARBENCH_GIT_COMMIT);
  put(ctx::precision, f.str("precision"));
  put(ctx::scaling, p.scaling);
  put(ctx::batch, std::to_string(p.batch));
  put(ctx::batch_meaning, p.scaling == "weak" ? "per device" : "global");
  put(ctx::workload, sw.net.name);
  put(ctx::workload_source, p.workload);
  if (scaled_workload(sw.net.name)) put(ctx::workload_params, fmt::format("image {}, width {:g}", p.wo.image, p.wo.width));
  put(ctx::input_shape, shape_str(sw.plan.input));
  put(ctx::param_count, std::to_string(sw.plan.param_count));
  put(ctx::forward_flops_per_sample, fmt::format("{:.17g}", sw.plan.forward_flops));
  put(ctx::strategies, fmt::format("{}", fmt::join(p.strategies, ",")));
  // Registry facts the reports need without linking the strategies: display order, and which
  // strategy is the one-device reference.
  std::vector<std::string> order, single;
  for (const StrategyInfo& i : strategy_infos()) {
    if (i.name == kHybridFamily || i.name == kDpTpFamily || i.name == kHsdpFamily) {  // a family: its members in the run, in sweep order
      for (const Config& c : p.configs)
        if (strategy_info(c.strategy).name == i.name && std::find(order.begin(), order.end(), c.strategy) == order.end())
          order.push_back(c.strategy);
      continue;
    }
    order.push_back(i.name);
    if (i.single_device) single.push_back(i.name);
  }
  put(ctx::strategy_order, fmt::format("{}", fmt::join(order, ",")));
  put(ctx::single_device_strategies, fmt::format("{}", fmt::join(single, ",")));
  put(ctx::device_counts, fmt::format("{}", fmt::join(p.device_counts, ",")));
  put(ctx::warmup, std::to_string(sw.warmup));
  put(ctx::iterations, p.iterations ? std::to_string(p.iterations) : "auto");
  put(ctx::threads_per_worker, f.str("threads") == "0" ? "auto" : f.str("threads"));
  put(ctx::micro_batches, f.has("micro-batches") ? f.str("micro-batches") : "min(4, global batch)");
  put(ctx::bucket_mb, f.str("bucket-mb"));
  if (f.has("balance")) put(ctx::balance, f.str("balance"));
  put(ctx::oversubscribe, f.on("oversubscribe") ? "true" : "false");
  put(ctx::seed, std::to_string(sw.seed));
  put(ctx::world_size, std::to_string(process().size));  // processes (MPI ranks); 1 without MPI
  put(ctx::hosts, fmt::format("{}", fmt::join(process().hosts, ",")));  // per rank
  put(ctx::schedule, f.has("schedule") ? f.str("schedule") : "per strategy");
  put(ctx::recompute, f.on("recompute") ? "true" : "per strategy");
  put(ctx::first_bucket_mb, f.str("first-bucket-mb"));
  if (f.str("grad-average") != "global") put(ctx::grad_average, f.str("grad-average"));  // the default is unnamed
  // Absent = fp32: runs from before the flags compare with fp32 ones.
  if (f.str("reduce-dtype") != "fp32") put(ctx::reduce_dtype, f.str("reduce-dtype"));
  if (f.str("param-dtype") != "fp32") put(ctx::param_dtype, f.str("param-dtype"));
  if (f.integer("virtual-stages") != 2) put(ctx::virtual_stages, f.str("virtual-stages"));  // absent = the default, 2

  // The roofline behind mfu and the trace's fractions (bench/roofline.h); what warmup_s covers.
  if (sw.roofline.flops_per_s > 0) put(ctx::roofline_peak, fmt::format("{:.17g}", sw.roofline.flops_per_s));
  if (sw.roofline.bytes_per_s > 0) put(ctx::roofline_bandwidth, fmt::format("{:.17g}", sw.roofline.bytes_per_s));
  put(ctx::roofline_scope, sw.roofline.shared ? "shared" : "per device");
  put(ctx::roofline_source, sw.roofline.source);
  put(ctx::warmup_timing, reports::schema::counter::warmup_s.meaning);
}

}  // namespace pb
