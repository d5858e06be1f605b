// parbench run: the sweep. One Google Benchmark per workload x strategy x devices x batch; the
// harness owns warm-up, timing (manual time = the wall time of step(), the critical path),
// counters and the JSON record, then prints the comparison table and writes the run folder.
// Planning is here, the context in run_context.cpp, measuring and recording in sweep.cpp.
#include "bench/run.h"

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <optional>
#include <sstream>

#include <fmt/ranges.h>

#include "bench/report.h"
#include "engine/check.h"
#include "engine/cpu_steal.h"
#include "engine/fsutil.h"
#include "engine/process.h"
#include "engine/memory_estimate.h"
#include "reports/gbjson.h"
#include "reports/table.h"
#include "strategies/plan_gen.h"

namespace pb {

std::string utc_stamp() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

namespace {

// Keeps the first of repeated list entries (a benchmark registered twice would pool).
template <class T>
void dedupe(std::vector<T>& v) {
  std::vector<T> out;
  for (const T& x : v)
    if (std::find(out.begin(), out.end(), x) == out.end()) out.push_back(x);
  v = std::move(out);
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

// The benchmark's identity: the workload with the parameters that define it, then the rest.
reports::BenchName config_name(const Sweep& sw, const WorkloadOptions& wo, const std::string& strategy, int devices,
                               int64_t batch) {
  reports::BenchName n;
  n.workload = sw.net.name;
  if (scaled_workload(sw.net.name)) n.workload_params = {fmt::format("image:{}", wo.image), fmt::format("width:{:g}", wo.width)};
  n.strategy = strategy;
  n.devices = devices;
  n.batch = batch;
  return n;
}

}  // namespace

std::vector<Flag> run_flags() {
  std::vector<Flag> flags;
  for (Flag fl : training_flags()) {
    if (fl.name == "strategy" || fl.name == "devices") continue;  // lists here: --strategies, --devices
    flags.push_back(fl);
  }
  flags.push_back({"strategies", "LIST", "comma-separated strategies, or all (single-device ones run at N = 1 only): " +
                                             strategy_names_help(), "all"});
  flags.push_back({"devices", "LIST", "device counts, e.g. 1,2,4 (default: 1,2,4,... up to the GPU count; 1,2 on CPU)", ""});
  flags.push_back({"batch", "B", "batch per device (weak scaling) or global batch (strong scaling)", "1"});
  flags.push_back({"scaling", "MODE", "weak (batch per device fixed) or strong (global batch fixed)", "weak"});
  flags.push_back({"warmup", "N", "untimed steps per configuration before timing", "2"});
  flags.push_back({"iterations", "N", "timed steps per configuration and repetition; 0: Google Benchmark decides", "10"});
  flags.push_back({"seed", "S", "seed for parameters and data", "0"});
  flags.push_back({"out", "DIR", "the run folder (default: runs/<UTC timestamp>-<workload>)", ""});
  flags.push_back({"reps", "N", "repetitions of each configuration (--benchmark_repetitions=N)", ""});
  flags.push_back({"all-at-one-device", "", "at N = 1 run every strategy, not only regular (the same arithmetic on one "
                                           "device; the tests check each equals regular's)", ""});
  flags.push_back({"gbench-console", "", "Google Benchmark's own console (every counter, per repetition and aggregate) "
                                         "instead of one line per configuration", ""});
  flags.push_back({"plan", "FILE", "run this plan file (JSON, as parbench plan --format json writes; validated first) as its "
                   "strategy's step instead of the strategy's own: mp, a pipeline, a dp<D>xpp<P> or ddp; its strategy, "
                   "workers, batch and micro-batches set the run's", ""});
  flags.push_back({"machine", "FILE", "machine JSON (machines/*.json, as project reads them): its device's peak in the "
                   "run's precision and bandwidth (2 x copy_bytes_per_s) give mfu and the trace's roofline fractions "
                   "(default: CUDA, the GPU's row of a datasheet table; CPU, measured at the start, about a second)", ""});
  flags.push_back({"trace", "", "per configuration, one more untimed step with per-layer spans, written as a Chrome "
                                "trace (trace-<benchmark>.json, for Perfetto), and timeline.png", ""});
  return flags;
}

// The device counts to run: the job's size under MPI, else --devices, the --dp x --pp/--tp
// shape, every power of two up to the GPUs' count, or 1 and 2 on CPU.
std::vector<int64_t> run_device_counts(const Flags& f, const HybridShape& shape, bool gpu) {
  const ProcessInfo& proc = process();
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
  } else if (shape.dp > 0 && shape.pp + shape.tp > 0) {
    device_counts = {static_cast<int64_t>(shape.dp) * (shape.pp + shape.tp)};
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
  return device_counts;
}

// The strategies to run, as their variants' names: --strategies (or the hybrids --dp/--pp/--tp
// shape), checked against the registry and the flags, the single-process ones left out of an MPI
// job that asked for all.
std::vector<std::string> run_strategies(const Flags& f, const HybridShape& shape) {
  const ProcessInfo& proc = process();
  const std::vector<std::string> known = strategy_names();
  const bool all = f.str("strategies") == "all";
  std::vector<std::string> strategies = all ? known : reports::split_commas(f.str("strategies"));
  // --dp/--pp/--tp alone: the hybrids they shape (--dp alone: both families).
  if (shape.given() && !f.has("strategies")) {
    strategies.clear();
    if (!shape.tp) strategies.push_back(kHybridFamily);
    if (!shape.pp) strategies.push_back(kDpTpFamily);
  }
  for (const std::string& s : strategies)
    if (!parse_strategy(s))
      throw UsageError(fmt::format("unknown strategy '{}' in --strategies: expected all or some of {} (members of {} "
                                   "as dp<D>xpp<P>, of {} as dp<D>xtp<T>, of {} as hsdp<R>x<S>)", s, fmt::join(known, ", "),
                                   kHybridFamily, kDpTpFamily, kHsdpFamily));
  auto has = [&](const std::string& s) { return std::find(strategies.begin(), strategies.end(), s) != strategies.end(); };
  if (shape.given() && !has(kHybridFamily) && !has(kDpTpFamily))
    throw UsageError(fmt::format("--dp/--pp/--tp choose among the hybrids: add {} or {} to --strategies", kHybridFamily,
                                 kDpTpFamily));
  if (shape.pp && !has(kHybridFamily))
    throw UsageError(fmt::format("--pp shapes the dp x pp hybrids: add {} to --strategies", kHybridFamily));
  if (shape.tp && !has(kDpTpFamily))
    throw UsageError(fmt::format("--tp shapes the dp x tp hybrids: add {} to --strategies", kDpTpFamily));
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
  for (std::string& s : strategies) s = strategy_name(f, s, false);  // --schedule / --recompute pick pipeline variants
  dedupe(strategies);
  if (strategies.empty()) throw UsageError("--strategies needs at least one strategy");
  return strategies;
}

// Every configuration, registered with Google Benchmark in sweep order: a family's members at
// each device count; what is skipped (a single-device strategy beyond one device, a hybrid with
// no factorization there) said on stderr.
void add_configs(const Flags& f, const HybridShape& shape, const std::shared_ptr<const Plan>& user, const Sweep& sw,
                 RunPlan& p) {
  const ProcessInfo& proc = process();
  const std::vector<int64_t>& device_counts = p.device_counts;
  const std::vector<std::string>& strategies = p.strategies;
  const bool all = f.str("strategies") == "all";
  // A single-device strategy is one device by definition: at N > 1 it is skipped, whether named or
  // part of all.
  // At N = 1 every strategy runs regular's arithmetic: in a sweep that also has N > 1, one device
  // runs the single-device strategies only (regular, the baseline, when none is named) unless
  // --all-at-one-device; rows of the same work would only pick a "best" among noise.
  const bool wider = *std::max_element(device_counts.begin(), device_counts.end()) > 1;
  const bool one_device_all = f.on("all-at-one-device") || !wider;
  bool named_single = false;
  for (const std::string& s : strategies) named_single |= strategy_info(s).single_device;
  std::vector<std::string> at_one = strategies;
  if (!one_device_all) {
    at_one.clear();
    for (const std::string& s : strategies)
      if (strategy_info(s).single_device) at_one.push_back(s);
    if (!named_single && proc.size == 1) at_one.push_back("regular");
  }
  std::vector<std::string> skipped, unshaped, not_at_one;
  for (int64_t d : device_counts)
    for (const std::string& s : d == 1 ? at_one : strategies) {
      if (strategy_info(s).single_device && d > 1) {
        skipped.push_back(fmt::format("{} x{}", s, d));
        continue;
      }
      std::vector<std::string> members = {s};
      const auto spec = parse_strategy(s);
      if (s == kHybridFamily || s == kDpTpFamily) {  // every D x S = d; both at least 2 unless the flags fix one
        const bool tp = s == kDpTpFamily;
        const int want = tp ? shape.tp : shape.pp;
        members.clear();
        for (const auto& [D, S] : hybrid_factorizations(static_cast<int>(d), shape.dp, want))
          members.push_back(tp ? dptp_name(D, S) : strategy_name(f, hybrid_name(D, S, Schedule::GPipe, false), false));
      } else if (s == kHsdpFamily) {  // every R x S = d, both at least 2
        members.clear();
        for (const auto& [R, S] : hybrid_factorizations(static_cast<int>(d))) members.push_back(hsdp_name(R, S));
      } else if (spec && spec->member() && spec->devices() != d) {
        members.clear();
      }
      if (members.empty()) unshaped.push_back(fmt::format("{} x{}", s, d));
      for (const std::string& m : members) {
        Config c;
        c.strategy = m;
        c.devices = static_cast<int>(d);
        c.global_batch = p.scaling == "weak" ? p.batch * d : p.batch;
        c.name = reports::bench_name(config_name(sw, p.wo, m, c.devices, p.batch));
        c.options = strategy_options(f, c.devices, c.global_batch);
        if (user) c.options = plan_file_options(f, user);
        c.index = static_cast<int>(p.configs.size() + 1);
        p.configs.push_back(std::move(c));
      }
    }
  if (!one_device_all && proc.rank == 0 && std::find(device_counts.begin(), device_counts.end(), 1) != device_counts.end())
    for (const std::string& s : strategies)
      if (!strategy_info(s).single_device && !parse_strategy(s).value().family) not_at_one.push_back(s);
  if (!not_at_one.empty())
    fmt::print(stderr, "parbench run: on one device only {} runs (the others' one-device step is its arithmetic); "
               "--all-at-one-device adds {} x1\n", fmt::join(at_one, ", "), fmt::join(not_at_one, " x1, "));
  if (!skipped.empty() && !all && proc.rank == 0)
    fmt::print(stderr, "parbench run: skipped {} (single-device strategies run on one device only)\n", fmt::join(skipped, ", "));
  if (!unshaped.empty() && proc.rank == 0 && (!all || shape.given()))
    fmt::print(stderr, "parbench run: skipped {} (no hybrid factorization of that device count{})\n",
               fmt::join(unshaped, ", "), shape.given() ? " with the --dp/--pp/--tp given" : " with both sides >= 2");
  if (p.configs.empty())
    throw UsageError(unshaped.empty()
                         ? fmt::format("nothing to run: {} run(s) on one device only, and --devices {} has no 1",
                                       fmt::join(strategies, ", "), f.str("devices"))
                         : fmt::format("nothing to run: no configuration fits --devices {} ({} has no factorization "
                                       "there)", fmt::join(device_counts, ","), fmt::join(unshaped, ", ")));
}

// Strategies named on the command line: each configuration's plan made now. One that the flags
// shaping a split (--micro-batches, --virtual-stages, --balance) make impossible, where the
// defaults would run, is refused before anything runs. One the net cannot take at that device
// count whatever the flags (more stages than layers) stays a failed row, as under `all`, where
// every strategy is tried. (--balance time: by FLOPs here; timing layers is work.)
void refuse_impossible_splits(const RunPlan& p, const Sweep& sw) {
  for (const Config& c : p.configs) {
    StrategyOptions o = c.options;
    if (o.balance_by == StrategyOptions::BalanceBy::Time) o.balance_by = StrategyOptions::BalanceBy::Flops;
    StrategyOptions plain = o;
    plain.micro_batches = static_cast<int>(std::min<int64_t>(kDefaultMicroBatches, c.global_batch));
    plain.cap_micro_batches = true;
    plain.virtual_stages = StrategyOptions{}.virtual_stages;
    plain.balance.clear();
    plain.balance_by = StrategyOptions::BalanceBy::Flops;
    try {
      (void)make_plan(c.strategy, sw.plan, o, c.global_batch);
    } catch (const UsageError& e) {
      bool plain_runs = true;
      try {
        (void)make_plan(c.strategy, sw.plan, plain, c.global_batch);
      } catch (const UsageError&) {
        plain_runs = false;
      }
      if (plain_runs) throw UsageError(fmt::format("--devices {}, global batch {}: {}", c.devices, c.global_batch, e.what()));
    }
  }
}

RunPlan plan_run(const Flags& f, Sweep& sw) {
  RunPlan p;
  // Presets: the seed's net and sizes on GPUs; a scaled great_net that finishes in minutes on CPU.
  p.kind = device_kind(f.str("device-kind"));
  const bool gpu = p.kind == DeviceKind::Cuda;
  p.wo = workload_options(f, p.kind);
  p.workload = f.str("workload");
  sw.net = resolve_workload(p.workload, p.wo);
  sw.plan = plan_net(sw.net);
  sw.seed = static_cast<uint64_t>(f.integer("seed"));
  sw.warmup = f.integer("warmup");
  p.batch = f.integer("batch");
  p.iterations = f.integer("iterations");
  p.scaling = f.str("scaling");
  if (p.batch < 1) throw UsageError(fmt::format("--batch must be at least 1, got {}", p.batch));
  if (sw.warmup < 0) throw UsageError(fmt::format("--warmup must be >= 0, got {}", sw.warmup));
  if (p.iterations < 0) throw UsageError(fmt::format("--iterations must be >= 0, got {}", p.iterations));
  const ProcessInfo& proc = process();
  // Every rank must run the same number of steps: Google Benchmark's own iteration count search
  // could pick different counts on different ranks.
  if (proc.size > 1 && p.iterations == 0)
    throw UsageError("--iterations 0 (Google Benchmark decides) is not possible in an MPI job: every rank must run "
                     "the same number of steps");
  if (p.scaling != "weak" && p.scaling != "strong")
    throw UsageError(fmt::format("--scaling expects weak or strong, got '{}'", p.scaling));

  const HybridShape shape = hybrid_shape(f);
  p.device_counts = run_device_counts(f, shape, gpu);
  p.strategies = run_strategies(f, shape);

  // --plan FILE: its strategy on its workers at its global batch, nothing else.
  const std::shared_ptr<const Plan> user = run_plan_file(f, sw.net, sw.plan);
  sw.identity = plan_identity(f, sw.net, sw.plan);  // of the plans the run keeps
  if (user) p.strategies = {user->strategy}, p.device_counts = {user->workers}, p.scaling = "strong", p.batch = user->batch;
  add_configs(f, shape, user, sw, p);
  if (f.str("strategies") != "all" && !user) refuse_impossible_splits(p, sw);
  sw.total = static_cast<int>(p.configs.size());
  check_memory_fits(sw.plan, 1, p.kind, static_cast<int>(*std::max_element(p.device_counts.begin(), p.device_counts.end())),
                    p.configs.front().options.backend.memory_limit_bytes, workload_sizing(f, sw.net));
  sw.params = init_params(sw.plan, sw.seed);
  return p;
}

namespace {

// The roofline of mfu and the traces: --machine, else the GPU's datasheet row, else this CPU
// measured -- by rank 0 alone, as ranks measuring at once would share the cores.
Roofline run_roofline(DeviceKind kind, const Flags& f) {
  if (kind == DeviceKind::Cpu && !f.has("machine") && process().rank != 0) return Roofline{0, 0, true, "measured on rank 0"};
  return device_roofline(Device{kind, 0}, parse_precision(f.str("precision")), f.str("machine"));
}

}  // namespace

int cmd_run(const std::vector<std::string>& args) {
  Flags f("parbench run",
          "Benchmarks every strategy x device count on one workload with Google Benchmark, prints the\n"
          "comparison table and writes a run folder: results.json (Google Benchmark JSON, rewritten after\n"
          "every benchmark), report.md, report.csv, report.json, throughput.png, pareto.png, breakdown.png and\n"
          "report.html (all of them on one page), plans/<benchmark>.json (each step as a plan, as plan\n"
          "--format json prints it; run --plan reruns one); with --trace also\n"
          "trace-<benchmark>.json, one step as Chrome trace events, and timeline.png.\n"
          "The console shows one line per configuration (--gbench-console: Google Benchmark's own).\n"
          "Google Benchmark's own flags pass through: --benchmark_repetitions=N, --benchmark_filter=REGEX,\n"
          "--benchmark_out=FILE, --benchmark_format=..., --benchmark_list_tests, ...\n"
          "With --benchmark_format=json or csv, stdout holds that format alone; the table goes to stderr.\n"
          "Exit status: 0 when at least one configuration was measured, 1 when every one failed.",
          run_flags());
  if (!f.parse(args, "--benchmark_")) return 0;
  if (!f.positional().empty()) throw UsageError(fmt::format("unexpected argument '{}'", f.positional()[0]));
  Sweep sw;
  const RunPlan plan = plan_run(f, sw);
  const bool lead = process().rank == 0;

  // Google Benchmark's flags: what we passed through, behind a program name.
  std::vector<std::string> gb_args = {"parbench run"};
  for (const std::string& a : f.passthrough())
    if (lead || a.rfind("--benchmark_out", 0) != 0) gb_args.push_back(a);  // rank 0 alone writes files
  if (f.has("reps")) gb_args.push_back(fmt::format("--benchmark_repetitions={}", f.integer("reps")));
  for (const std::string& a : f.passthrough())
    if (f.has("reps") && a.rfind("--benchmark_repetitions", 0) == 0) throw UsageError("--reps and --benchmark_repetitions: give one");
  std::vector<char*> argv;
  for (std::string& a : gb_args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int argc = static_cast<int>(gb_args.size());
  check_benchmark_flags(f.passthrough());
  benchmark::Initialize(&argc, argv.data());
  if (argc > 1) throw UsageError(fmt::format("unknown Google Benchmark flag '{}'", argv[1]));
  bool list_only = false;
  std::string format = "console";  // what stdout holds: GB's --benchmark_format
  for (const std::string& a : f.passthrough()) {
    if (a.rfind("--benchmark_list_tests", 0) == 0 && a != "--benchmark_list_tests=false" && a != "--benchmark_list_tests=0")
      list_only = true;
    if (a.rfind("--benchmark_format=", 0) == 0) format = a.substr(19);
  }
  // Under another format stdout is that format alone; the table and the summary go to stderr.
  const bool console = format == "console";
  std::FILE* const text_out = console ? stdout : stderr;

  // Before the run folder: a bad --machine file leaves none behind.
  sw.roofline.source = "none: not measured (--benchmark_list_tests)";
  // The program and its libraries, loaded: before the CPU's rate probe, whose leftovers (thread
  // pools, primitive caches) depend on how busy the machine was while it ran.
  sw.base_resident = static_cast<double>(resident_bytes());
  if (!list_only) sw.roofline = run_roofline(plan.kind, f);

  std::string dir = f.str("out");
  if (dir.empty()) dir = fresh_run_dir(sw.net.name);
  std::optional<DirLock> lock;  // one writer per run folder; removed again if nothing was written
  if (!list_only && lead) lock.emplace(dir);
  if (!list_only && lead && !f.config_file().empty())  // the sweep's file kept with its results
    write_file_atomic(dir + "/config" + std::filesystem::path(f.config_file()).extension().string(), read_file(f.config_file()));
  const std::string json_path = dir + "/results.json";

  add_run_context(plan, f, sw);
  if (!list_only) prime(sw, plan.configs);
  if (f.on("trace") && !list_only) sw.trace_dir = dir;
  if (!list_only) sw.plan_dir = dir + "/plans";
  for (const Config& c : plan.configs) {
    auto* b = benchmark::RegisterBenchmark(c.name.c_str(), [&sw, &c](benchmark::State& st) { run_config(st, sw, c); });
    // cpu_time: every thread of the process (the workers), not only the main thread.
    b->UseManualTime()->MeasureProcessCPUTime()->Unit(benchmark::kMillisecond);
    if (plan.iterations > 0) b->Iterations(plan.iterations);
  }
  if (!list_only && lead)
    fmt::print(stderr, "parbench run: {} configuration(s) of {} ({}), {} precision, {} scaling; writing {}\n",
               plan.configs.size(), sw.net.name, shape_str(sw.plan.input), f.str("precision"), plan.scaling, dir);

  std::unique_ptr<benchmark::BenchmarkReporter> reporter_owner;
  const bool gb_display = !console || f.on("gbench-console");
  if (lead)
    reporter_owner = std::make_unique<RecordingReporter>(gb_display ? benchmark::CreateDefaultDisplayReporter() : nullptr,
                                                         console, json_path, sw);
  else
    reporter_owner = std::make_unique<NullReporter>();
  const std::optional<CpuTimes> cpu_before = read_cpu_times();
  const std::size_t ran = benchmark::RunSpecifiedBenchmarks(reporter_owner.get());
  const Disturbance disturbed = disturbance_since(cpu_before);
  sw.release();
  benchmark::ClearRegisteredBenchmarks();
  benchmark::Shutdown();
  if (list_only || !lead) return 0;
  const RecordingReporter& reporter = static_cast<const RecordingReporter&>(*reporter_owner);
  if (ran == 0) throw UsageError("no configuration matched --benchmark_filter");

  // The report reads back the JSON record, exactly as `parbench report` would.
  const reports::Report rep = reports::build_report({reports::load_run_json(json_path)});
  const std::string md = reports::report_markdown(rep);
  std::fputs(("\n" + md).c_str(), text_out);
  std::fflush(text_out);
  write_file_atomic(dir + "/report.md", md);
  write_file_atomic(dir + "/report.csv", reports::report_csv(rep));
  write_file_atomic(dir + "/report.json", reports::report_json(rep));
  const bool chart = render_chart(dir + "/report.json", dir + "/throughput.png");
  const bool timeline = !sw.trace_dir.empty() && !sw.traced.empty() && render_timeline(dir, dir + "/timeline.png");
  if (!sw.trace_dir.empty() && !sw.traced.empty() && !timeline)
    fmt::print(stderr, "parbench run: make timeline.png later with: /usr/bin/python3 scripts/timeline.py {} {}/timeline.png "
               "(needs matplotlib: apt-get install python3-matplotlib)\n", dir, dir);
  fmt::print(text_out, "parbench run: {} configuration(s), {} failed; wrote {}/: results.json (Google Benchmark JSON), "
             "report.md, report.csv, report.json{}{}{}{}\n",
             ran, reporter.failed(), dir, chart ? ", throughput.png" : "",
             sw.planned.empty() ? "" : fmt::format(", plans/ ({} plan file(s), run --plan reruns one)", sw.planned.size()),
             sw.traced.empty() ? "" : fmt::format(", {} trace-*.json", sw.traced.size()), timeline ? ", timeline.png" : "");
  if (write_run_html(dir))  // after timeline.png, which the page shows too
    fmt::print(text_out, "parbench run: open {}/report.html in a browser: tables, charts (pareto.png, breakdown.png too), "
               "context, traces\n", dir);
  warn_if_disturbed(disturbed, "parbench run", "during the run", "its timings are slower and noisier than the machine's own",
                    "run again");
  if (reporter.failed() >= static_cast<int>(ran)) {
    fmt::print(stderr, "parbench run: every configuration failed\n");
    return 1;
  }
  return 0;
}

}  // namespace pb
