// Flag parsing and the flags shared by the training commands.
#include "bench/cli.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>

#include <fmt/ranges.h>

#include "engine/check.h"
#include "engine/process.h"
#include "engine/tensor.h"
#include "plan/check.h"
#include "strategies/plan_gen.h"
#include "strategies/registry.h"
#include "strategies/sweep.h"

namespace pb {

std::string strategy_names_help() {
  return fmt::format("{} ({}, {} and {} by a member: dp<D>xpp<P>, dp<D>xtp<T>, hsdp<R>x<S>, e.g. dp2xpp2)",
                     fmt::join(strategy_names(), ", "), kHybridFamily, kDpTpFamily, kHsdpFamily);
}

std::vector<Flag> training_flags() {
  return {
      {"workload", "NAME|FILE", "great_net, resnet, unet, linear, or a .json net description", "great_net"},
      {"image", "PIXELS", "great_net, resnet, unet: image height and width (default: 512 on GPU, 96 on CPU)", ""},
      {"width", "SCALE", "great_net, resnet, unet: channel width scale, 1 = the seed's (ResNet-18's, the U-Net's) channels (default: 1 on GPU, 0.5 on CPU)", "",
       FlagType::Number},
      {"strategy", "NAME", "one of " + strategy_names_help(), "regular"},
      {"devices", "N", "workers (GPUs, or CPU worker threads)", "1"},
      {"device-kind", "KIND", "auto, cpu or cuda (auto: cuda when a GPU is present)", "auto"},
      {"oversubscribe", "", "allow more workers than GPUs (they then share GPUs)", ""},
      {"micro-batches", "M", "pipeline: micro-batches per step (default: min(4, global batch)); dp x pp: per replica (default: min(4, the smallest replica's piece))", ""},
      {"bucket-mb", "MB", "ddp: gradient bucket size in MiB", "25", FlagType::Number},
      {"balance", "L1,L2,..|time|seed", "mp/pipeline: layers per stage; time: balanced by per-layer time measured on the device; seed: the seed's 2-stage split of great_net after its 512-channel layer (default: balanced by FLOPs)", ""},
      {"schedule", "S", "pipeline: gpipe or 1f1b (selects the pipeline variant: pipeline, pipeline-1f1b)", ""},
      {"recompute", "", "pipeline: keep only stage inputs, recompute activations in backward (pipeline-recompute, ...)", ""},
      {"virtual-stages", "V", "pipeline-interleaved: model chunks per worker (the net in V x P stages), at least 2", "2"},
      {"precision", "P", "fp32, tf32 or bf16 (fp32 never uses TF32; bf16: autocast, fp32 master weights, docs/bf16.md)", "fp32"},
      {"threads", "N", "CPU threads per worker (0: share all cores among the workers)", "0"},
      {"layout", "L", "CUDA: the activation layout between consecutive convolutions, nchw or nhwc (channels_last: they and their gradients stay NHWC, filters go KRSC per call; docs/gpu.md)", "nchw"},
      {"conv-workspace-mib", "MIB", "CUDA: the most workspace a convolution algorithm may use (default: no cap, the fastest whose workspace the GPU can give, as PyTorch; docs/gpu.md)", ""},
      {"comm-timeout", "SECONDS", "MPI: end the job when a rank waits longer than this in one communication call (0: never)", "300", FlagType::Number},
      {"memory-limit", "GIB", "memory a configuration may use: in all on CPU, per GPU on CUDA (default: available RAM / GPU memory)", "", FlagType::Number},
      {"first-bucket-mb", "MB", "ddp: size of the first gradient bucket (the last layers') in MiB", "1", FlagType::Number},
      {"grad-average", "MODE", "ddp: global (the global batch mean, as every strategy) or local (torch DDP: mean of the ranks' local means)", "global"},
      {"reduce-dtype", "D", "fp32 or bf16: the dtype gradients are all-reduced / reduce-scattered in (dp, ddp, fsdp, zero2, hsdp, dp x pp, dp x tp; docs/bf16.md)", "fp32"},
      {"param-dtype", "D", "fp32 or bf16: the dtype fsdp, zero2 and hsdp all-gather parameters in (bf16 needs --precision bf16)", "fp32"},
      {"dp", "D", "dp x pp / dp x tp hybrids: D data-parallel replicas (with --pp: the strategy dp<D>xpp<P> on D*P devices)", ""},
      {"pp", "P", "dp x pp hybrids: P pipeline stages per replica", ""},
      {"tp", "T", "dp x tp hybrids: a T-way tensor-parallel group per replica (with --dp: the strategy dp<D>xtp<T> on D*T devices)", ""},
  };
}

std::shared_ptr<const Plan> user_plan(const Flags& f, const std::vector<std::string>& others) {
  if (!f.has("plan")) return nullptr;
  for (const std::string& o : others)
    if (f.has(o)) throw UsageError(fmt::format("--plan {} sets the strategy, workers, batch and micro-batches; --{} does not apply", f.str("plan"), o));
  Plan p = read_plan_file(f.str("plan"));
  const std::vector<PlanIssue> issues = validate_plan(p);
  // One line: the first issue, and where to see them all.
  if (!issues.empty())
    throw UsageError(fmt::format("--plan {}: refused: {}{}", f.str("plan"), issues.front().message,
                                 issues.size() == 1 ? std::string()
                                                    : fmt::format(" (and {} more issue(s): parbench plan --check {} lists them)",
                                                                  issues.size() - 1, f.str("plan"))));
  return std::make_shared<const Plan>(std::move(p));
}

StrategyOptions plan_file_options(const Flags& f, const std::shared_ptr<const Plan>& user) {
  StrategyOptions o = strategy_options(f, user->workers, user->batch);
  o.plan = user;
  o.plan_source = "--plan " + f.str("plan");
  o.micro_batches = user->micro_batches;
  o.cap_micro_batches = false;
  return o;
}

std::string shapes_digest(const std::vector<LayerSignature>& layers) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a, 64 bits
  auto mix = [&](const std::string& text) {
    for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  };
  for (const LayerSignature& l : layers)
    mix(fmt::format("{} {} {} {};", l.type, fmt::join(l.in, "x"), fmt::join(l.out, "x"), l.params));
  return fmt::format("{:016x}", h);
}

std::vector<std::pair<std::string, std::string>> plan_identity(const Flags& f, const NetSpec& spec, const NetPlan& net) {
  std::vector<LayerSignature> layers;
  for (const LayerPlan& l : net.layers)
    layers.push_back({layer_type_name(l.spec.type), l.in, l.out, l.weight_numel + l.bias_numel});
  return {{"workload", spec.name},
          {"input", shape_str(net.input)},
          {"layers", std::to_string(net.layers.size())},
          {"params", std::to_string(net.param_count)},
          {"shapes", shapes_digest(layers)},
          {"precision", f.str("precision")},
          {"reduce_dtype", dtype_label(parse_dtype_label(f.str("reduce-dtype"), "--reduce-dtype"))},
          {"param_dtype", dtype_label(parse_dtype_label(f.str("param-dtype"), "--param-dtype"))}};
}

void check_plan_identity(const Plan& p, const std::vector<std::pair<std::string, std::string>>& want,
                         const std::string& source) {
  static const std::set<std::string> known = {"workload", "input", "layers", "params", "shapes", "precision",
                                              "reduce_dtype", "param_dtype"};
  if (p.identity.empty())
    throw UsageError(fmt::format("{}: the plan has no 'identity' (the workload, shape and dtypes it was made for); make it "
                                 "again with `parbench plan --format json` and this run's flags",
                                 source));
  std::map<std::string, std::string> has;
  for (const auto& [k, v] : p.identity) {
    if (!known.count(k))
      throw UsageError(fmt::format("{}: unknown identity field '{}' (known: {})", source, k, fmt::join(known, ", ")));
    has[k] = v;
  }
  for (const auto& [k, v] : want) {
    const auto it = has.find(k);
    if (it == has.end())
      throw UsageError(fmt::format("{}: the plan's identity has no '{}' (this run: {}); make it again with `parbench plan "
                                   "--format json`",
                                   source, k, v));
    if (it->second != v)
      throw UsageError(fmt::format("{}: made for {} {}, this run has {} {}{}: make the plan again with this run's flags "
                                   "(parbench plan --format json)",
                                   source, k, it->second, k, v,
                                   k == "shapes" ? " (a layer's type, shapes or parameters differ)" : ""));
  }
}

std::shared_ptr<const Plan> run_plan_file(const Flags& f, const NetSpec& spec, const NetPlan& net) {
  const std::shared_ptr<const Plan> user =
      user_plan(f, {"strategies", "devices", "micro-batches", "schedule", "recompute", "dp", "pp", "tp", "scaling"});
  if (!user) return user;
  check_plan_identity(*user, plan_identity(f, spec, net), "--plan " + f.str("plan"));
  if (f.has("batch") && f.integer("batch") != user->batch)
    throw UsageError(fmt::format("--plan {} is a step of batch {}; --batch {} does not apply", f.str("plan"), user->batch,
                                 f.integer("batch")));
  strategy_info(user->strategy);  // names the known ones when it is none
  const StrategyOptions o = plan_file_options(f, user);
  // --balance time splits by the device's times, known once a run sets up: checked then.
  if (o.balance_by != StrategyOptions::BalanceBy::Time) check_plan_file(*user, net, o, o.plan_source);
  return user;
}

WorkloadOptions workload_options(const Flags& f, DeviceKind kind) {
  const std::string workload = f.str("workload");
  if (!scaled_workload(workload))
    for (const char* flag : {"image", "width"})
      if (f.has(flag))
        throw UsageError(fmt::format("--{} sizes great_net, resnet and unet only; workload '{}' has a fixed shape (leave --{} out)", flag,
                                     workload, flag));
  const bool gpu = kind == DeviceKind::Cuda;
  WorkloadOptions o;
  o.image = f.has("image") ? f.integer("image") : (gpu ? 512 : 96);
  o.width = f.has("width") ? f.number("width") : (gpu ? 1.0 : 0.5);
  return o;
}

DeviceKind device_kind(const std::string& s) {
  if (s == "cpu") return DeviceKind::Cpu;
  if (s == "cuda") {
    if (cuda_device_count() == 0)
      throw UsageError(fmt::format("--device-kind cuda, but no CUDA device is available ({})", system_info().cuda_note));
    return DeviceKind::Cuda;
  }
  if (s == "auto") return cuda_device_count() > 0 ? DeviceKind::Cuda : DeviceKind::Cpu;
  throw UsageError(fmt::format("--device-kind expects auto, cpu or cuda, got '{}'", s));
}

int micro_batches(const Flags& f, int64_t global_batch) {
  if (!f.has("micro-batches")) return static_cast<int>(std::min<int64_t>(kDefaultMicroBatches, global_batch));
  const int64_t m = f.integer("micro-batches");
  if (m < 1) throw UsageError(fmt::format("--micro-batches must be at least 1, got {}", m));
  return static_cast<int>(m);
}

Schedule pipeline_schedule(const std::string& s) {
  Schedule sc = Schedule::GPipe;
  if (parse_schedule(s, &sc)) return sc;
  throw UsageError(fmt::format("--schedule expects {}, got '{}'", fmt::join(schedule_names(), " or "), s));
}

HybridShape hybrid_shape(const Flags& f) {
  HybridShape h;
  for (const auto& [flag, what, into] : {std::tuple{"dp", "replicas", &h.dp}, {"pp", "stages", &h.pp}, {"tp", "ways", &h.tp}}) {
    if (!f.has(flag)) continue;
    const int64_t v = f.integer(flag);
    if (v < 1 || v > 1 << 16) throw UsageError(fmt::format("--{} must be a positive number of {}, got {}", flag, what, v));
    *into = static_cast<int>(v);
  }
  if (h.pp > 0 && h.tp > 0) throw UsageError("--pp and --tp shape different hybrids (dp x pp, dp x tp): give one");
  // Their product is the device count: range-checked as a hybrid's name's factors are.
  if (h.dp > 0 && h.pp + h.tp > 0 && int64_t{h.dp} * (h.pp + h.tp) > kMaxHybridDevices)
    throw UsageError(fmt::format("--dp {} x --{} {} = {} devices, more than the {} a run may have", h.dp, h.pp ? "pp" : "tp",
                                 h.pp + h.tp, int64_t{h.dp} * (h.pp + h.tp), kMaxHybridDevices));
  return h;
}

int worker_count(const Flags& f) {
  if (f.has("devices")) return static_cast<int>(f.integer("devices"));
  if (multi_process()) return process().size;
  const HybridShape h = hybrid_shape(f);
  if (h.dp > 0 && h.pp + h.tp > 0) return h.dp * (h.pp + h.tp);
  if (f.has("strategy"))
    if (const auto spec = parse_strategy(f.str("strategy")); spec && spec->member()) return spec->devices();
  return static_cast<int>(f.integer("devices"));
}

std::string strategy_name(const Flags& f, const std::string& given, bool strict) {
  std::string name = given;
  StrategySpec spec = parse_strategy(name).value_or(StrategySpec{});
  if (strict) {
    const HybridShape h = hybrid_shape(f);
    const bool tp = h.tp > 0 || spec.entry == kDpTpFamily;
    const std::string family = tp ? kDpTpFamily : kHybridFamily;
    const bool member = spec.member_of(family);
    const int dp = spec.first, pp = spec.second;
    const char* side = tp ? "tp" : "pp";
    if (h.given()) {
      if (!member && name != family && f.has("strategy"))
        throw UsageError(fmt::format("--dp/--{} shape a {} hybrid, not {}: leave --strategy out or name {}", side,
                                     tp ? "dp x tp" : "dp x pp", name, family));
      const int other = tp ? h.tp : h.pp;
      if (h.dp == 0 || other == 0) throw UsageError(fmt::format("--dp and --{} name one hybrid together: give both", side));
      if (member && (dp != h.dp || pp != other))
        throw UsageError(fmt::format("--strategy {} disagrees with --dp {} --{} {}", name, h.dp, side, other));
      name = tp ? dptp_name(h.dp, other) : hybrid_name(h.dp, other, member ? spec.schedule : Schedule::GPipe, member && spec.recompute);
      spec = parse_strategy(name).value_or(StrategySpec{});
    } else if (name == family) {
      throw UsageError(fmt::format("--strategy {}: pick one member, dp<D>x{}<{}> (e.g. dp2x{}2), or give --dp and --{}",
                                   name, side, tp ? "T" : "P", side, side));
    }
  }
  Schedule schedule = spec.schedule;
  if (spec.member_of(kHybridFamily)) {
    if (f.has("schedule")) schedule = pipeline_schedule(f.str("schedule"));
    return hybrid_name(spec.first, spec.second, schedule, spec.recompute || f.on("recompute"));
  }
  if (!spec.fill_drain) {
    if (strict && (f.has("schedule") || f.on("recompute")))
      throw UsageError(name == pipeline_name(Schedule::ZeroBubble, false)
                           ? fmt::format("--{}: {} is a schedule of its own, without recompute; leave --{} out",
                                         f.has("schedule") ? "schedule" : "recompute", name,
                                         f.has("schedule") ? "schedule" : "recompute")
                           : fmt::format("--{} applies to the pipeline strategies only, not {}",
                                         f.has("schedule") ? "schedule" : "recompute", name));
    return name;
  }
  if (f.has("schedule")) schedule = pipeline_schedule(f.str("schedule"));
  return pipeline_name(schedule, spec.recompute || f.on("recompute"));
}

std::optional<std::size_t> conv_workspace_cap(const Flags& f) {
  // PARBENCH_CONV_WORKSPACE_MIB is not read: refused, so a script setting it does not run uncapped unawares.
  if (const char* env = std::getenv("PARBENCH_CONV_WORKSPACE_MIB"); env != nullptr && *env != '\0')
    throw UsageError(fmt::format("PARBENCH_CONV_WORKSPACE_MIB={} is not read: pass --conv-workspace-mib {} instead "
                                 "(default: no cap, the fastest algorithm whose workspace fits)", env, env));
  if (!f.has("conv-workspace-mib")) return std::nullopt;
  const std::string v = f.str("conv-workspace-mib");
  constexpr int64_t kMax = int64_t(1) << 30;  // MiB: 2^50 bytes, beyond any GPU
  if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos || v.size() > 10 || std::stoll(v) > kMax)
    throw UsageError(fmt::format("--conv-workspace-mib expects a whole number of MiB from 0 to {}, got '{}'", kMax, v));
  return static_cast<std::size_t>(std::stoll(v)) << 20;
}

bool conv_layout_nhwc(const Flags& f, DeviceKind kind) {
  const std::string v = f.str("layout");
  if (v != "nchw" && v != "nhwc") throw UsageError(fmt::format("--layout expects nchw or nhwc, got '{}'", v));
  if (v == "nchw") return false;
  if (kind != DeviceKind::Cuda)
    throw UsageError("--layout nhwc is a layout of the CUDA convolutions, and this run is on the CPU (whose backend "
                     "keeps oneDNN's blocked layout between convolutions on its own: PARBENCH_CPU_BLOCKED)");
  return true;
}

StrategyOptions strategy_options(const Flags& f, int devices, int64_t global_batch) {
  StrategyOptions o;
  o.devices = devices;
  o.kind = device_kind(f.str("device-kind"));
  o.oversubscribe = f.on("oversubscribe");
  o.micro_batches = micro_batches(f, global_batch);
  o.cap_micro_batches = !f.has("micro-batches");
  o.virtual_stages = static_cast<int>(f.integer("virtual-stages"));
  // Sizes become byte counts: beyond 2^20 MiB (1 TiB) a cast would overflow, and no bucket is so large.
  constexpr double kMaxMib = 1 << 20;
  const double mb = f.number("bucket-mb");
  if (!(mb > 0 && mb <= kMaxMib))
    throw UsageError(fmt::format("--bucket-mb must be positive, at most {}, got {}", kMaxMib, mb));
  o.bucket_bytes = static_cast<std::size_t>(mb * (1 << 20));
  const double first_mb = f.number("first-bucket-mb");
  if (!(first_mb > 0 && first_mb <= kMaxMib))
    throw UsageError(fmt::format("--first-bucket-mb must be positive, at most {}, got {}", kMaxMib, first_mb));
  o.first_bucket_bytes = static_cast<std::size_t>(first_mb * (1 << 20));
  const std::string avg = f.str("grad-average");
  if (avg != "global" && avg != "local")
    throw UsageError(fmt::format("--grad-average expects global or local, got '{}'", avg));
  o.grad_average = avg == "local" ? StrategyOptions::GradAverage::Local : StrategyOptions::GradAverage::Global;
  o.profile_batch = global_batch;
  if (f.has("balance")) {
    const std::string b = f.str("balance");
    if (b == "time") {
      o.balance_by = StrategyOptions::BalanceBy::Time;
    } else if (b == "seed") {
      if (f.str("workload") != "great_net")
        throw UsageError(fmt::format("--balance seed is the seed's split of great_net (after its 512-channel layer); "
                                     "workload '{}' has none: use --balance time, a list of layers per stage, or the "
                                     "default (FLOPs)", f.str("workload")));
      o.balance_by = StrategyOptions::BalanceBy::Seed;
      o.seed_first_stage = kGreatNetSeedFirstStage;
    } else {
      if (b.empty() || b.find_first_not_of("0123456789,-") != std::string::npos)
        throw UsageError(fmt::format("--balance expects layers per stage (e.g. 14,14), time or seed, got '{}'", b));
      for (int64_t v : f.int_list("balance")) o.balance.push_back(static_cast<int>(v));
    }
  }
  if (f.has("schedule")) o.schedule = pipeline_schedule(f.str("schedule"));
  o.recompute = f.on("recompute");
  o.backend.precision = parse_precision(f.str("precision"));
  o.backend.conv_workspace_cap_bytes = conv_workspace_cap(f);
  o.backend.cuda_nhwc = conv_layout_nhwc(f, o.kind);
  o.reduce_dtype = parse_dtype_label(f.str("reduce-dtype"), "--reduce-dtype");
  o.param_dtype = parse_dtype_label(f.str("param-dtype"), "--param-dtype");
  const double comm_timeout = f.number("comm-timeout");
  if (comm_timeout < 0) throw UsageError(fmt::format("--comm-timeout must be >= 0 seconds, got {}", comm_timeout));
  set_comm_timeout(comm_timeout);
  if (f.has("memory-limit")) {
    const double gib = f.number("memory-limit");
    if (!(gib > 0)) throw UsageError(fmt::format("--memory-limit must be a positive number of GiB, got {}", gib));
    o.backend.memory_limit_bytes = gib * (1u << 30);
  }
  const int64_t threads = f.integer("threads");
  if (threads < 0) throw UsageError(fmt::format("--threads must be >= 0, got {}", threads));
  if (threads == 0 && o.kind == DeviceKind::Cpu) {
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    o.backend.threads = std::max(1, cores / std::max(1, devices));
  } else {
    o.backend.threads = static_cast<int>(threads);
  }
  return o;
}

void check_benchmark_flags(const std::vector<std::string>& args) {
  static const std::set<std::string> bools = {"benchmark_list_tests", "benchmark_enable_random_interleaving",
                                              "benchmark_report_aggregates_only", "benchmark_display_aggregates_only",
                                              "benchmark_counters_tabular"};
  static const std::set<std::string> truth = {"true", "false", "1", "0", "yes", "no", "t", "f", "y", "n"};
  for (const std::string& a : args) {
    const std::size_t eq = a.find('=');
    const std::string name = a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    const bool has_value = eq != std::string::npos;
    const std::string v = has_value ? a.substr(eq + 1) : "";
    auto bad = [&](const std::string& expected) {
      throw UsageError(fmt::format("flag --{} expects {}, got '{}'", name, expected, has_value ? v : a));
    };
    auto number = [&](double& out) {
      std::size_t used = 0;
      try {
        out = std::stod(v, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      return has_value && used == v.size() && used > 0 && std::isfinite(out);
    };
    double x = 0;
    if (name == "benchmark_repetitions") {
      if (!number(x) || x != std::floor(x) || x < 1 || x > 1e6) bad("=N, a whole number of repetitions from 1 to 1000000");
    } else if (name == "benchmark_format" || name == "benchmark_out_format") {
      if (v != "console" && v != "json" && v != "csv") bad("=console, =json or =csv");
    } else if (name == "benchmark_min_time" || name == "benchmark_min_warmup_time") {
      if (!number(x) || x < 0) bad("=SECONDS, a number >= 0");
    } else if (name == "benchmark_color") {
      if (v != "auto" && !truth.count(v)) bad("=auto, =true or =false");
    } else if (bools.count(name)) {
      if (has_value && !truth.count(v)) bad("no value, =true or =false");
    } else if (name == "benchmark_out") {
      if (v.empty()) bad("=FILE");
      const std::filesystem::path parent = std::filesystem::path(v).parent_path();
      std::error_code ec;
      if (std::filesystem::is_directory(v, ec)) bad("=FILE, not a directory");
      if (!parent.empty() && !std::filesystem::is_directory(parent, ec))
        throw UsageError(fmt::format("flag --benchmark_out={}: folder {} does not exist", v, parent.string()));
    }
  }
}

std::string workload_sizing(const Flags& f, const NetSpec& net) {
  if (scaled_workload(net.name))
    return fmt::format("{} (--image {}, --width {}, --batch)", net.name, f.has("image") ? f.str("image") : "default",
                       f.has("width") ? f.str("width") : "default");
  return fmt::format("workload {} (--workload {}, --batch)", net.name, f.str("workload"));
}

}  // namespace pb
