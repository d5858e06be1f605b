// Workers and their group: the machinery every strategy runs on.
//
// A Worker is one rank of the job: its device and backend, its stage of the net (the whole net
// for a replica), its Adam state, the buffers a strategy gives it and its stats. A Group holds
// every worker of the job, drives the *local* ones (all of them in a single process, only the
// world rank in a multi-process MPI job) and owns the communicator between them; its host-side
// collectives hide whether the other ranks are threads or processes, so one strategy code path
// serves both.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/comm.h"
#include "engine/model.h"
#include "engine/tensor.h"
#include "strategies/pool.h"
#include "strategies/strategy.h"

namespace pb {

struct Worker {
  int rank = 0;
  Device device;
  std::unique_ptr<Backend> backend;   // local workers only; made on the thread that drives it
  std::unique_ptr<Sequential> model;  // its stage: layers [model->begin(), model->end())
  std::vector<std::unique_ptr<Sequential>> chunks;  // interleaved pipelines: its further stages
  std::unique_ptr<Adam> adam;
  // Buffers, as the strategy uses them: input, target, output, output gradient, input gradient,
  // loss sum(s).
  Tensor x, t, y, dy, dx, loss;
  WorkerStats stats;
  Tracer tracer;  // the spans of its current step
  Backend& be() { return *backend; }
};

// Worker i's device: cpu(i), or GPU i -- i % GPUs when oversubscribed (then *oversubscribed).
// UsageError for more workers than GPUs without StrategyOptions::oversubscribe. In a
// multi-process job worker i is world rank i, on cpu(i) or the GPU its PCI bus id places it on
// (engine/gpu_placement.h; shared GPUs need oversubscribe too).
std::vector<Device> worker_devices(const StrategyOptions& o, const std::string& strategy, bool* oversubscribed);

class Group {
 public:
  // across_processes: whether the strategy can run as one process per worker (dp cannot).
  Group(const StrategyOptions& o, std::string strategy, bool across_processes);
  ~Group();
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  int size() const { return static_cast<int>(workers_.size()); }
  bool is_local(int i) const { return local_mask_.at(i) != 0; }
  Worker& worker(int i) { return *workers_.at(i); }
  const Worker& worker(int i) const { return *workers_.at(i); }
  Worker& first_local() { return worker(local_.front()); }
  const StrategyOptions& options() const { return opts_; }

  // Untimed: starts the local workers on first use (threads, backends), resets the devices' peak
  // memory and drops the communicator, then runs init on every local worker.
  void start(const std::function<void(Worker&)>& init);
  // Untimed per-worker work (setup, load_batch) on the local workers of [0, count).
  void on_workers(int count, const std::function<void(Worker&)>& fn);
  // The communicator over workers [0, count); made (collectively across processes) when missing
  // or of another size.
  Communicator& connect(int count);
  Communicator& comm() { return *comm_; }
  // Communicators over the parts of a partition of the workers named `key` (each part: worker
  // ranks, ascending), beside the one of connect(): e.g. the workers that hold the same pipeline
  // stage. Made (collectively across processes, partitions in the same order everywhere) unless
  // the partition already has these parts; a worker's calls on its parts' communicators count in
  // its step's stats like those on comm().
  void connect_parts(const std::string& key, const std::vector<std::vector<int>>& parts);
  // Worker i's part of partition `key`: its communicator, and i's rank there.
  Communicator& part_comm(const std::string& key, int i);
  int part_rank(const std::string& key, int i) const;
  // One step's work on the local workers of [0, count) (the communicator's ranks): records each
  // worker's time (its device work included), communication share and bytes; workers >= count
  // sit idle. A failing worker aborts the communicator so the others do not hang.
  // Per worker: the step's breakdown from its tracer (forward, backward, loss, optimizer,
  // transfer, idle -- before its part began and after it ended too -- and the remainder).
  void run_step(int count, const std::function<void(Worker&)>& fn);
  // Per-layer, named spans in the steps from now on.
  void set_trace_detail(bool on) { detail_ = on; }
  // UsageError unless all workers take part when they live in separate processes (a
  // communicator over a subset of the job's processes is not supported).
  void require_all_workers(int used) const;

  // Across all workers of the job (collective in a multi-process job: every process calls):
  // the sum of value(w) over workers [0, count) (asked of local workers only) ...
  double sum(int count, const std::function<double(Worker&)>& value);
  // ... the whole parameter vector held by worker `owner` ...
  std::vector<float> params_of(int owner, int64_t count);
  // ... and the parameter vector whose disjoint pieces (stages) workers [0, holders) hold
  // (holders < 0: all of them).
  std::vector<float> params_from_pieces(int64_t count, int holders = -1);
  // Every worker's stats, gathered from all processes in a multi-process job.
  StepStats stats() const;

 private:
  // fn(w) on the local workers of [0, count), each always on the same pool thread.
  void run_local(int count, const std::function<void(Worker&)>& fn, const std::function<void()>& on_error = {});
  // PARBENCH_SLOW_RANK: a worker made slow on purpose, for the straggler tests.
  // Returns whether it slept (the worker's end is then later).
  bool slow_rank_hook(Worker& w, std::chrono::steady_clock::time_point origin);

  const StrategyOptions opts_;
  std::string strategy_;
  bool oversubscribed_ = false;
  int used_ = 0;
  double step_s_ = 0;
  bool detail_ = false;
  std::vector<std::unique_ptr<Worker>> workers_;  // every rank's, local or not
  std::vector<int> local_;                        // local ranks, ascending
  std::vector<char> local_mask_;
  std::unique_ptr<Communicator> comm_;
  struct Part {
    std::vector<int> workers;
    std::unique_ptr<Communicator> comm;  // null where no worker of the part is local
  };
  struct Partition {
    std::string key;
    std::vector<Part> parts;
    std::vector<int> part_of, rank_in;  // per worker: its part (-1: none) and rank in it
  };
  const Partition& partition(const std::string& key) const;
  std::vector<Partition> partitions_;  // in the order made
  std::unique_ptr<WorkerPool> pool_;  // declared last, so joined before the backends go
};

// The base of every strategy: the Strategy interface over a Group, with the shared preamble --
// the setup check, the gradient scale 2 / (B * out) of the global mean, the loss normalisation,
// parameter gathering -- written once. A strategy supplies the per-worker parts, above all
// step(Worker&, Group&): what one rank does in one iteration.
class GroupStrategy : public Strategy {
 public:
  std::string name() const final { return name_; }
  void setup(const NetPlan& plan, const std::vector<float>& params, const AdamParams& adam) final;
  void load_batch(const std::vector<float>& x, const std::vector<float>& target, int64_t batch) final;
  void step() final;
  double loss() final;
  std::vector<float> params() override;  // fsdp gathers its shards instead
  StepStats stats() const final;
  void set_trace_detail(bool on) final { group_.set_trace_detail(on); }

 protected:
  // replicas: every worker holds the whole net (worker 0 the trained values) rather than a stage.
  GroupStrategy(const StrategyOptions& o, std::string name, bool across_processes, bool replicas);

  // Untimed, before the workers start: e.g. the stage split.
  virtual void plan_workers() {}
  // Untimed, on each local worker: its model, parameters, optimizer and fixed buffers.
  virtual void setup_worker(Worker& w, const std::vector<float>& params, const AdamParams& adam) = 0;
  // Untimed: how many workers [0, n) take part for this batch (the rest sit idle) ...
  virtual int plan_batch(int64_t batch) = 0;
  // ... and on each of them, its part of the batch (x, target: the whole batch on the host).
  virtual void load_worker(Worker& w, const std::vector<float>& x, const std::vector<float>& target) = 0;
  // One iteration's work of one rank; grad_scale() is the loss gradient's scale.
  virtual void step(Worker& w, Group& g) = 0;
  // The worker's part of the global loss sum of the last step.
  virtual double loss_sum(Worker& w);

  Group& group() { return group_; }
  const NetPlan& plan() const { return plan_; }
  int64_t batch() const { return batch_; }
  float grad_scale() const { return grad_scale_; }
  int workers() const { return group_.size(); }

  const StrategyOptions opts_;
  int micro_batches_ = 1;      // reported in stats (pipeline)
  double bubble_fraction_ = 0;  // reported in stats (mp, pipeline)
  bool staged_ = false;         // reported in stats (mp, pipeline)
  std::vector<std::pair<int, int>> chunk_stages_;  // reported in stats (pipeline-interleaved)
  std::vector<BucketLayout> bucket_layout_;  // reported in stats (ddp)

 private:
  std::string name_;
  bool replicas_;
  Group group_;
  NetPlan plan_;  // the workers' models refer to it
  int64_t batch_ = 0;
  int used_ = 0;
  float grad_scale_ = 0;
  bool ready_ = false, loaded_ = false;
};

}  // namespace pb
