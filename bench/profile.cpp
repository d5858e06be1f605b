// parbench profile: per-layer forward, backward-data and backward-weights times (steady and first
// call), algorithms and bytes of a workload's net on one device, at one or more batch sizes; a
// table and profile.json (the input of projections).
#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "bench/cli.h"
#include "bench/roofline.h"
#include "bench/run.h"
#include "engine/check.h"
#include "engine/conv_policy.h"
#include "engine/fsutil.h"
#include "engine/layer_profile.h"
#include "engine/memory_estimate.h"
#include "engine/model_detail.h"
#include "reports/schema.h"

namespace pb {

namespace {

namespace ctx = reports::schema::context;
using ojson = nlohmann::ordered_json;

std::string utc_now() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// A pass's algorithm for the table: up to its first " (" or ", " (JSON has it whole).
std::string short_algorithm(const std::string& a) {
  const std::size_t cut = std::min(a.find(" ("), a.find(", "));
  std::string s = a.substr(0, cut);
  return s.size() > 32 ? s.substr(0, 31) + "~" : s;
}

// FLOPs per sample of one pass of a layer: backward-data and backward-weights do the forward's
// multiply-adds again (a convolution's or linear layer's GEMM of the same size, a ReLU's
// element-wise pass), where the layer makes that call at all.
double pass_flops(const LayerPlan& l, int index, LayerPass pass) {
  switch (pass) {
    case LayerPass::Forward: return l.forward_flops;
    case LayerPass::BackwardData: return index > 0 ? l.forward_flops : 0.0;
    case LayerPass::BackwardWeights: return l.weight_numel > 0 ? l.forward_flops : 0.0;
  }
  return 0;
}

std::vector<Flag> profile_flags() {
  std::vector<Flag> flags;
  for (const Flag& fl : run_flags())
    if (fl.name == "workload" || fl.name == "image" || fl.name == "width" || fl.name == "device-kind" ||
        fl.name == "precision" || fl.name == "seed" || fl.name == "conv-workspace-mib" || fl.name == "layout" ||
        fl.name == "machine")
      flags.push_back(fl);
  flags.push_back({"device", "INDEX", "which device: the GPU's index on CUDA (CPU: the one CPU)", "0"});
  flags.push_back({"threads", "N", "CPU threads (0: all cores)", "0"});
  flags.push_back({"batch", "LIST", "batch sizes to profile, e.g. 1,2,4", "1"});
  flags.push_back({"warmup", "N", "untimed training steps per batch size first, the first-call step among them (run even at 0)", "2"});
  flags.push_back({"reps", "N", "timed repetitions per batch size; the table and JSON show their medians", "5"});
  flags.push_back({"out", "FILE", "where to write the profile JSON", "profile.json"});
  return flags;
}

// What `profile` was asked for, its flags checked.
struct ProfileArgs {
  DeviceKind kind = DeviceKind::Cpu;
  std::vector<int64_t> batches;  // ascending, each once
  int64_t warmup = 0, reps = 0, threads = 0, index = 0;
  std::string out_path;
};

ProfileArgs profile_args(const Flags& f) {
  if (!f.positional().empty()) throw UsageError(fmt::format("unexpected argument '{}'", f.positional()[0]));
  ProfileArgs a;
  a.kind = device_kind(f.str("device-kind"));
  a.batches = f.int_list("batch");
  if (a.batches.empty()) throw UsageError("--batch expects at least one batch size, e.g. 1,2,4");
  for (int64_t b : a.batches)
    if (b < 1) throw UsageError(fmt::format("--batch {}: every batch size must be at least 1, got {}", f.str("batch"), b));
  std::sort(a.batches.begin(), a.batches.end());
  a.batches.erase(std::unique(a.batches.begin(), a.batches.end()), a.batches.end());
  a.warmup = f.integer("warmup"), a.reps = f.integer("reps"), a.threads = f.integer("threads");
  a.index = f.integer("device");
  if (a.warmup < 0) throw UsageError(fmt::format("--warmup must be >= 0, got {}", a.warmup));
  if (a.reps < 1) throw UsageError(fmt::format("--reps must be at least 1, got {}", a.reps));
  if (a.threads < 0) throw UsageError(fmt::format("--threads must be >= 0, got {}", a.threads));
  const int devices_there = a.kind == DeviceKind::Cuda ? cuda_device_count() : 1;
  if (a.index < 0 || a.index >= devices_there)
    throw UsageError(fmt::format("--device {}: expected 0{}", a.index,
                                 devices_there > 1 ? fmt::format(" to {} ({} GPUs)", devices_there - 1, devices_there) : " (one device)"));
  a.out_path = f.str("out");
  if (a.out_path.empty() || std::filesystem::is_directory(a.out_path))
    throw UsageError(fmt::format("--out expects a file to write, got '{}'", a.out_path));
  return a;
}

constexpr double kMiB = 1024.0 * 1024.0;

// One batch size's table: every layer's steady and first-call times, bytes and roofline share,
// the whole passes, and the algorithm and workspace of each convolution's passes.
void print_profile(const std::string& net_name, const NetPlan& plan, const Device& dev, const Backend& be,
                   const NetProfile& p, int64_t reps, const std::vector<std::size_t>& workspace, const Roofline& roof,
                   int value_bytes) {
  const int L = static_cast<int>(plan.layers.size());
  fmt::print("\n{} on {} ({}), batch {}: median of {} repetitions, ms; first: the first step's call "
             "(plan, algorithm search, workspace growth)\n", net_name, dev.str(), be.name(), p.batch, reps);
  fmt::print("{:>5}  {:<7}  {:<18}  {:>10}  {:>12}  {:>9}  {:>9}  {:>9}  {:>9}  {:>9}  {:>9}  {:>9}  {:>10}  {:>7}\n", "layer",
             "type", "output", "params", "MFLOP/sample", "forward", "bwd-data", "bwd-wts", "1st fwd", "1st data",
             "1st wts", "act MiB", "wksp MiB", "roof %");
  LayerTimes sum;
  for (int i = 0; i < L; ++i) {
    const LayerPlan& l = plan.layers[i];
    const LayerTimes& t = p.layers[i];
    sum.forward_s += t.forward_s, sum.backward_data_s += t.backward_data_s, sum.backward_weights_s += t.backward_weights_s;
    const LayerTimes& first = p.first_call[i];
    // The layer's passes together against their rooflines; "!" below 10%, where a kernel is far off.
    double roof_s = 0;
    for (LayerPass pass : {LayerPass::Forward, LayerPass::BackwardData, LayerPass::BackwardWeights}) {
      const LayerWork w = layer_work(l, p.batch, pass, value_bytes, value_bytes);
      roof_s += roofline_time(w.flops, w.bytes, roof);
    }
    const std::optional<double> frac =
        roof.known() && t.total_s() > 0 && roof_s > 0 ? std::optional<double>(roof_s / t.total_s()) : std::nullopt;
    const std::string roof_cell = frac ? fmt::format("{:.1f}{}", 100 * *frac, *frac < 0.1 ? "!" : "") : "-";
    fmt::print("{:>5}  {:<7}  {:<18}  {:>10}  {:>12.4g}  {:>9.3f}  {:>9.3f}  {:>9.3f}  {:>9.3f}  {:>9.3f}  {:>9.3f}  {:>9.3f}  "
               "{:>10.3f}  {:>7}\n",
               i, layer_type_name(l.spec.type), shape_str(l.out), l.weight_numel + l.bias_numel, l.forward_flops / 1e6,
               t.forward_s * 1e3, t.backward_data_s * 1e3, t.backward_weights_s * 1e3, first.forward_s * 1e3,
               first.backward_data_s * 1e3, first.backward_weights_s * 1e3, 4.0 * p.batch * numel_of(l.out) / kMiB,
               workspace[i] / kMiB, roof_cell);
  }
  fmt::print("{:>5}  {:<7}  {:<18}  {:>10}  {:>12.4g}  {:>9.3f}  {:>9.3f}  {:>9.3f}\n", "sum", "", "", plan.param_count,
             plan.forward_flops / 1e6, sum.forward_s * 1e3, sum.backward_data_s * 1e3, sum.backward_weights_s * 1e3);
  fmt::print("whole passes: forward {:.3f} ms (layers sum to {:.0f}% of it), backward {:.3f} ms (layers: {:.0f}%), "
             "loss {:.3f} ms, Adam {:.3f} ms; parameters {:.3f} MiB\n",
             p.forward_s * 1e3, 100 * sum.forward_s / p.forward_s, p.backward_s * 1e3,
             100 * (sum.backward_data_s + sum.backward_weights_s) / p.backward_s, p.loss_s * 1e3, p.optimizer_s * 1e3,
             4.0 * plan.param_count / kMiB);
  // Which algorithm ran each convolution's passes (cuDNN's algorithm or engine; oneDNN's
  // implementation or the engine's own Winograd) and the workspace each call needed.
  for (int i = 0; i < L; ++i) {
    const PerPass<std::string>& a = p.algorithms[i];
    if (a[0].empty() && a[1].empty() && a[2].empty()) continue;
    const PerPass<std::size_t>& w = p.workspace_bytes[i];
    fmt::print("  layer {}: forward {} ({:.3f} MiB), backward-data {} ({:.3f} MiB), backward-weights {} ({:.3f} MiB)\n", i,
               short_algorithm(a[0]), w[0] / kMiB, i > 0 ? short_algorithm(a[1]) : "-", w[1] / kMiB,
               short_algorithm(a[2]), w[2] / kMiB);
  }
}

// profile.json's context: the machine, the build, the device's roofline and what was profiled.
ojson profile_context(const Flags& f, const ProfileArgs& a, const Device& dev, const Backend& be, const BackendOptions& bo,
                      const Roofline& roof, const NetSpec& net, const WorkloadOptions& wo, const NetPlan& plan) {
  ojson c;
  for (const auto& [k, v] : system_context(a.kind)) c[k] = v;
  c["device"] = dev.str();
  c["backend"] = be.name();
  c[ctx::parbench_version.name] = PARBENCH_VERSION;
  c[ctx::parbench_commit.name] = PARBENCH_GIT_COMMIT;
  c["date"] = utc_now();
  c["timing"] = "median of the repetitions on the device's own clock (CPU: steady clock around synchronous calls; "
                "CUDA: events on the compute stream); first_call_s: the first step's call";
  c["data"] = "hashed pseudo-random values made on the device (Backend::fill_normal), not run's training data";
  c[ctx::precision.name] = f.str("precision");
  c[ctx::conv_workspace_policy.name] =
      a.kind == DeviceKind::Cuda ? conv_workspace_policy_name(bo.conv_workspace_cap_bytes) : "n/a";
  c[ctx::conv_layout.name] = a.kind == DeviceKind::Cuda ? f.str("layout") : "n/a";
  c[ctx::roofline_peak.name] = fmt::format("{:.6g}", roof.flops_per_s);
  c[ctx::roofline_bandwidth.name] = fmt::format("{:.6g}", roof.bytes_per_s);
  c[ctx::roofline_source.name] = roof.source;
  c[ctx::threads_per_worker.name] = a.threads == 0 ? "auto" : std::to_string(a.threads);
  c[ctx::workload.name] = net.name;
  c[ctx::workload_source.name] = f.str("workload");
  if (scaled_workload(net.name)) c[ctx::workload_params.name] = fmt::format("image {}, width {:g}", wo.image, wo.width);
  c[ctx::input_shape.name] = shape_str(plan.input);
  c[ctx::param_count.name] = std::to_string(plan.param_count);
  c[ctx::forward_flops_per_sample.name] = fmt::format("{:.17g}", plan.forward_flops);
  c[ctx::warmup.name] = std::to_string(a.warmup);
  c["repetitions"] = std::to_string(a.reps);
  c[ctx::seed.name] = std::to_string(static_cast<uint64_t>(f.integer("seed")));
  return c;
}

// One layer of profile.json: its shapes and, per pass, one entry per batch size of every figure.
ojson layer_json(const LayerPlan& l, int i, const std::vector<NetProfile>& profiles,
                 const std::vector<std::vector<std::size_t>>& workspace, const Roofline& roof, int value_bytes) {
  ojson e;
  e["index"] = i;
  e["type"] = layer_type_name(l.spec.type);
  e["in"] = l.in;
  e["out"] = l.out;
  if (l.inputs.size() != 1 || l.inputs[0] != i - 1) e["inputs"] = l.inputs;  // a net with skips: what it reads
  e["params"] = l.weight_numel + l.bias_numel;
  e["forward_flops"] = l.forward_flops;
  std::vector<double> fw, bd, bw;
  std::vector<std::size_t> ws;
  for (std::size_t k = 0; k < profiles.size(); ++k) {
    fw.push_back(profiles[k].layers[i].forward_s);
    bd.push_back(profiles[k].layers[i].backward_data_s);
    bw.push_back(profiles[k].layers[i].backward_weights_s);
    ws.push_back(workspace[k][i]);
  }
  e["forward_s"] = fw;
  e["backward_data_s"] = bd;
  e["backward_weights_s"] = bw;
  e["activation_bytes_per_sample"] = 4 * numel_of(l.out);
  e["workspace_bytes"] = *std::max_element(ws.begin(), ws.end());
  e["workspace_bytes_per_batch"] = ws;
  // Per pass, every array one entry per batch: what a reader of one call needs in one place.
  ojson passes;
  for (LayerPass pass : {LayerPass::Forward, LayerPass::BackwardData, LayerPass::BackwardWeights}) {
    const auto q = static_cast<std::size_t>(pass);
    ojson r;
    std::vector<double> s, first;
    std::vector<std::size_t> bytes;
    std::vector<std::string> algo;
    ojson work_flops = ojson::array(), work_bytes = ojson::array(), fractions = ojson::array();
    for (const NetProfile& p : profiles) {
      const LayerTimes& t = p.layers[i];
      const LayerTimes& f1 = p.first_call[i];
      s.push_back(q == 0 ? t.forward_s : q == 1 ? t.backward_data_s : t.backward_weights_s);
      first.push_back(q == 0 ? f1.forward_s : q == 1 ? f1.backward_data_s : f1.backward_weights_s);
      bytes.push_back(p.workspace_bytes[i][q]);
      algo.push_back(p.algorithms[i][q]);
      const bool called = s.back() > 0 || first.back() > 0;  // layer 0 computes no input gradient
      const LayerWork w = called ? layer_work(l, p.batch, pass, value_bytes, value_bytes) : LayerWork{};
      work_flops.push_back(w.flops);
      work_bytes.push_back(w.bytes);
      // The pass's roofline time over its measured time: 1 at the hardware's limit; null when the
      // pass makes no call or the peak is unknown.
      const std::optional<double> fr =
          s.back() > 0 && w.flops + w.bytes > 0 ? roofline_fraction(w.flops, w.bytes, s.back(), roof) : std::nullopt;
      fractions.push_back(fr ? ojson(*fr) : ojson(nullptr));
    }
    r["s"] = s;
    r["first_call_s"] = first;
    r["workspace_bytes"] = bytes;
    r["algorithm"] = algo;
    r["flops_per_sample"] = pass_flops(l, i, pass);
    r["flops"] = work_flops;
    r["bytes"] = work_bytes;
    r["roofline_fraction"] = fractions;
    passes[q == 0 ? "forward" : q == 1 ? "backward_data" : "backward_weights"] = r;
  }
  e["passes"] = passes;
  return e;
}

// The whole passes per batch size, and Adam's time per parameter (the median over every batch
// size: it does not depend on the batch).
void add_totals(ojson& j, const std::vector<NetProfile>& profiles, int64_t param_count) {
  std::vector<double> loss, fwd, bwd, opts;
  for (const NetProfile& p : profiles) {
    loss.push_back(p.loss_s);
    fwd.push_back(p.forward_s);
    bwd.push_back(p.backward_s);
    opts.push_back(p.optimizer_s);
  }
  std::sort(opts.begin(), opts.end());
  const double opt = opts.size() % 2 ? opts[opts.size() / 2] : (opts[opts.size() / 2 - 1] + opts[opts.size() / 2]) / 2;
  j["loss_s"] = loss;
  j["optimizer_s_per_param"] = param_count > 0 ? opt / static_cast<double>(param_count) : 0.0;
  j["forward_total_s"] = fwd;
  j["backward_total_s"] = bwd;
}

}  // namespace

int cmd_profile(const std::vector<std::string>& args) {
  Flags f("parbench profile",
          "Times every layer of a workload's net on one device -- forward, backward-data and backward-weights\n"
          "apart, each the median of --reps on the device's own clock, and apart from it the first step's\n"
          "call (plan, algorithm search, workspace growth) -- with the algorithm and library workspace of\n"
          "each call and its activation and parameter bytes, at each of --batch, all on one backend. Data\n"
          "and parameters are pseudo-random values made on the device (not `run`'s). Prints a table per\n"
          "batch size and writes profile.json (format: docs/reports.md). --image and --width default as in `run`.",
          profile_flags());
  if (!f.parse(args)) return 0;
  const ProfileArgs a = profile_args(f);

  const auto start = std::chrono::steady_clock::now();
  const WorkloadOptions wo = workload_options(f, a.kind);
  const NetSpec net = resolve_workload(f.str("workload"), wo);
  const NetPlan plan = plan_net(net);
  check_memory_fits(plan, a.batches.back(), a.kind, 1, 0, workload_sizing(f, net));
  BackendOptions bo;
  bo.threads = static_cast<int>(a.threads);
  bo.precision = parse_precision(f.str("precision"));
  bo.conv_workspace_cap_bytes = conv_workspace_cap(f);
  // The whole net runs as one Sequential: with nhwc, a convolution between two others is timed in NHWC.
  bo.cuda_nhwc = conv_layout_nhwc(f, a.kind);
  const Device dev{a.kind, static_cast<int>(a.index)};
  const uint64_t seed = static_cast<uint64_t>(f.integer("seed"));
  // One backend times every layer and batch, and measures each call's workspace.
  std::unique_ptr<Backend> be = make_backend(dev, bo);
  // The device's peak and bandwidth each pass is held against (--machine, the GPU's datasheet, or
  // on CPU calibrate's probe); measured before the timed steps so it does not run beside them.
  const Roofline roof = device_roofline(dev, bo.precision, f.str("machine"));
  const double backend_s = seconds_since(start);
  const int value_bytes = bo.precision == Precision::Bf16 ? 2 : 4;

  std::vector<NetProfile> profiles;
  std::vector<std::vector<std::size_t>> workspace;  // per batch, per layer
  double setup_s = 0, first_s = 0, steps_s = 0;
  for (int64_t b : a.batches) {
    fmt::print(stderr, "parbench profile: batch {}: first step, {} more warm-up step(s), {} repetition(s) on {}\n", b,
               std::max<int64_t>(a.warmup - 1, 0), a.reps, dev.str());
    const auto t = std::chrono::steady_clock::now();
    profiles.push_back(profile_net(plan, *be, {b, static_cast<int>(a.warmup), static_cast<int>(a.reps), seed}));
    const NetProfile& p = profiles.back();
    const double all = seconds_since(t);
    setup_s += p.setup_s, first_s += p.first_step_s, steps_s += all - p.setup_s - p.first_step_s;
    fmt::print(stderr, "parbench profile: batch {}: setup {:.2f} s (parameters and data on the device), first step "
                       "{:.2f} s, warm-up and timed steps {:.2f} s\n", b, p.setup_s, p.first_step_s, all - p.setup_s - p.first_step_s);
    workspace.push_back(layer_workspace_bytes(p));
  }
  fmt::print(stderr, "parbench profile: {:.2f} s in all: backend and plan {:.2f} s, setup {:.2f} s, first steps {:.2f} s, "
                     "warm-up and timed steps {:.2f} s\n",
             seconds_since(start), backend_s, setup_s, first_s, steps_s);
  for (std::size_t k = 0; k < a.batches.size(); ++k)
    print_profile(net.name, plan, dev, *be, profiles[k], a.reps, workspace[k], roof, value_bytes);

  ojson j;
  j["parbench_profile"] = 1;
  j["context"] = profile_context(f, a, dev, *be, bo, roof, net, wo, plan);
  j["batches"] = a.batches;
  ojson layers = ojson::array();
  for (int i = 0; i < static_cast<int>(plan.layers.size()); ++i)
    layers.push_back(layer_json(plan.layers[i], i, profiles, workspace, roof, value_bytes));
  j["layers"] = layers;
  add_totals(j, profiles, plan.param_count);
  make_dirs(std::filesystem::path(a.out_path).parent_path().string());
  write_file_atomic(a.out_path, j.dump(2) + "\n");
  fmt::print("\nwrote {}\n", a.out_path);
  return 0;
}

}  // namespace pb
