// Workers, their devices and their group: placement, the per-step loop and the host-side
// collectives (engine/process.h) every strategy shares.
#include "strategies/group.h"

#include <chrono>
#include <cstdlib>

#include "engine/check.h"
#include "engine/process.h"

namespace pb {

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

Group::Group(const StrategyOptions& o, std::string strategy, bool across_processes)
    : opts_(o), strategy_(std::move(strategy)) {
  const ProcessInfo& p = process();
  if (p.size > 1 && !across_processes)
    throw UsageError(fmt::format("strategy {} runs in a single process (its workers share device 0's memory); "
                                 "run it without mpirun", strategy_));
  const std::vector<Device> devices = worker_devices(o, strategy_, &oversubscribed_);
  local_mask_.assign(devices.size(), p.size > 1 ? 0 : 1);
  if (p.size > 1) local_mask_[p.rank] = 1;
  for (std::size_t i = 0; i < devices.size(); ++i) {
    auto w = std::make_unique<Worker>();
    w->rank = static_cast<int>(i);
    w->device = devices[i];
    w->stats.device = devices[i].str();
    if (p.size > 1) w->stats.device += "@" + p.hosts[i];
    workers_.push_back(std::move(w));
    if (local_mask_[i]) local_.push_back(static_cast<int>(i));
  }
}

Group::~Group() {
  comm_.reset();
  pool_.reset();  // before the workers' backends go
}

void Group::start(const std::function<void(Worker&)>& init) {
  comm_.reset();
  if (!pool_) {
    try {
      pool_ = std::make_unique<WorkerPool>(static_cast<int>(local_.size()));
    } catch (const Error& e) {  // the system's thread or memory limits: too many workers here
      throw UsageError(fmt::format("{}: --devices {}: {}; use fewer devices", strategy_, size(), e.what()));
    }
  }
  on_workers(size(), [&](Worker& w) {
    if (!w.backend) w.backend = make_backend(w.device, opts_.backend);
    // Test hook: the job's failure handling (a rank that throws must end the job, not hang it).
    if (const char* r = std::getenv("PARBENCH_FAIL_RANK"); r && multi_process() && std::atoi(r) == w.rank)
      throw Error(fmt::format("PARBENCH_FAIL_RANK={}: rank {} fails its setup on purpose", r, w.rank));
  });
  for (int i : local_) allocator_for(workers_[i]->device).reset_peak();
  on_workers(size(), init);
}

void Group::run_local(int count, const std::function<void(Worker&)>& fn, const std::function<void()>& on_error) {
  PB_CHECK(pool_ != nullptr, "{}: setup() must come first", strategy_);
  int n = 0;  // local_ is ascending: the local workers below count are its first n
  while (n < static_cast<int>(local_.size()) && local_[n] < count) ++n;
  pool_->run(n, [&](int t) { fn(*workers_[local_[t]]); }, on_error);
}

void Group::on_workers(int count, const std::function<void(Worker&)>& fn) { run_local(count, fn); }

Communicator& Group::connect(int count) {
  if (!comm_ || comm_->size() != count) {
    comm_.reset();
    std::vector<Backend*> ranks;
    for (int i = 0; i < count; ++i) ranks.push_back(is_local(i) ? workers_[i]->backend.get() : nullptr);
    comm_ = make_communicator(ranks);
  }
  return *comm_;
}

void Group::require_all_workers(int used) const {
  if (multi_process() && used < size())
    throw UsageError(fmt::format("{}: the batch gives {} chunk(s) for {} processes; in a multi-process job every "
                                 "rank needs a chunk (use a larger batch)", strategy_, used, size()));
}

void Group::run_step(int count, const std::function<void(Worker&)>& fn) {
  Communicator& comm = connect(count);
  for (int i = count; i < size(); ++i) {
    WorkerStats& s = workers_[i]->stats;
    s.samples = 0, s.compute_s = s.comm_s = s.wait_s = 0, s.comm_bytes = 0;
  }
  run_local(count, [&](Worker& w) {
    comm.reset_stats(w.rank);
    const auto t0 = std::chrono::steady_clock::now();
    fn(w);
    w.backend->synchronize();  // the worker's time includes its queued device work
    const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    WorkerStats& s = w.stats;  // only this worker's entry: no race
    const CommStats& c = comm.stats(w.rank);  // complete now: the device work is done
    s.comm_s = c.seconds;
    s.wait_s = c.wait_s;
    s.comm_bytes = c.bytes;
    s.compute_s = std::max(0.0, total - s.comm_s - s.wait_s);
  }, [&] { comm.abort(); });
  used_ = count;
}

double Group::sum(int count, const std::function<double(Worker&)>& value) {
  double s = 0;
  for (int i : local_)
    if (i < count) s += value(*workers_[i]);
  world_sum(&s, 1);
  return s;
}

std::vector<float> Group::params_of(int owner, int64_t count) {
  std::vector<float> full(static_cast<std::size_t>(count));
  if (is_local(owner)) workers_[owner]->model->store_params(full);
  world_broadcast(full.data(), count, owner);  // worker i is world rank i
  return full;
}

std::vector<float> Group::params_from_pieces(int64_t count) {
  std::vector<float> full(static_cast<std::size_t>(count), 0.0f);
  for (int i : local_) workers_[i]->model->store_params(full);
  world_sum(full.data(), count);  // each value is one process's piece plus zeros: exact
  return full;
}

StepStats Group::stats() const {
  StepStats s;
  s.workers_used = used_;
  s.oversubscribed = oversubscribed_;
  if (comm_) s.communicator = comm_->name();
  for (const auto& w : workers_) s.workers.push_back(w->stats);
  for (int i : local_) s.workers[i].peak_bytes = allocator_for(workers_[i]->device).peak_bytes();
  if (!multi_process()) return s;
  // Each process knows its own worker's numbers: gather them as a sum over zeros elsewhere.
  constexpr int kFields = 6;
  std::vector<double> v(s.workers.size() * kFields, 0.0);
  for (int i : local_) {
    const WorkerStats& w = s.workers[i];
    double* f = &v[static_cast<std::size_t>(i) * kFields];
    f[0] = static_cast<double>(w.samples), f[1] = w.compute_s, f[2] = w.comm_s;
    f[3] = static_cast<double>(w.comm_bytes), f[4] = static_cast<double>(w.peak_bytes), f[5] = w.wait_s;
  }
  world_sum(v.data(), static_cast<int64_t>(v.size()));
  for (std::size_t i = 0; i < s.workers.size(); ++i) {
    WorkerStats& w = s.workers[i];
    const double* f = &v[i * kFields];
    w.samples = static_cast<int64_t>(f[0]), w.compute_s = f[1], w.comm_s = f[2];
    w.comm_bytes = static_cast<std::size_t>(f[3]), w.peak_bytes = static_cast<std::size_t>(f[4]), w.wait_s = f[5];
  }
  return s;
}

}  // namespace pb
