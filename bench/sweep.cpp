// One configuration's setup, warm-up and timed steps under Google Benchmark, and the recording
// reporter. Counter names come from reports/schema.h, the contract with the readers.
#include "bench/sweep.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "engine/check.h"
#include "engine/memory_estimate.h"
#include "engine/fsutil.h"
#include "engine/process.h"
#include "engine/trace.h"
#include "plan/memory.h"
#include "plan/plan.h"
#include "strategies/breakdown.h"
#include "strategies/plan_gen.h"
#include "strategies/stages.h"
#include "reports/console.h"
#include "reports/gbjson.h"
#include "reports/schema.h"
#include "reports/stats.h"
#include "reports/straggler.h"

namespace pb {

namespace {

// A CPU device slot no worker uses (workers are cpu(0 .. N-1)): the memory estimate's workspace probe.
constexpr int kWorkspaceProbeSlot = 63;

// The stages' layer ranges and ddp's buckets of the configuration (schema layout).
std::string layout_json(const StepStats& st, const std::vector<int64_t>& skips) {
  nlohmann::json j = nlohmann::json::object();
  if (st.staged) {
    j["stages"] = nlohmann::json::array();
    for (const WorkerStats& w : st.workers) j["stages"].push_back({w.layer_begin, w.layer_end});
  }
  if (std::any_of(skips.begin(), skips.end(), [](int64_t b) { return b > 0; })) j["skip_bytes"] = skips;
  if (!st.buckets.empty()) {
    j["buckets"] = nlohmann::json::array();
    for (const BucketLayout& b : st.buckets)
      j["buckets"].push_back({{"layers", {b.first_layer, b.last_layer}}, {"floats", {b.begin, b.end}}});
  }
  return j.dump();
}

// One more step, untimed, with per-layer named spans, written as a Chrome trace-event file.
void write_trace(Sweep& sw, const Config& c, Strategy& s) {
  s.set_trace_detail(true);
  try {
    s.step();
  } catch (...) {
    s.set_trace_detail(false);
    throw;
  }
  s.set_trace_detail(false);
  sw.traced.insert(c.name);
  const StepStats st = s.stats();  // a collective across processes: every rank takes part
  if (process().rank != 0) return;  // each process knows only its own workers' spans
  std::vector<std::vector<Span>> spans;
  std::vector<std::string> names;
  // A worker's roofline: its device's; where the workers share one (CPU cores), its N-th of it.
  Roofline worker = sw.roofline;
  if (worker.shared) worker.flops_per_s /= c.devices, worker.bytes_per_s /= c.devices;
  for (std::size_t i = 0; i < st.workers.size(); ++i) {
    spans.push_back(st.workers[i].spans);
    for (Span& sp : spans.back())  // each layer span's achieved fraction of its roofline
      if (const auto f = roofline_fraction(sp.flops, sp.bytes, sp.busy_s, worker)) sp.roofline_fraction = *f;
    std::string name = fmt::format("worker {} ({})", i, st.workers[i].device);
    if (st.staged) name += fmt::format(" layers {}-{}", st.workers[i].layer_begin, st.workers[i].layer_end - 1);
    names.push_back(name);
  }
  std::map<std::string, std::string> meta = {
      {"benchmark", c.name},        {"strategy", c.strategy},
      {"devices", std::to_string(c.devices)}, {"global_batch", std::to_string(c.global_batch)},
      {"micro_batches", std::to_string(st.micro_batches)}, {"bubble_fraction", fmt::format("{}", st.bubble_fraction)},
      {"step_ms", fmt::format("{}", st.step_s * 1e3)}, {"communicator", st.communicator}};
  // The rates each worker's roofline fractions use.
  if (worker.flops_per_s > 0) meta["worker_peak_flop_per_s"] = fmt::format("{:.17g}", worker.flops_per_s);
  if (worker.bytes_per_s > 0) meta["worker_bytes_per_s"] = fmt::format("{:.17g}", worker.bytes_per_s);
  meta[reports::schema::context::roofline_source.name] =
      sw.roofline.source + (worker.shared ? fmt::format("; shared by the {} worker(s): each 1/{} of it", c.devices, c.devices) : "");
  write_file_atomic(sw.trace_dir + "/" + trace_file_name(c.name), chrome_trace(spans, names, meta));
}

// The configuration's per-worker estimate, summed over its workers; stage ranges are the ones
// the strategy chose from its plan (--balance), known once it is set up.
double predicted_bytes(Sweep& sw, const Config& c, const Strategy& s) {
  WorkspaceProbes probes;
  if (c.options.kind == DeviceKind::Cpu) {  // on a GPU the probe would raise a worker's peak: the im2col bound
    auto& layers = sw.workspace[c.options.backend.threads];
    if (!layers) layers = measured_workspace(c.options.backend, cpu(kWorkspaceProbeSlot));
    auto& seq = sw.sequential_workspace[c.options.backend.threads];
    if (!seq) seq = measured_sequential_workspace(c.options.backend, cpu(kWorkspaceProbeSlot));
    auto& tp = sw.tp_workspace[c.options.backend.threads];
    if (!tp) tp = measured_tp_workspace(c.options.backend, cpu(kWorkspaceProbeSlot));
    probes = {layers, seq, tp};
  }
  const Plan plan = s.step_plan() ? *s.step_plan() : make_plan(c.strategy, sw.plan, c.options, c.global_batch);
  const MemoryEstimate e = plan_memory(plan, sw.plan, probes);
  double sum = 0;
  for (double b : e.per_worker) sum += b;
  return e.per_worker.empty() ? e.total() : sum;
}

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
  check_memory_fits(sw.plan, c.global_batch, c.options.kind, c.devices, c.options.backend.memory_limit_bytes, sw.net.name);
  auto s = make_strategy(c.strategy, c.options);
  s->setup(sw.plan, sw.params, sw.net.adam);
  const std::vector<float> x = synthetic_values(c.global_batch * numel_of(sw.plan.input), sw.seed + 1);
  const std::vector<float> t =
      sw.net.target == Target::Input ? x : synthetic_values(c.global_batch * numel_of(sw.plan.output), sw.seed + 2);
  s->load_batch(x, t, c.global_batch);
  // Untimed: algorithm search, allocator warm-up. The first step, with its first-call work, is
  // timed as iterations are (warmup_s).
  sw.warmup_s.erase(c.name);
  for (int64_t i = 0; i < sw.warmup; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    s->step();
    const double dt = world_max(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    if (i == 0) sw.warmup_s[c.name] = dt;
  }
  sw.predicted_bytes[c.name] = predicted_bytes(sw, c, *s);
  // The step it runs, kept beside the results (every process holds the whole plan: rank 0 writes).
  if (!sw.plan_dir.empty() && !sw.planned.count(c.name) && s->step_plan() && process().rank == 0) {
    Plan kept = *s->step_plan();
    if (kept.layer_params.empty()) kept.layer_params = layer_params_of(sw.plan);  // as make_plan records them
    if (kept.identity.empty()) kept.identity = sw.identity;
    make_dirs(sw.plan_dir);
    write_file_atomic(sw.plan_dir + "/" + plan_file_name(c.name), plan_to_json(kept));
    sw.planned.insert(c.name);
  }
  if (!sw.trace_dir.empty() && !sw.traced.count(c.name)) write_trace(sw, c, *s);  // untimed too
  sw.active = std::move(s);
  sw.active_name = c.name;
  return *sw.active;
}

}  // namespace

void prime(Sweep& sw, const std::vector<Config>& configs) {
  if (sw.base_resident <= 0) sw.base_resident = static_cast<double>(resident_bytes());  // run sets it first
  if (configs.empty()) return;
  // The first configuration and one at the largest device count: thread pools, libraries'
  // set-up, first-touched heap and the clock's ramp then cost no configuration its figure.
  std::vector<const Config*> which = {&configs.front()};
  const Config* widest = &*std::max_element(configs.begin(), configs.end(),
                                            [](const Config& a, const Config& b) { return a.devices < b.devices; });
  if (widest->devices != configs.front().devices) which.push_back(widest);
  for (const Config* c : which) {
    if (process().rank == 0) fmt::print(stderr, "parbench: priming the process with {} (untimed)\n", c->name);
    try {
      Strategy& s = prepare(sw, *c);
      const auto t0 = std::chrono::steady_clock::now();
      // At least 2 steps and a quarter second; every rank decides alike (world_max).
      for (int i = 1; i <= 50; ++i) {
        s.step();
        const double spent = world_max(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        if (i >= 2 && spent >= 0.25) break;
      }
    } catch (const std::exception& e) {
      // The configuration itself reports the error when it runs; only a job must not go on
      // with ranks left in a collective.
      if (multi_process() && !dynamic_cast<const UsageError*>(&e))
        abort_job(fmt::format("parbench run: priming with {}: {}", c->name, e.what()), 1);
    }
    sw.release();
  }
}

namespace {
std::string file_safe(const std::string& bench) {
  std::string out;
  for (char ch : bench) out += (std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '.') ? ch : '_';
  return out;
}
}  // namespace

std::string trace_file_name(const std::string& bench) { return "trace-" + file_safe(bench) + ".json"; }

std::string plan_file_name(const std::string& bench) { return file_safe(bench) + ".json"; }

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
  // Sums over the iterations of each step's breakdown (strategies/breakdown.h).
  double bytes_sent = 0, transfer_max = 0, exposed = 0, bubble = 0;
  double shares[4] = {0, 0, 0, 0};  // compute, transfer, idle, other
  double kind_bytes[kCollKinds] = {}, kind_s[kCollKinds] = {}, kind_bus[kCollKinds] = {};
  bool staged = false;
  StepStats last;
  std::vector<std::vector<double>> worker_compute;  // [worker][iteration]: for the straggler rule
  for (auto _ : state) {
    try {
      const auto t0 = std::chrono::steady_clock::now();
      s->step();  // returns when the slowest worker is done, device work synchronized
      // Across processes the iteration lasts until the slowest rank is done.
      const double dt = world_max(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      state.SetIterationTime(dt);
      // Below is outside the measured time (UseManualTime counts only dt).
      times.push_back(dt);
      if (!sw.warmup_s.count(c.name)) sw.warmup_s[c.name] = dt;  // --warmup 0: this was the first step
      last = s->stats();
      const StepBreakdown b = breakdown(last);
      worker_compute.resize(last.workers.size());
      for (std::size_t w = 0; w < last.workers.size(); ++w) worker_compute[w].push_back(last.workers[w].compute_s);
      bytes_sent += b.bytes_sent;
      transfer_max += b.transfer_s_max;
      exposed += b.exposed_comm_s;
      shares[0] += b.compute_share, shares[1] += b.transfer_share, shares[2] += b.idle_share, shares[3] += b.other_share;
      if (b.measured_bubble) bubble += *b.measured_bubble, staged = true;
      for (int k = 0; k < kCollKinds; ++k)
        if (b.kinds[k]) {
          kind_bytes[k] += b.kinds[k]->bytes, kind_s[k] += b.kinds[k]->seconds;
          kind_bus[k] = b.kinds[k]->busbw / b.kinds[k]->algbw;  // the factor: the same every step
        }
    } catch (const std::exception& e) {
      fail(e);
      break;
    }
  }
  if (state.error_occurred() || times.empty()) return;
  sw.calls[c.name].push_back(times);
  const double iters = static_cast<double>(times.size()), samples = static_cast<double>(c.global_batch);
  double peak_max = 0, peak0 = last.workers.empty() ? 0 : static_cast<double>(last.workers[0].peak_bytes);
  for (const WorkerStats& w : last.workers) peak_max = std::max(peak_max, static_cast<double>(w.peak_bytes));
  using benchmark::Counter;
  namespace k = reports::schema::counter;
  // Rates divide by the manual (measured) time.
  state.counters[k::samples_per_s.name] = Counter(samples * iters, Counter::kIsRate);
  state.counters[k::flop_per_s.name] = Counter(3 * sw.plan.forward_flops * samples * iters, Counter::kIsRate);
  if (sw.roofline.known()) {
    // The devices the configuration holds; workers sharing GPUs (--oversubscribe) hold fewer.
    const int held = last.oversubscribed && c.options.kind == DeviceKind::Cuda ? std::min(c.devices, cuda_device_count())
                                                                              : c.devices;
    const double peak = sw.roofline.peak_for(held);
    state.counters[k::peak_flop_per_s.name] = peak;
    state.counters[k::mfu.name] = Counter(3 * sw.plan.forward_flops * samples * iters / peak, Counter::kIsRate);
  }
  state.counters[k::warmup_s.name] = sw.warmup_s.at(c.name);
  state.counters[k::global_batch.name] = samples;
  state.counters[k::devices.name] = c.devices;
  state.counters[k::peak_bytes_max.name] = peak_max;
  state.counters[k::peak_bytes_dev0.name] = peak0;
  state.counters[k::bytes_sent_per_iter.name] = bytes_sent / iters;
  // Per stage, the skips it sends a step (a net with skips cut into stages): from its plan.
  std::vector<int64_t> skips;
  if (last.staged && s->step_plan()) {
    skips = skip_bytes(*s->step_plan());
    int64_t all = 0;
    for (int64_t b : skips) all += b;
    if (all > 0) state.counters[k::skip_bytes_per_iter.name] = static_cast<double>(all);
  }
  if (c.options.kind == DeviceKind::Cpu) state.counters[k::worker_threads.name] = c.options.backend.threads;
  state.counters[k::transfer_s_max.name] = transfer_max / iters;
  state.counters[k::compute_share.name] = shares[0] / iters;
  state.counters[k::transfer_share.name] = shares[1] / iters;
  state.counters[k::idle_share.name] = shares[2] / iters;
  state.counters[k::other_share.name] = shares[3] / iters;
  state.counters[k::exposed_comm_s.name] = exposed / iters;
  if (staged) state.counters[k::measured_bubble.name] = bubble / iters;
  for (int kind = 0; kind < kCollKinds; ++kind) {
    if (kind_s[kind] <= 0) continue;
    const std::string name = coll_kind_name(static_cast<CollKind>(kind));
    const double algbw = kind_bytes[kind] / kind_s[kind];  // over the iterations: sum of bytes / sum of times
    if (reports::schema::is_counter("algbw_" + name)) state.counters["algbw_" + name] = algbw;
    if (reports::schema::is_counter("busbw_" + name)) state.counters["busbw_" + name] = algbw * kind_bus[kind];
  }
  state.counters[k::bubble_fraction.name] = last.bubble_fraction;
  state.counters[k::micro_batches.name] = last.micro_batches;
  state.counters[k::workers_used.name] = last.workers_used;
  state.counters[k::oversubscribed.name] = last.oversubscribed ? 1 : 0;
  state.counters[k::iter_cv.name] = reports::coefficient_of_variation(times);
  // Spread and stragglers (reports/straggler.h): every rank knows every worker's compute times.
  state.counters[k::iter_p50_s.name] = reports::percentile(times, 50);
  state.counters[k::iter_p99_s.name] = reports::percentile(times, 99);
  if (worker_compute.size() > 1) {
    const reports::Straggler st = reports::find_straggler(worker_compute);
    state.counters[k::straggler_ratio.name] = st.ratio;
    if (st.rank >= 0) state.counters[k::straggler_rank.name] = st.rank;
  }
  {
    // Memory by part; tensors + workspace are the allocators' peak, runtime what else the device holds.
    const int visible = c.options.kind == DeviceKind::Cuda ? cuda_device_count() : c.devices;
    std::vector<Device> devs;
    for (int i = 0; i < std::min(c.devices, visible); ++i) devs.push_back(Device{c.options.kind, i});
    MemoryUse mem = measure_memory(devs);
    // CPU: the resident memory beside the allocators after earlier configurations holds what they
    // left (glibc's heap and thread stacks, library caches), so it would depend on the sweep's
    // order; the process's own, before any configuration, is the same for every one.
    if (c.options.kind == DeviceKind::Cpu) mem.runtime = sw.base_resident;
    if (multi_process())  // every rank reports; the largest of each part over the ranks
      mem = {world_max(mem.tensors), world_max(mem.workspace), world_max(mem.runtime)};
    state.counters[k::device_peak_bytes.name] = mem.total();
    state.counters[k::tensor_bytes.name] = mem.tensors;
    state.counters[k::workspace_bytes.name] = mem.workspace;
    state.counters[k::runtime_bytes.name] = mem.runtime;
    // The estimate made before the configuration ran, and what it estimates: every worker's
    // allocator peak (tensors + workspace), summed.
    double allocated = 0;
    for (const Device& d : devs) {
      const Allocator& a = allocator_for(d);
      allocated += static_cast<double>(a.at_peak_bytes(MemoryPool::Tensors) + a.at_peak_bytes(MemoryPool::Workspace));
    }
    if (multi_process()) world_sum(&allocated, 1);
    state.counters[k::predicted_bytes.name] = sw.predicted_bytes.at(c.name);
    state.counters[k::allocated_bytes.name] = allocated;
  }
  state.SetLabel("communicator " + last.communicator);
  sw.layouts[c.name] = layout_json(last, skips);
}

RecordingReporter::RecordingReporter(benchmark::BenchmarkReporter* display, bool mib, std::string path,
                                     const Sweep& sweep)
    : display_(display), mib_(mib), path_(std::move(path)), sweep_(sweep) {
  json_.SetOutputStream(&buffer_);
  json_.SetErrorStream(&buffer_);
}

bool RecordingReporter::ReportContext(const Context& context) {
  bool ok = true;
  if (display_) ok = display_->ReportContext(context);
  else for (const std::string& line : reports::console_header()) fmt::print("{}\n", line);
  std::fflush(stdout);
  json_.ReportContext(context);
  save(false);
  return ok;
}

void RecordingReporter::ReportRuns(const std::vector<Run>& runs) {
  // The console shows byte counters in MiB, as the tables do, under names that say so
  // (device_peak_MiB): GB's own display would print 2^20 or 10^6 bytes alike as "M".
  std::vector<Run> shown = runs;
  for (Run& r : shown) {
    if (!mib_) break;
    benchmark::UserCounters in_mib;
    for (const auto& [name, counter] : r.counters) {
      std::string n = name;
      const bool bytes = std::any_of(std::begin(reports::schema::kCounters), std::end(reports::schema::kCounters),
                                     [&](const reports::schema::Key& k) { return name == k.name && std::string(k.unit) == "bytes"; });
      if (bytes && n.find("bytes") != std::string::npos) n.replace(n.find("bytes"), 5, "MiB");
      in_mib[n] = bytes ? benchmark::Counter(counter.value / reports::schema::kMiB, counter.flags) : counter;
    }
    r.counters = std::move(in_mib);
  }
  if (display_) display_->ReportRuns(shown);
  json_.ReportRuns(runs);
  for (const Run& r : runs) {
    const std::string name = r.run_name.function_name;
    if (r.error_occurred) failed_.insert(name);
    auto it = sweep_.calls.find(name);
    if (it == sweep_.calls.end() || it->second.empty()) continue;
    // A repetition's timed call is its last; GB searches the iteration count (smaller calls)
    // only before the first repetition and reuses it, so the timed calls are the trailing ones
    // of the final size, one per repetition.
    const std::vector<std::vector<double>>& calls = it->second;
    std::vector<std::vector<double>> reps;
    for (auto c = calls.rbegin(); c != calls.rend() && c->size() == calls.back().size(); ++c) reps.insert(reps.begin(), *c);
    const std::size_t want = static_cast<std::size_t>(std::max<int64_t>(1, r.repetitions));
    if (reps.size() > want) reps.erase(reps.begin(), reps.end() - static_cast<std::ptrdiff_t>(want));
    times_[name] = std::move(reps);
  }
  save(false);
  if (!display_) print_lines(runs);
}

// Each configuration's line once, from its first report (repetitions; GB's aggregates follow),
// read back from the record as `parbench report` reads it.
void RecordingReporter::print_lines(const std::vector<Run>& runs) {
  std::vector<std::string> names;
  for (const Run& r : runs)
    if (!printed_.count(r.run_name.function_name) &&
        std::find(names.begin(), names.end(), r.run_name.function_name) == names.end())
      names.push_back(r.run_name.function_name);
  if (names.empty()) return;
  reports::Report rep;
  try {
    rep = reports::build_report({reports::parse_run_json(saved_, path_)});
  } catch (const std::exception& e) {  // the record is written; only its console line is lost
    fmt::print(stderr, "parbench run: no console line for {}: {}\n", fmt::join(names, ", "), e.what());
    return;
  }
  for (const std::string& name : names)
    for (const reports::Group& g : rep.groups)
      for (const reports::Row& row : g.rows)
        if (row.name == reports::benchmark_identity(name)) {
          if (titles_.insert(g.title()).second)  // what the lines below share
            fmt::print("\n{}:\n{}\n", g.title(), reports::console_columns());
          fmt::print("{}\n", reports::console_line(row));
          printed_.insert(name);
        }
  std::fflush(stdout);
}

void RecordingReporter::Finalize() {
  if (display_) display_->Finalize();
  json_.Finalize();
  save(true);
}

void RecordingReporter::save(bool finalized) {
  // JSONReporter::Finalize closes the array and the object with exactly this text.
  std::string text = finalized ? buffer_.str() : buffer_.str() + "\n  ]\n}\n";
  const std::size_t close = text.rfind('}');
  PB_CHECK(close != std::string::npos, "the Google Benchmark JSON for {} has no closing brace", path_);
  nlohmann::json layouts = nlohmann::json::object();
  for (const auto& [name, j] : sweep_.layouts) layouts[name] = nlohmann::json::parse(j);
  text.insert(close, fmt::format(",\n  \"{}\": {},\n  \"{}\": {}\n", reports::schema::iteration_times.name,
                                 nlohmann::json(times_).dump(), reports::schema::layout.name, layouts.dump()));
  PB_CHECK(nlohmann::json::accept(reports::nan_to_null(text)), "the Google Benchmark JSON for {} does not parse", path_);
  write_file_atomic(path_, text);
  saved_ = std::move(text);
}

}  // namespace pb
