// One configuration's setup, warm-up and timed steps under Google Benchmark, and the recording
// reporter. Counter names come from reports/schema.h, the contract with the readers.
#include "bench/sweep.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "engine/check.h"
#include "engine/fsutil.h"
#include "engine/memory_estimate.h"
#include "engine/process.h"
#include "reports/gbjson.h"
#include "reports/schema.h"
#include "reports/stats.h"

namespace pb {

namespace {

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
  for (int64_t i = 0; i < sw.warmup; ++i) s->step();  // untimed: algorithm search, allocator warm-up
  sw.active = std::move(s);
  sw.active_name = c.name;
  return *sw.active;
}

}  // namespace

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
  sw.calls[c.name].push_back(times);
  const double iters = static_cast<double>(times.size()), samples = static_cast<double>(c.global_batch);
  double peak_max = 0, peak0 = last.workers.empty() ? 0 : static_cast<double>(last.workers[0].peak_bytes);
  for (const WorkerStats& w : last.workers) peak_max = std::max(peak_max, static_cast<double>(w.peak_bytes));
  using benchmark::Counter;
  namespace k = reports::schema::counter;
  // Rates divide by the manual (measured) time.
  state.counters[k::samples_per_s.name] = Counter(samples * iters, Counter::kIsRate);
  state.counters[k::flop_per_s.name] = Counter(3 * sw.plan.forward_flops * samples * iters, Counter::kIsRate);
  state.counters[k::global_batch.name] = samples;
  state.counters[k::devices.name] = c.devices;
  state.counters[k::peak_bytes_max.name] = peak_max;
  state.counters[k::peak_bytes_dev0.name] = peak0;
  state.counters[k::comm_bytes_per_iter.name] = comm_bytes / iters;
  state.counters[k::comm_s_per_iter.name] = comm_s / iters;
  state.counters[k::bubble_fraction.name] = last.bubble_fraction;
  state.counters[k::micro_batches.name] = last.micro_batches;
  state.counters[k::workers_used.name] = last.workers_used;
  state.counters[k::oversubscribed.name] = last.oversubscribed ? 1 : 0;
  state.counters[k::iter_cv.name] = reports::coefficient_of_variation(times);
  {
    // Memory by part; tensors + workspace are the allocators' peak, runtime what else the device holds.
    const int visible = c.options.kind == DeviceKind::Cuda ? cuda_device_count() : c.devices;
    std::vector<Device> devs;
    for (int i = 0; i < std::min(c.devices, visible); ++i) devs.push_back(Device{c.options.kind, i});
    MemoryUse mem = measure_memory(devs);
    if (multi_process())  // every rank reports; the largest of each part over the ranks
      mem = {world_max(mem.tensors), world_max(mem.workspace), world_max(mem.runtime)};
    state.counters[k::device_peak_bytes.name] = mem.total();
    state.counters[k::tensor_bytes.name] = mem.tensors;
    state.counters[k::workspace_bytes.name] = mem.workspace;
    state.counters[k::runtime_bytes.name] = mem.runtime;
  }
  state.SetLabel("communicator " + last.communicator);
}

RecordingReporter::RecordingReporter(benchmark::BenchmarkReporter* display, std::string path, const Sweep& sweep)
    : display_(display), path_(std::move(path)), sweep_(sweep) {
  json_.SetOutputStream(&buffer_);
  json_.SetErrorStream(&buffer_);
}

bool RecordingReporter::ReportContext(const Context& context) {
  const bool ok = display_->ReportContext(context);
  json_.ReportContext(context);
  save(false);
  return ok;
}

void RecordingReporter::ReportRuns(const std::vector<Run>& runs) {
  display_->ReportRuns(runs);
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
}

void RecordingReporter::Finalize() {
  display_->Finalize();
  json_.Finalize();
  save(true);
}

void RecordingReporter::save(bool finalized) {
  // JSONReporter::Finalize closes the array and the object with exactly this text.
  std::string text = finalized ? buffer_.str() : buffer_.str() + "\n  ]\n}\n";
  const std::size_t close = text.rfind('}');
  PB_CHECK(close != std::string::npos, "the Google Benchmark JSON for {} has no closing brace", path_);
  text.insert(close, fmt::format(",\n  \"{}\": {}\n", reports::schema::iteration_times.name, nlohmann::json(times_).dump()));
  PB_CHECK(nlohmann::json::accept(reports::nan_to_null(text)), "the Google Benchmark JSON for {} does not parse", path_);
  write_file_atomic(path_, text);
}

}  // namespace pb
