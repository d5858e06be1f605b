// Workers, their devices and their group: placement, the per-step loop and the host-side
// collectives (engine/process.h) every strategy shares.
#include "strategies/group.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "engine/check.h"
#include "engine/gpu_placement.h"
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
    // From every rank's PCI bus ids (collective), so every rank reaches the same verdict. Not a
    // UsageError: it depends on the hosts, not on the flags (see run.cpp).
    const JobGpus& job = job_gpus();
    if (const std::string problem = placement_problem(job.ranks, job.placement, strategy, o.oversubscribe);
        !problem.empty())
      throw Error(problem);
    *oversubscribed = job.placement.shared;
    for (int i = 0; i < o.devices; ++i) out.push_back(cuda(job.placement.device[i]));
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
  partitions_.clear();
  comm_.reset();
  pool_.reset();  // before the workers' backends go
}

void Group::start(const std::function<void(Worker&)>& init) {
  partitions_.clear();
  comm_.reset();
  if (!pool_) {
    try {
      // CPU workers of one thread each: each bound to a core, in turn.
      const int n = static_cast<int>(local_.size());
      bool cpu_only = true;
      for (int i : local_) cpu_only = cpu_only && workers_[i]->device.kind == DeviceKind::Cpu;
      pool_ = std::make_unique<WorkerPool>(n, cpu_only ? WorkerPool::cores_for(n, opts_.backend.threads) : std::vector<int>{});
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

// Test hook (docs/reports.md, "Stragglers"): PARBENCH_SLOW_RANK=R:FACTOR makes worker R's compute
// FACTOR times its own by sleeping (FACTOR - 1) x its step's compute time, booked as forward.
bool Group::slow_rank_hook(Worker& w, std::chrono::steady_clock::time_point origin) {
  const char* v = std::getenv("PARBENCH_SLOW_RANK");
  if (!v) return false;
  int rank = -1;
  double factor = 0;
  if (std::sscanf(v, "%d:%lf", &rank, &factor) != 2 || rank < 0 || !(factor >= 1))
    throw UsageError(fmt::format("PARBENCH_SLOW_RANK={}: expected RANK:FACTOR, a rank >= 0 and a factor >= 1", v));
  if (rank != w.rank) return false;
  Tracer& t = w.tracer;
  const double compute = t.total(Phase::Forward) + t.total(Phase::Backward) + t.total(Phase::Optimizer) + t.total(Phase::Loss);
  const auto from = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(compute * (factor - 1)));
  const auto to = std::chrono::steady_clock::now();
  auto at = [&](std::chrono::steady_clock::time_point p) { return std::chrono::duration<double>(p - origin).count(); };
  t.add({Phase::Forward, Lane::Compute, -1, t.named() ? "PARBENCH_SLOW_RANK" : "", at(from), at(to)});
  return true;
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

void Group::connect_parts(const std::string& key, const std::vector<std::vector<int>>& parts) {
  auto it = std::find_if(partitions_.begin(), partitions_.end(), [&](const Partition& p) { return p.key == key; });
  if (it != partitions_.end()) {
    bool same = parts.size() == it->parts.size();
    for (std::size_t p = 0; same && p < parts.size(); ++p) same = parts[p] == it->parts[p].workers;
    if (same) return;
    partitions_.erase(it);
  }
  Partition made;
  made.key = key;
  made.part_of.assign(workers_.size(), -1), made.rank_in.assign(workers_.size(), -1);
  for (std::size_t p = 0; p < parts.size(); ++p)
    for (std::size_t r = 0; r < parts[p].size(); ++r) {
      const int i = parts[p][r];
      PB_CHECK(i >= 0 && i < size() && made.part_of[i] < 0, "{}: worker {} is in no or several parts of {}", strategy_, i, key);
      made.part_of[i] = static_cast<int>(p), made.rank_in[i] = static_cast<int>(r);
    }
  bool in_a_part = false;  // this process (a multi-process job's)
  for (std::size_t p = 0; p < parts.size(); ++p) {
    Part part{parts[p], nullptr};
    std::vector<Backend*> ranks;
    bool local = false;
    for (int i : part.workers) {
      ranks.push_back(is_local(i) ? workers_[i]->backend.get() : nullptr);
      local = local || is_local(i);
    }
    if (multi_process()) {
#ifdef PARBENCH_HAVE_MPI
      // Collective: every process makes its own part's, in the same call.
      if (local) part.comm = make_mpi_split_communicator(ranks, static_cast<int>(p)), in_a_part = true;
#else
      PB_CHECK(false, "{}: a multi-process job without MPI", strategy_);
#endif
    } else {
      part.comm = make_communicator(ranks);
    }
    made.parts.push_back(std::move(part));
  }
#ifdef PARBENCH_HAVE_MPI
  // A process in none of the parts (a channel of two workers) takes part in the call all the same.
  if (multi_process() && !in_a_part)
    for (int i = 0; i < size(); ++i)
      if (is_local(i)) {
        mpi_split_without_part(*workers_[i]->backend);
        break;
      }
#endif
  partitions_.push_back(std::move(made));
}

const Group::Partition& Group::partition(const std::string& key) const {
  for (const Partition& p : partitions_)
    if (p.key == key) return p;
  PB_CHECK(false, "{}: no partition {} was connected", strategy_, key);
  return partitions_.front();
}

Communicator& Group::part_comm(const std::string& key, int i) {
  const Partition& p = partition(key);
  PB_CHECK(p.part_of.at(i) >= 0 && p.parts[p.part_of[i]].comm, "{}: worker {} has no part in {} here", strategy_, i, key);
  return *p.parts[p.part_of[i]].comm;
}

int Group::part_rank(const std::string& key, int i) const { return partition(key).rank_in.at(i); }

void Group::require_all_workers(int used) const {
  if (multi_process() && used < size())
    throw UsageError(fmt::format("{}: the batch gives {} chunk(s) for {} processes; in a multi-process job every "
                                 "rank needs a chunk (use a larger batch)", strategy_, used, size()));
}

// PARBENCH_SPANS=0 records no spans (the breakdown is then empty: all idle or remainder), for
// A/B runs that measure what recording them costs.
static bool spans_on() {
  static const bool on = [] {
    const char* e = std::getenv("PARBENCH_SPANS");
    return !(e && std::string(e) == "0");
  }();
  return on;
}

void Group::run_step(int count, const std::function<void(Worker&)>& fn) {
  using clock = std::chrono::steady_clock;
  Communicator& comm = connect(count);
  const bool spans = spans_on();
  const auto origin = clock::now();
  std::vector<clock::time_point> ends(workers_.size(), origin);
  run_local(count, [&](Worker& w) {
    comm.reset_stats(w.rank);
    std::vector<std::pair<Communicator*, int>> parts;  // the worker's part of each partition, and its rank
    for (const Partition& p : partitions_)
      if (p.part_of[w.rank] >= 0) parts.emplace_back(p.parts[p.part_of[w.rank]].comm.get(), p.rank_in[w.rank]);
    for (auto& [c, r] : parts) c->reset_stats(r);
    if (spans || detail_) {
      comm.set_tracer(w.rank, &w.tracer);
      for (auto& [c, r] : parts) c->set_tracer(r, &w.tracer);
      w.tracer.set_detail(detail_);
      w.tracer.begin_step(*w.backend, origin);
    } else {
      w.tracer.clear();
    }
    fn(w);
    w.backend->synchronize();  // the worker's time includes its queued device work
    ends[w.rank] = clock::now();
    WorkerStats& s = w.stats;  // only this worker's entry: no race
    CommStats c = comm.stats(w.rank);  // complete now: the device work is done
    for (auto& [pc, r] : parts) {
      const CommStats& more = pc->stats(r);
      c.seconds += more.seconds, c.wait_s += more.wait_s, c.bytes += more.bytes, c.calls += more.calls;
      for (int k = 0; k < kCollKinds; ++k)
        c.kinds[k].bytes += more.kinds[k].bytes, c.kinds[k].seconds += more.kinds[k].seconds,
            c.kinds[k].calls += more.kinds[k].calls;
      pc->set_tracer(r, nullptr);
    }
    w.tracer.end_step();  // the compute spans are complete now
    if (slow_rank_hook(w, origin)) ends[w.rank] = clock::now();
    comm.set_tracer(w.rank, nullptr);
    s.comm_s = s.transfer_s = c.seconds;
    s.wait_s = c.wait_s;
    s.comm_bytes = c.bytes;
    for (int k = 0; k < kCollKinds; ++k) s.kinds[k] = c.kinds[k];
  }, [&] {
    comm.abort();
    for (Partition& p : partitions_)
      for (Part& part : p.parts)
        if (part.comm) part.comm->abort();
  });
  used_ = count;
  clock::time_point end = origin;
  for (int i : local_)
    if (i < count) end = std::max(end, ends[i]);
  step_s_ = std::chrono::duration<double>(end - origin).count();
  // A worker is idle from the step's start until its thread takes the step up, and from its own
  // end until the slowest worker's; workers without a part are idle throughout.
  for (int i = 0; i < size(); ++i) {
    Worker& w = *workers_[i];
    WorkerStats& s = w.stats;
    s.step_s = step_s_;
    if (i >= count) {
      s.samples = 0, s.comm_bytes = 0;
      s.forward_s = s.backward_s = s.optimizer_s = s.loss_s = s.compute_s = 0;
      s.comm_s = s.transfer_s = s.wait_s = s.exposed_transfer_s = s.other_s = 0;
      for (CollStats& k : s.kinds) k = CollStats{};
      s.idle_s = step_s_;
      s.spans.clear();
      if (step_s_ > 0) s.spans.push_back({Phase::Idle, Lane::Compute, -1, "no part in this step", 0.0, step_s_});
      continue;
    }
    if (!is_local(i)) continue;
    Tracer& t = w.tracer;
    if (t.started_s() > 0) t.add({Phase::Idle, Lane::Compute, -1, t.named() ? "wait for step start" : "", 0.0, t.started_s()});
    const double own_end = std::chrono::duration<double>(ends[i] - origin).count();
    if (step_s_ > own_end)
      t.add({Phase::Idle, Lane::Compute, -1, t.named() ? "wait for step end" : "", own_end, step_s_});
    s.forward_s = t.total(Phase::Forward);
    s.backward_s = t.total(Phase::Backward);
    s.optimizer_s = t.total(Phase::Optimizer);
    s.loss_s = t.total(Phase::Loss);
    s.compute_s = s.forward_s + s.backward_s + s.optimizer_s + s.loss_s;
    s.idle_s = t.total(Phase::Idle);
    // Event-ordered communicators time transfers on the device (comm_s); host-side ones as spans.
    s.transfer_s = std::max(s.comm_s, t.total(Phase::Transfer));
    s.exposed_transfer_s = t.exposed_transfer_s();
    s.other_s = step_s_ - s.compute_s - s.transfer_s - s.idle_s;
    s.spans = t.spans();
  }
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

std::vector<float> Group::params_from_pieces(int64_t count, int holders) {
  std::vector<float> full(static_cast<std::size_t>(count), 0.0f);
  for (int i : local_)
    if (holders < 0 || i < holders) {
      workers_[i]->model->store_params(full);
      for (const auto& c : workers_[i]->chunks) c->store_params(full);
    }
  world_sum(full.data(), count);  // each value is one process's piece plus zeros: exact
  return full;
}

StepStats Group::stats() const {
  StepStats s;
  s.workers_used = used_;
  s.oversubscribed = oversubscribed_;
  s.step_s = step_s_;
  if (comm_) s.communicator = comm_->name();
  for (const auto& w : workers_) s.workers.push_back(w->stats);
  for (int i : local_) s.workers[i].peak_bytes = allocator_for(workers_[i]->device).peak_bytes();
  if (!multi_process()) return s;
  // Each process knows its own worker's numbers: gather them as a sum over zeros elsewhere.
  auto fields = [](WorkerStats& w) {
    std::vector<double*> f = {&w.compute_s, &w.comm_s, &w.wait_s, &w.forward_s, &w.backward_s, &w.optimizer_s,
                              &w.loss_s, &w.transfer_s, &w.idle_s, &w.other_s, &w.exposed_transfer_s, &w.step_s};
    for (CollStats& k : w.kinds) f.push_back(&k.seconds);
    return f;
  };
  auto counts = [](WorkerStats& w) {
    std::vector<double> c = {static_cast<double>(w.samples), static_cast<double>(w.comm_bytes),
                             static_cast<double>(w.peak_bytes)};
    for (const CollStats& k : w.kinds) c.push_back(static_cast<double>(k.bytes)), c.push_back(static_cast<double>(k.calls));
    return c;
  };
  WorkerStats probe;
  const std::size_t nf = fields(probe).size(), nc = counts(probe).size(), per = nf + nc;
  std::vector<double> v(s.workers.size() * per, 0.0);
  for (int i : local_) {
    WorkerStats& w = s.workers[i];
    double* f = &v[static_cast<std::size_t>(i) * per];
    const auto fp = fields(w);
    for (std::size_t k = 0; k < nf; ++k) f[k] = *fp[k];
    const auto c = counts(w);
    for (std::size_t k = 0; k < nc; ++k) f[nf + k] = c[k];
  }
  world_sum(v.data(), static_cast<int64_t>(v.size()));
  for (std::size_t i = 0; i < s.workers.size(); ++i) {
    WorkerStats& w = s.workers[i];
    const double* f = &v[i * per];
    const auto fp = fields(w);
    for (std::size_t k = 0; k < nf; ++k) *fp[k] = f[k];
    const double* c = f + nf;
    w.samples = static_cast<int64_t>(c[0]), w.comm_bytes = static_cast<std::size_t>(c[1]);
    w.peak_bytes = static_cast<std::size_t>(c[2]);
    for (int k = 0; k < kCollKinds; ++k)
      w.kinds[k].bytes = static_cast<std::size_t>(c[3 + 2 * k]), w.kinds[k].calls = static_cast<int64_t>(c[4 + 2 * k]);
  }
  // Each process timed its own step; they start together (each follows a collective), so a rank
  // done before the slowest one waits for it, idle, as a thread does in one process.
  s.step_s = 0;
  for (const WorkerStats& w : s.workers) s.step_s = std::max(s.step_s, w.step_s);
  for (std::size_t i = 0; i < s.workers.size(); ++i) {
    WorkerStats& w = s.workers[i];
    if (w.step_s >= s.step_s) continue;
    if (is_local(static_cast<int>(i)))
      w.spans.push_back({Phase::Idle, Lane::Compute, -1, "wait for the slowest rank", w.step_s, s.step_s});
    w.idle_s += s.step_s - w.step_s;
    w.step_s = s.step_s;
  }
  return s;
}

}  // namespace pb
