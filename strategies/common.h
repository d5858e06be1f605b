// What the multi-device strategies share: the persistent worker pool, worker devices, batch
// chunking, stage splitting, and a base class that runs and accounts one step over the workers.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

#include "engine/comm.h"
#include "strategies/strategy.h"

namespace pb {

// One thread per worker, alive from setup to destruction, fed one task per call.
class WorkerPool {
 public:
  explicit WorkerPool(int n);
  ~WorkerPool();  // joins
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;
  int size() const { return static_cast<int>(threads_.size()); }
  // Runs fn(i) on workers i < count and returns when all are done, rethrowing the first
  // exception. on_error runs on a failing worker's thread, e.g. to abort a communicator the
  // other workers are blocked in.
  void run(int count, const std::function<void(int)>& fn, const std::function<void()>& on_error = {});

 private:
  void loop(int i);
  std::mutex mu_;  // guards everything below; also orders the caller's writes before a task's reads
  std::condition_variable start_cv_, done_cv_;
  const std::function<void(int)>* fn_ = nullptr;
  const std::function<void()>* on_error_ = nullptr;
  int count_ = 0, pending_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  std::vector<std::thread> threads_;
};

// Worker i's device: cpu(i), or GPU i -- i % GPUs when oversubscribed (then *oversubscribed).
// UsageError for more workers than GPUs without StrategyOptions::oversubscribe. In a
// multi-process job worker i is world rank i, on GPU (its local rank) or cpu(i).
std::vector<Device> worker_devices(const StrategyOptions& o, const std::string& strategy, bool* oversubscribed);

// torch.chunk pieces of a batch over `workers` (chunk_sizes), with a warning on stderr when
// some workers get none, as they then sit idle.
std::vector<int64_t> split_batch(int64_t batch, int workers, const std::string& strategy);
std::vector<int64_t> chunk_offsets(const std::vector<int64_t>& sizes);  // start of each piece

// Layer ranges [begin, end) of `stages` contiguous stages: `balance` (layers per stage) when not
// empty, else balanced by forward FLOPs with zero-FLOP layers (ReLU, Flatten) kept with their
// producer. UsageError when a stage would get no layer or the balance does not fit the net.
std::vector<std::pair<int, int>> split_stages(const NetPlan& plan, int stages, const std::vector<int>& balance,
                                              const std::string& strategy);

// Base of the strategies over several workers: worker i owns a thread, a backend and stats.
// The workers are the ranks 0..N-1 of the job; the *local* ones run in this process: all N in a
// single process, only the world rank in a multi-process (MPI) job. Everything that runs on
// workers runs on the local ones; whatever reads another worker's state goes through a
// communicator or the helpers below, so one code path serves both.
class MultiWorkerStrategy : public Strategy {
 public:
  std::string name() const override { return name_; }
  // Every worker's stats; in a multi-process job gathered from all processes (collective).
  StepStats stats() const override;

 protected:
  // across_processes: whether the strategy can run as one process per worker (dp cannot).
  MultiWorkerStrategy(const StrategyOptions& o, std::string name, bool across_processes = true);
  int workers() const { return static_cast<int>(devices_.size()); }
  bool is_local(int i) const { return local_mask_.at(i) != 0; }
  int first_local() const { return local_.front(); }
  Backend& backend(int i) { return *backends_[i]; }
  // Workers [0, count) as a communicator's ranks: null for those of other processes.
  std::vector<Backend*> backends(int count) const;
  // Starts the pool and the local backends on first use (each backend made on its own worker's
  // thread, the one that drives it), resets the devices' peak memory, then runs init(i).
  void start_workers(const std::function<void(int)>& init);
  // Untimed per-worker work (setup, load_batch) on the local workers of [0, count).
  void on_workers(int count, const std::function<void(int)>& fn);
  // One step's work fn(i) on the local workers of [0, count) communicating through comm (size
  // count): records each worker's time (its device work included), communication share and
  // bytes; workers >= count sit idle. A failing worker aborts comm so the others do not hang.
  void run_step(int count, Communicator& comm, const std::function<void(int)>& fn);
  // UsageError unless all workers take part when they live in separate processes (a
  // communicator over a subset of the job's processes is not supported).
  void require_all_workers(int used) const;

  // Across all workers of the job (collective in a multi-process job: every process calls):
  // the sum of value(i) over workers [0, count) (value is asked of local workers only) ...
  double sum_over_workers(int count, const std::function<double(int)>& value);
  // ... the whole parameter vector held by worker `owner` (store fills it when local) ...
  std::vector<float> params_of(int owner, int64_t count, const std::function<void(std::vector<float>&)>& store);
  // ... and the parameter vector whose disjoint pieces the workers hold (store(i, full) writes
  // worker i's piece at its place): the pieces of all processes combined.
  std::vector<float> params_from_pieces(int64_t count, const std::function<void(int, std::vector<float>&)>& store);

  const StrategyOptions opts_;
  StepStats stats_;  // one WorkerStats per worker; strategies fill samples and layers

 private:
  // fn(i) on the local workers of [0, count), worker i always on the same pool thread.
  void run_local(int count, const std::function<void(int)>& fn, const std::function<void()>& on_error = {});

  std::string name_;
  std::vector<Device> devices_;   // every worker's, local or not
  std::vector<int> local_;        // local workers, ascending
  std::vector<char> local_mask_;
  std::vector<std::unique_ptr<Backend>> backends_;
  std::unique_ptr<WorkerPool> pool_;  // declared last, so joined before the backends go
};

}  // namespace pb
