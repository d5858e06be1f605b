// parbench run: the sweep. One Google Benchmark per workload x strategy x devices x batch; the
// harness owns warm-up, timing (manual time = the wall time of step(), the critical path),
// counters and the JSON record, then prints the comparison table and writes the run folder.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <set>
#include <thread>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "bench/cli.h"
#include "engine/check.h"
#include "engine/fsutil.h"
#include "engine/mpi/mpi_env.h"
#include "reports/gbjson.h"
#include "reports/stats.h"
#include "reports/table.h"

namespace pb {

namespace {

struct Config {
  std::string name;  // workload/strategy/devices:N/batch:B
  std::string strategy;
  int devices = 1;
  int64_t global_batch = 1;
  StrategyOptions options;
  int index = 0;  // 1-based, for the progress lines
};

// What every benchmark of the sweep shares; the strategy of the configuration being measured
// stays alive across GB's calls of the same benchmark (iteration-count search, repetitions),
// so setup and warm-up happen once per configuration.
struct Sweep {
  NetSpec net;
  NetPlan plan;
  std::vector<float> params;
  int64_t warmup = 0;
  uint64_t seed = 0;
  int total = 0;
  std::string active_name;
  std::unique_ptr<Strategy> active;
  std::map<std::string, std::string> failed;  // configuration -> error: later calls skip at once
  void release() {
    active.reset();
    active_name.clear();
  }
};

Strategy& prepare(Sweep& sw, const Config& c) {
  if (sw.active && sw.active_name == c.name) return *sw.active;
  sw.release();  // free the previous configuration's memory before allocating this one's
  if (process().rank == 0)
    fmt::print(stderr, "parbench: [{}/{}] {}: setting up {} worker(s), global batch {}, {} warm-up step(s)\n", c.index,
             sw.total, c.name, c.devices, c.global_batch, sw.warmup);
  std::fflush(stderr);
  // Peak memory is per configuration: start each device's count from what is live now.
  const int visible = c.options.kind == DeviceKind::Cuda ? cuda_device_count() : c.devices;
  for (int i = 0; i < std::min(c.devices, visible); ++i) allocator_for(Device{c.options.kind, i}).reset_peak();
  auto s = make_strategy(c.strategy, c.options);
  s->setup(sw.plan, sw.params, sw.net.adam);
  const std::vector<float> x = synthetic_values(c.global_batch * numel_of(sw.plan.input), sw.seed + 1);
  const std::vector<float> t =
      sw.net.target == Target::Input ? x : synthetic_values(c.global_batch * numel_of(sw.plan.output), sw.seed + 2);
  s->load_batch(x, t, c.global_batch);
  for (int64_t i = 0; i < sw.warmup; ++i) s->step();  // untimed: algorithm search, allocator warm-up
  sw.active = std::move(s);
  sw.active_name = c.name;
  return *sw.active;
}

void run_config(benchmark::State& state, Sweep& sw, const Config& c) {
  // A configuration that failed (out of memory, an invalid split, a communicator error) is
  // reported as an error for every repetition without being tried again; the sweep goes on.
  auto fail = [&](const std::exception& e) {
    // In a multi-process job the other ranks may be blocked in a collective this rank will never
    // join: a failing configuration ends the job, with the rank and the error named -- unless it
    // is invalid input (a UsageError from checking the configuration), which every rank, running
    // the same command line, finds at the same point before any communication, and skips alike.
    if (multi_process() && !dynamic_cast<const UsageError*>(&e))
      abort_job(fmt::format("parbench run: {}: {}", c.name, e.what()), 1);
    sw.release();
    sw.failed[c.name] = e.what();
    state.SkipWithError(e.what());
  };
  if (auto it = sw.failed.find(c.name); it != sw.failed.end()) {
    state.SkipWithError(it->second.c_str());
    return;
  }
  Strategy* s = nullptr;
  try {
    s = &prepare(sw, c);
  } catch (const std::exception& e) {
    fail(e);
    return;
  }
  std::vector<double> times;
  double comm_s = 0, comm_bytes = 0;
  StepStats last;
  for (auto _ : state) {
    try {
      const auto t0 = std::chrono::steady_clock::now();
      s->step();  // returns when the slowest worker is done, device work synchronized
      // Across processes the iteration lasts until the slowest rank is done.
      const double dt = world_max(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      state.SetIterationTime(dt);
      // Below is outside the measured time (UseManualTime counts only dt).
      times.push_back(dt);
      last = s->stats();
      double worst_comm = 0;
      for (const WorkerStats& w : last.workers) {
        worst_comm = std::max(worst_comm, w.comm_s);  // the critical path's communication
        comm_bytes += static_cast<double>(w.comm_bytes);
      }
      comm_s += worst_comm;
    } catch (const std::exception& e) {
      fail(e);
      break;
    }
  }
  if (state.error_occurred() || times.empty()) return;
  const double iters = static_cast<double>(times.size()), samples = static_cast<double>(c.global_batch);
  double peak_max = 0, peak0 = last.workers.empty() ? 0 : static_cast<double>(last.workers[0].peak_bytes);
  for (const WorkerStats& w : last.workers) peak_max = std::max(peak_max, static_cast<double>(w.peak_bytes));
  using benchmark::Counter;
  // Rates divide by the manual (measured) time.
  state.counters["samples_per_s"] = Counter(samples * iters, Counter::kIsRate);
  state.counters["flop_per_s"] = Counter(3 * sw.plan.forward_flops * samples * iters, Counter::kIsRate);
  state.counters["global_batch"] = samples;
  state.counters["devices"] = c.devices;
  state.counters["peak_bytes_max"] = peak_max;
  state.counters["peak_bytes_dev0"] = peak0;
  state.counters["comm_bytes_per_iter"] = comm_bytes / iters;
  state.counters["comm_s_per_iter"] = comm_s / iters;
  state.counters["bubble_fraction"] = last.bubble_fraction;
  state.counters["micro_batches"] = last.micro_batches;
  state.counters["workers_used"] = last.workers_used;
  state.counters["oversubscribed"] = last.oversubscribed ? 1 : 0;
  state.counters["iter_cv"] = reports::coefficient_of_variation(times);
  state.SetLabel("communicator " + last.communicator);
}

// Tees GB's runs to the display reporter (console, or --benchmark_format) and to a JSON
// reporter over a buffer; after every report the buffer, closed, replaces the JSON file
// atomically, so an interrupted sweep leaves valid JSON of what finished. The format is GB's
// own JSONReporter's, unchanged.
class RecordingReporter final : public benchmark::BenchmarkReporter {
 public:
  RecordingReporter(benchmark::BenchmarkReporter* display, std::string path)
      : display_(display), path_(std::move(path)) {
    json_.SetOutputStream(&buffer_);
    json_.SetErrorStream(&buffer_);
  }
  bool ReportContext(const Context& context) override {
    const bool ok = display_->ReportContext(context);
    json_.ReportContext(context);
    save(false);
    return ok;
  }
  void ReportRuns(const std::vector<Run>& runs) override {
    display_->ReportRuns(runs);
    json_.ReportRuns(runs);
    for (const Run& r : runs)
      if (r.error_occurred) failed_.insert(r.run_name.str());
    save(false);
  }
  void Finalize() override {
    display_->Finalize();
    json_.Finalize();
    save(true);
  }
  int failed() const { return static_cast<int>(failed_.size()); }

 private:
  void save(bool finalized) {
    // JSONReporter::Finalize closes the array and the object with exactly this text.
    const std::string text = finalized ? buffer_.str() : buffer_.str() + "\n  ]\n}\n";
    PB_CHECK(nlohmann::json::accept(reports::nan_to_null(text)), "the Google Benchmark JSON for {} does not parse", path_);
    write_file_atomic(path_, text);
  }
  benchmark::BenchmarkReporter* display_;
  benchmark::JSONReporter json_;
  std::ostringstream buffer_;
  std::string path_;
  std::set<std::string> failed_;  // benchmarks with an error
};

// Ranks other than 0 of a multi-process job run every benchmark in step with rank 0 but report
// nothing: rank 0 alone prints and writes.
class NullReporter final : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

// Keeps the first of repeated list entries (a benchmark registered twice would pool).
template <class T>
void dedupe(std::vector<T>& v) {
  std::vector<T> out;
  for (const T& x : v)
    if (std::find(out.begin(), out.end(), x) == out.end()) out.push_back(x);
  v = std::move(out);
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) {
        std::string v = line.substr(colon + 1);
        v.erase(0, v.find_first_not_of(" \t"));
        return v;
      }
    }
  return "unknown";
}

std::string utc_stamp() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

// A fresh folder runs/<UTC timestamp>-<workload>[-k].
std::string fresh_run_dir(const std::string& workload) {
  std::string safe;
  for (char ch : workload) safe += (std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-') ? ch : '_';
  const std::string base = "runs/" + utc_stamp() + "-" + safe;
  std::string dir = base;
  for (int k = 2; std::filesystem::exists(dir); ++k) dir = fmt::format("{}-{}", base, k);
  return dir;
}

// Machine facts for the JSON context (and for `compare` to refuse unlike environments).
void add_system_context(DeviceKind kind) {
  const SystemInfo info = system_info();
  benchmark::AddCustomContext("device_kind", kind == DeviceKind::Cuda ? "cuda" : "cpu");
  benchmark::AddCustomContext("cpu_model", cpu_model());
  benchmark::AddCustomContext("cpu_threads", std::to_string(info.cpu_threads));
  benchmark::AddCustomContext("conv_backend",
#ifdef PARBENCH_HAVE_DNNL
                              "oneDNN"
#else
                              "im2col+gemm"
#endif
  );
  benchmark::AddCustomContext("gpu_count", std::to_string(info.gpus.size()));
  if (!info.cuda_built) return;
  std::vector<std::string> names;
  for (const GpuInfo& g : info.gpus)
    names.push_back(fmt::format("{} (cc {}.{}, {:.0f} GiB)", g.name, g.cc_major, g.cc_minor, g.total_bytes / double(1u << 30)));
  benchmark::AddCustomContext("gpu_names", fmt::format("{}", fmt::join(names, "; ")));
  // Versions as device.h documents them: driver/runtime 1000*major + 10*minor, cuDNN and
  // NCCL 10000*major + 100*minor + patch.
  auto mm = [](int v) { return v > 0 ? fmt::format("{}.{}", v / 1000, v % 1000 / 10) : std::string("none"); };
  auto mmp = [](int v) { return v > 0 ? fmt::format("{}.{}.{}", v / 10000, v % 10000 / 100, v % 100) : std::string("none"); };
  benchmark::AddCustomContext("cuda_driver", mm(info.cuda_driver_version));
  benchmark::AddCustomContext("cuda_runtime", mm(info.cuda_runtime_version));
  benchmark::AddCustomContext("cudnn", mmp(info.cudnn_version));
  benchmark::AddCustomContext("nccl", info.nccl_built ? mmp(info.nccl_version) : "not built");
}

}  // namespace

int cmd_run(const std::vector<std::string>& args) {
  std::vector<Flag> flags;
  for (Flag fl : training_flags()) {
    if (fl.name == "strategy" || fl.name == "devices") continue;  // lists here: --strategies, --devices
    if (fl.name == "image") fl = {"image", "PIXELS", "great_net: image height and width (default: 512 on GPU, 96 on CPU)", ""};
    if (fl.name == "width") fl = {"width", "SCALE", "great_net: channel width scale (default: 1 on GPU, 0.5 on CPU)", ""};
    if (fl.name == "micro-batches")
      fl = {"micro-batches", "M", "pipeline: micro-batches per step (unless given: at most the global batch)", "4"};
    flags.push_back(fl);
  }
  flags.push_back({"strategies", "LIST", "comma-separated strategies, or all (regular then runs on one device only)", "all"});
  flags.push_back({"devices", "LIST", "device counts, e.g. 1,2,4 (default: 1,2,4,... up to the GPU count; 1,2 on CPU)", ""});
  flags.push_back({"batch", "B", "batch per device (weak scaling) or global batch (strong scaling)", "1"});
  flags.push_back({"scaling", "MODE", "weak (batch per device fixed) or strong (global batch fixed)", "weak"});
  flags.push_back({"warmup", "N", "untimed steps per configuration before timing", "2"});
  flags.push_back({"iterations", "N", "timed steps per configuration and repetition; 0: Google Benchmark decides", "10"});
  flags.push_back({"seed", "S", "seed for parameters and data", "0"});
  flags.push_back({"out", "DIR", "run folder (default: runs/<UTC timestamp>-<workload>)", ""});
  Flags f("parbench run",
          "Benchmarks every strategy x device count on one workload with Google Benchmark, prints the\n"
          "comparison table and writes a run folder: results.json (Google Benchmark JSON, rewritten after\n"
          "every benchmark), report.md, report.csv, report.json and throughput.png.\n"
          "Google Benchmark's own flags pass through: --benchmark_repetitions=N, --benchmark_filter=REGEX,\n"
          "--benchmark_out=FILE, --benchmark_format=..., --benchmark_list_tests, ...",
          flags);
  if (!f.parse(args, "--benchmark_")) return 0;
  if (!f.positional().empty()) throw UsageError(fmt::format("unexpected argument '{}'", f.positional()[0]));

  // Presets: the seed's comparison on GPUs; a scaled great_net that finishes in minutes on CPU.
  const DeviceKind kind = device_kind(f.str("device-kind"));
  const bool gpu = kind == DeviceKind::Cuda;
  WorkloadOptions wo;
  wo.image = f.has("image") ? f.integer("image") : (gpu ? 512 : 96);
  wo.width = f.has("width") ? f.number("width") : (gpu ? 1.0 : 0.5);
  const std::string workload = f.str("workload");
  Sweep sw;
  sw.net = resolve_workload(workload, wo);
  sw.plan = plan_net(sw.net);
  sw.seed = static_cast<uint64_t>(f.integer("seed"));
  sw.warmup = f.integer("warmup");
  const int64_t batch = f.integer("batch"), iterations = f.integer("iterations");
  const std::string scaling = f.str("scaling");
  if (batch < 1) throw UsageError(fmt::format("--batch must be at least 1, got {}", batch));
  if (sw.warmup < 0) throw UsageError(fmt::format("--warmup must be >= 0, got {}", sw.warmup));
  if (iterations < 0) throw UsageError(fmt::format("--iterations must be >= 0, got {}", iterations));
  const ProcessInfo& proc = process();
  const bool lead = proc.rank == 0;
  // Every rank must run the same number of steps: Google Benchmark's own iteration count search
  // could pick different counts on different ranks.
  if (proc.size > 1 && iterations == 0)
    throw UsageError("--iterations 0 (Google Benchmark decides) is not possible in an MPI job: every rank must run "
                     "the same number of steps");
  if (scaling != "weak" && scaling != "strong")
    throw UsageError(fmt::format("--scaling expects weak or strong, got '{}'", scaling));

  std::vector<int64_t> device_counts;
  if (proc.size > 1) {  // one process per device: the job's size is the device count
    device_counts = f.has("devices") ? f.int_list("devices") : std::vector<int64_t>{proc.size};
    for (int64_t d : device_counts)
      if (d != proc.size)
        throw UsageError(fmt::format("--devices {}: this MPI job has {} processes, one per device, so every "
                                     "benchmark runs on {} devices (--devices {})", f.str("devices"), proc.size,
                                     proc.size, proc.size));
  } else if (f.has("devices")) {
    device_counts = f.int_list("devices");
  } else if (gpu) {
    const int n = cuda_device_count();
    for (int d = 1; d < n; d *= 2) device_counts.push_back(d);
    device_counts.push_back(n);
  } else {
    device_counts = {1, 2};
  }
  dedupe(device_counts);
  if (device_counts.empty()) throw UsageError("--devices needs at least one device count");
  for (int64_t d : device_counts)
    if (d < 1) throw UsageError(fmt::format("--devices: every count must be at least 1, got {}", d));

  const std::vector<std::string> known = strategy_names();
  const bool all = f.str("strategies") == "all";
  std::vector<std::string> strategies = all ? known : split_list(f.str("strategies"));
  for (const std::string& s : strategies)
    if (std::find(known.begin(), known.end(), s) == known.end())
      throw UsageError(fmt::format("unknown strategy '{}' in --strategies: expected all or some of {}", s, fmt::join(known, ", ")));
  if (proc.size > 1) {  // single-process strategies cannot span processes
    std::vector<std::string> keep, multi;
    for (const StrategyInfo& i : strategy_infos())
      if (i.multi_process) multi.push_back(i.name);
    for (const std::string& s : strategies) {
      if (strategy_info(s).multi_process) keep.push_back(s);
      else if (!all)
        throw UsageError(fmt::format("strategy {} runs in a single process; in an MPI job use {}", s, fmt::join(multi, ", ")));
    }
    strategies = keep;
  }
  dedupe(strategies);
  if (strategies.empty()) throw UsageError("--strategies needs at least one strategy");

  // Configurations, registered with Google Benchmark in sweep order.
  std::vector<Config> configs;
  for (int64_t d : device_counts)
    for (const std::string& s : strategies) {
      // A single-device strategy is one device by definition; asked for by name at N > 1, it runs and fails.
      if (all && strategy_info(s).single_device && d > 1) continue;
      Config c;
      c.strategy = s;
      c.devices = static_cast<int>(d);
      c.global_batch = scaling == "weak" ? batch * d : batch;
      c.name = reports::bench_name(sw.net.name, s, c.devices, batch);
      c.options = strategy_options(f, c.devices);
      // Batch 1 per device gives small global batches: unless asked for, pipeline runs as many
      // micro-batches as the batch allows, rather than failing.
      if (!f.has("micro-batches")) c.options.micro_batches = static_cast<int>(std::min<int64_t>(4, c.global_batch));
      configs.push_back(std::move(c));
    }
  sw.total = static_cast<int>(configs.size());
  for (std::size_t i = 0; i < configs.size(); ++i) configs[i].index = static_cast<int>(i + 1);
  sw.params = init_params(sw.plan, sw.seed);

  // Google Benchmark's flags: what we passed through, behind a program name.
  std::vector<std::string> gb_args = {"parbench run"};
  for (const std::string& a : f.passthrough())
    if (lead || a.rfind("--benchmark_out", 0) != 0) gb_args.push_back(a);  // rank 0 alone writes files
  std::vector<char*> argv;
  for (std::string& a : gb_args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int argc = static_cast<int>(gb_args.size());
  benchmark::Initialize(&argc, argv.data());
  if (argc > 1) throw UsageError(fmt::format("unknown Google Benchmark flag '{}'", argv[1]));
  bool list_only = false;
  for (const std::string& a : f.passthrough())
    if (a.rfind("--benchmark_list_tests", 0) == 0 && a != "--benchmark_list_tests=false" && a != "--benchmark_list_tests=0")
      list_only = true;

  std::string dir = f.str("out");
  if (dir.empty()) dir = fresh_run_dir(sw.net.name);
  if (!list_only && lead) make_dirs(dir);
  const std::string json_path = dir + "/results.json";

  add_system_context(kind);
  // Debian builds Google Benchmark without NDEBUG, so its "library_build_type" says debug; the
  // times here are parbench's own (SetIterationTime), which that build type does not touch.
  benchmark::AddCustomContext("timing", "manual: each iteration timed by parbench (steady clock, devices synchronized); "
                                        "library_build_type is Google Benchmark's own build and does not affect it");
  benchmark::AddCustomContext("parbench_version", PARBENCH_VERSION);
  benchmark::AddCustomContext("parbench_commit", PARBENCH_GIT_COMMIT);
  benchmark::AddCustomContext("precision", f.str("precision"));
  benchmark::AddCustomContext("scaling", scaling);
  benchmark::AddCustomContext("batch", std::to_string(batch));
  benchmark::AddCustomContext("batch_meaning", scaling == "weak" ? "per device" : "global");
  benchmark::AddCustomContext("workload", sw.net.name);
  benchmark::AddCustomContext("workload_source", workload);
  if (sw.net.name == "great_net")
    benchmark::AddCustomContext("workload_params", fmt::format("image {}, width {:g}", wo.image, wo.width));
  benchmark::AddCustomContext("input_shape", shape_str(sw.plan.input));
  benchmark::AddCustomContext("param_count", std::to_string(sw.plan.param_count));
  benchmark::AddCustomContext("forward_flops_per_sample", fmt::format("{:.17g}", sw.plan.forward_flops));
  benchmark::AddCustomContext("strategies", fmt::format("{}", fmt::join(strategies, ",")));
  benchmark::AddCustomContext("device_counts", fmt::format("{}", fmt::join(device_counts, ",")));
  benchmark::AddCustomContext("warmup", std::to_string(sw.warmup));
  benchmark::AddCustomContext("iterations", iterations ? std::to_string(iterations) : "auto");
  benchmark::AddCustomContext("threads_per_worker", f.str("threads") == "0" ? "auto" : f.str("threads"));
  benchmark::AddCustomContext("micro_batches", f.has("micro-batches") ? f.str("micro-batches") : "min(4, global batch)");
  benchmark::AddCustomContext("bucket_mb", f.str("bucket-mb"));
  if (f.has("balance")) benchmark::AddCustomContext("balance", f.str("balance"));
  benchmark::AddCustomContext("oversubscribe", f.on("oversubscribe") ? "true" : "false");
  benchmark::AddCustomContext("seed", std::to_string(sw.seed));
  benchmark::AddCustomContext("world_size", std::to_string(proc.size));  // processes (MPI ranks); 1 without MPI
  benchmark::AddCustomContext("hosts", fmt::format("{}", fmt::join(proc.hosts, ",")));  // per rank

  for (const Config& c : configs) {
    auto* b = benchmark::RegisterBenchmark(c.name.c_str(), [&sw, &c](benchmark::State& st) { run_config(st, sw, c); });
    b->UseManualTime()->Unit(benchmark::kMillisecond);
    if (iterations > 0) b->Iterations(iterations);
  }
  if (!list_only && lead)
    fmt::print(stderr, "parbench run: {} configuration(s) of {} ({}), {} precision, {} scaling; writing {}\n",
               configs.size(), sw.net.name, shape_str(sw.plan.input), f.str("precision"), scaling, dir);

  std::unique_ptr<benchmark::BenchmarkReporter> reporter_owner;
  if (lead)
    reporter_owner = std::make_unique<RecordingReporter>(benchmark::CreateDefaultDisplayReporter(), json_path);
  else
    reporter_owner = std::make_unique<NullReporter>();
  const std::size_t ran = benchmark::RunSpecifiedBenchmarks(reporter_owner.get());
  sw.release();
  benchmark::ClearRegisteredBenchmarks();
  benchmark::Shutdown();
  if (list_only || !lead) return 0;
  const RecordingReporter& reporter = static_cast<const RecordingReporter&>(*reporter_owner);
  if (ran == 0) throw UsageError("no configuration matched --benchmark_filter");

  // The report reads back the JSON record, exactly as `parbench report` would.
  const reports::Report rep = reports::build_report({reports::load_run_json(json_path)});
  const std::string md = reports::report_markdown(rep);
  std::fputs(("\n" + md).c_str(), stdout);
  std::fflush(stdout);
  write_file_atomic(dir + "/report.md", md);
  write_file_atomic(dir + "/report.csv", reports::report_csv(rep));
  write_file_atomic(dir + "/report.json", reports::report_json(rep));
  const bool chart = render_chart(dir + "/report.json", dir + "/throughput.png");
  fmt::print("parbench run: {} configuration(s), {} failed; wrote {}/: results.json (Google Benchmark JSON), "
             "report.md, report.csv, report.json{}\n",
             ran, reporter.failed(), dir, chart ? ", throughput.png" : "");
  return 0;
}

}  // namespace pb
