// The worker pool, device assignment, batch and stage splitting shared by dp, ddp, mp, pipeline.
#include "strategies/common.h"

#include <chrono>
#include <cstdlib>
#include <limits>

#include <fmt/ranges.h>

#include "engine/check.h"
#include "engine/mpi/mpi_env.h"

namespace pb {

WorkerPool::WorkerPool(int n) {
  PB_CHECK(n >= 1, "a pool of {} workers", n);
  for (int i = 0; i < n; ++i) threads_.emplace_back([this, i] { loop(i); });
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void WorkerPool::run(int count, const std::function<void(int)>& fn, const std::function<void()>& on_error) {
  PB_CHECK(0 <= count && count <= size(), "{} tasks for {} workers", count, size());
  if (count == 0) return;
  std::exception_ptr error;
  {
    std::unique_lock<std::mutex> lock(mu_);
    fn_ = &fn;
    on_error_ = &on_error;
    count_ = pending_ = count;
    error_ = nullptr;
    ++generation_;
    start_cv_.notify_all();
    done_cv_.wait(lock, [&] { return pending_ == 0; });
    error = error_;
  }
  if (error) std::rethrow_exception(error);
}

void WorkerPool::loop(int i) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int)>* fn = nullptr;
    const std::function<void()>* on_error = nullptr;
    {
      std::unique_lock<std::mutex> lock(mu_);
      start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      if (i >= count_) continue;  // not part of this task
      fn = fn_;
      on_error = on_error_;
    }
    try {
      (*fn)(i);
    } catch (...) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (!error_) error_ = std::current_exception();  // the first failure, not the aborts it causes
      }
      if (*on_error) (*on_error)();
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (--pending_ == 0) done_cv_.notify_all();
  }
}

std::vector<Device> worker_devices(const StrategyOptions& o, const std::string& strategy, bool* oversubscribed) {
  *oversubscribed = false;
  std::vector<Device> out;
  const ProcessInfo& p = process();
  if (p.size > 1) {  // one process per worker, on GPU (local rank) or cpu(rank)
    if (o.devices != p.size)
      throw UsageError(fmt::format("{}: --devices {} in an MPI job of {} processes: one process per device, so "
                                   "--devices must be {}", strategy, o.devices, p.size, p.size));
    if (o.kind == DeviceKind::Cpu) {
      for (int i = 0; i < o.devices; ++i) out.push_back(cpu(i));
      return out;
    }
    const int gpus = cuda_device_count();
    if (gpus == 0) throw Error(fmt::format("{}: CUDA workers requested, but rank {} sees no CUDA device", strategy, p.rank));
    // Not a UsageError: it depends on this host, so other ranks may not fail alike (see run.cpp).
    if (p.local_rank >= gpus && !o.oversubscribe)
      throw Error(fmt::format("{}: rank {} is local rank {} on {} but the host has only {} GPU(s); launch one "
                                   "process per GPU, or pass --oversubscribe", strategy, p.rank, p.local_rank,
                                   p.hosts[p.rank], gpus));
    for (int i = 0; i < o.devices; ++i) {
      *oversubscribed = *oversubscribed || p.local_ranks[i] >= gpus;
      out.push_back(cuda(p.local_ranks[i] % gpus));
    }
    return out;
  }
  if (o.kind == DeviceKind::Cpu) {
    for (int i = 0; i < o.devices; ++i) out.push_back(cpu(i));
    return out;
  }
  const int gpus = cuda_device_count();
  if (gpus == 0) throw UsageError(fmt::format("{}: CUDA workers requested, but no CUDA device is available", strategy));
  if (o.devices > gpus && !o.oversubscribe)
    throw UsageError(fmt::format("{}: {} workers but only {} GPU(s); pass --oversubscribe to let workers share GPUs",
                                 strategy, o.devices, gpus));
  *oversubscribed = o.devices > gpus;
  for (int i = 0; i < o.devices; ++i) out.push_back(cuda(i % gpus));
  return out;
}

std::vector<int64_t> split_batch(int64_t batch, int workers, const std::string& strategy) {
  PB_CHECK(batch >= 1, "batch of {}", batch);
  std::vector<int64_t> sizes = chunk_sizes(batch, workers);
  if (static_cast<int>(sizes.size()) < workers)
    fmt::print(stderr, "parbench: warning: {}: a batch of {} over {} workers gives {} chunk(s) ({}); {} worker(s) sit idle\n",
               strategy, batch, workers, sizes.size(), fmt::join(sizes, ","), workers - static_cast<int>(sizes.size()));
  return sizes;
}

std::vector<int64_t> chunk_offsets(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> out;
  int64_t at = 0;
  for (int64_t s : sizes) {
    out.push_back(at);
    at += s;
  }
  return out;
}

std::vector<std::pair<int, int>> split_stages(const NetPlan& plan, int stages, const std::vector<int>& balance,
                                              const std::string& strategy) {
  const int layers = static_cast<int>(plan.layers.size());
  if (stages > layers)
    throw UsageError(fmt::format("{}: {} stages (one per device) but the net has only {} layer(s); every stage needs one",
                                 strategy, stages, layers));
  std::vector<std::pair<int, int>> out;
  if (!balance.empty()) {
    if (static_cast<int>(balance.size()) != stages)
      throw UsageError(fmt::format("{}: --balance {} has {} entries for {} stages (devices)", strategy,
                                   fmt::join(balance, ","), balance.size(), stages));
    int at = 0;
    for (int b : balance) {
      if (b < 1) throw UsageError(fmt::format("{}: --balance {}: every stage needs at least one layer", strategy, fmt::join(balance, ",")));
      out.emplace_back(at, at + b);
      at += b;
    }
    if (at != layers)
      throw UsageError(fmt::format("{}: --balance {} sums to {}, but the net has {} layers", strategy,
                                   fmt::join(balance, ","), at, layers));
    return out;
  }
  // Stages start only before a layer with FLOPs, so a ReLU stays with its producer -- unless
  // that leaves too few places to cut.
  std::vector<int> pos = {0};
  for (int i = 1; i < layers; ++i)
    if (plan.layers[i].forward_flops > 0) pos.push_back(i);
  if (static_cast<int>(pos.size()) < stages) {
    pos.clear();
    for (int i = 0; i < layers; ++i) pos.push_back(i);
  }
  pos.push_back(layers);
  std::vector<double> prefix(layers + 1, 0.0);
  for (int i = 0; i < layers; ++i) prefix[i + 1] = prefix[i] + plan.layers[i].forward_flops;
  // Linear partition: best[p][j] = smallest possible largest-stage FLOPs for layers [0, pos[j])
  // in p stages; from[p][j] = where its last stage starts.
  const int K = static_cast<int>(pos.size());
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(stages + 1, std::vector<double>(K, inf));
  std::vector<std::vector<int>> from(stages + 1, std::vector<int>(K, -1));
  best[0][0] = 0;
  for (int p = 1; p <= stages; ++p)
    for (int j = p; j < K; ++j)
      for (int i = p - 1; i < j; ++i) {
        const double c = std::max(best[p - 1][i], prefix[pos[j]] - prefix[pos[i]]);
        if (c < best[p][j]) best[p][j] = c, from[p][j] = i;
      }
  out.resize(stages);
  for (int p = stages, j = K - 1; p >= 1; j = from[p][j], --p) out[p - 1] = {pos[from[p][j]], pos[j]};
  return out;
}

MultiWorkerStrategy::MultiWorkerStrategy(const StrategyOptions& o, std::string name, bool across_processes)
    : opts_(o), name_(std::move(name)) {
  const ProcessInfo& p = process();
  if (p.size > 1 && !across_processes)
    throw UsageError(fmt::format("strategy {} runs in a single process (its workers share device 0's memory); "
                                 "run it without mpirun", name_));
  devices_ = worker_devices(o, name_, &stats_.oversubscribed);
  stats_.workers.resize(devices_.size());
  local_mask_.assign(devices_.size(), p.size > 1 ? 0 : 1);
  if (p.size > 1) local_mask_[p.rank] = 1;
  for (std::size_t i = 0; i < devices_.size(); ++i) {
    stats_.workers[i].device = devices_[i].str();
    if (p.size > 1) stats_.workers[i].device += "@" + p.hosts[i];
    if (local_mask_[i]) local_.push_back(static_cast<int>(i));
  }
}

std::vector<Backend*> MultiWorkerStrategy::backends(int count) const {
  std::vector<Backend*> out;
  for (int i = 0; i < count; ++i) out.push_back(is_local(i) ? backends_[i].get() : nullptr);
  return out;
}

void MultiWorkerStrategy::start_workers(const std::function<void(int)>& init) {
  if (!pool_) pool_ = std::make_unique<WorkerPool>(static_cast<int>(local_.size()));
  backends_.resize(devices_.size());
  on_workers(workers(), [&](int i) {
    if (!backends_[i]) backends_[i] = make_backend(devices_[i], opts_.backend);
    // Test hook: the job's failure handling (a rank that throws must end the job, not hang it).
    if (const char* r = std::getenv("PARBENCH_FAIL_RANK"); r && multi_process() && std::atoi(r) == i)
      throw Error(fmt::format("PARBENCH_FAIL_RANK={}: rank {} fails its setup on purpose", r, i));
  });
  for (int i : local_) allocator_for(devices_[i]).reset_peak();
  on_workers(workers(), init);
}

void MultiWorkerStrategy::run_local(int count, const std::function<void(int)>& fn,
                                    const std::function<void()>& on_error) {
  PB_CHECK(pool_ != nullptr, "{}: setup() must come first", name_);
  std::vector<int> ids;
  for (int i : local_)
    if (i < count) ids.push_back(i);
  pool_->run(static_cast<int>(ids.size()), [&](int t) { fn(ids[t]); }, on_error);
}

void MultiWorkerStrategy::on_workers(int count, const std::function<void(int)>& fn) { run_local(count, fn); }

void MultiWorkerStrategy::require_all_workers(int used) const {
  if (multi_process() && used < workers())
    throw UsageError(fmt::format("{}: the batch gives {} chunk(s) for {} processes; in a multi-process job every "
                                 "rank needs a chunk (use a larger batch)", name_, used, workers()));
}

double MultiWorkerStrategy::sum_over_workers(int count, const std::function<double(int)>& value) {
  double sum = 0;
  for (int i : local_)
    if (i < count) sum += value(i);
  world_sum(&sum, 1);
  return sum;
}

std::vector<float> MultiWorkerStrategy::params_of(int owner, int64_t count,
                                                  const std::function<void(std::vector<float>&)>& store) {
  std::vector<float> full(static_cast<std::size_t>(count));
  if (is_local(owner)) store(full);
  world_broadcast(full.data(), count, owner);  // worker i is world rank i
  return full;
}

std::vector<float> MultiWorkerStrategy::params_from_pieces(int64_t count,
                                                           const std::function<void(int, std::vector<float>&)>& store) {
  std::vector<float> full(static_cast<std::size_t>(count), 0.0f);
  for (int i : local_) store(i, full);
  world_sum(full.data(), count);  // each value is one process's piece plus zeros: exact
  return full;
}

void MultiWorkerStrategy::run_step(int count, Communicator& comm, const std::function<void(int)>& fn) {
  PB_CHECK(comm.size() == count, "a step over {} workers with a communicator of {}", count, comm.size());
  for (int i = count; i < workers(); ++i) {
    WorkerStats& w = stats_.workers[i];
    w.samples = 0, w.compute_s = w.comm_s = 0, w.comm_bytes = 0;
  }
  run_local(
      count,
      [&](int i) {
        comm.reset_stats(i);
        const auto t0 = std::chrono::steady_clock::now();
        fn(i);
        backends_[i]->synchronize();  // the worker's time includes its queued device work
        const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        WorkerStats& w = stats_.workers[i];  // only this worker's entry: no race
        w.comm_s = comm.stats(i).seconds;
        w.comm_bytes = comm.stats(i).bytes;
        w.compute_s = std::max(0.0, total - w.comm_s);
      },
      [&] { comm.abort(); });
  stats_.workers_used = count;
  stats_.communicator = comm.name();
}

StepStats MultiWorkerStrategy::stats() const {
  StepStats s = stats_;
  for (int i : local_) s.workers[i].peak_bytes = allocator_for(devices_[i]).peak_bytes();
  if (!multi_process()) return s;
  // Each process knows its own worker's numbers: gather them as a sum over zeros elsewhere.
  constexpr int kFields = 5;
  std::vector<double> v(s.workers.size() * kFields, 0.0);
  for (int i : local_) {
    const WorkerStats& w = s.workers[i];
    double* f = &v[static_cast<std::size_t>(i) * kFields];
    f[0] = static_cast<double>(w.samples), f[1] = w.compute_s, f[2] = w.comm_s;
    f[3] = static_cast<double>(w.comm_bytes), f[4] = static_cast<double>(w.peak_bytes);
  }
  world_sum(v.data(), static_cast<int64_t>(v.size()));
  for (std::size_t i = 0; i < s.workers.size(); ++i) {
    WorkerStats& w = s.workers[i];
    const double* f = &v[i * kFields];
    w.samples = static_cast<int64_t>(f[0]), w.compute_s = f[1], w.comm_s = f[2];
    w.comm_bytes = static_cast<std::size_t>(f[3]), w.peak_bytes = static_cast<std::size_t>(f[4]);
  }
  return s;
}

}  // namespace pb
