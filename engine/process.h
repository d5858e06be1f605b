// The process context of a multi-process job: this process's rank among the job's processes
// (one per device), initialisation and finalisation of MPI, and the few host-side collectives the
// harness and the strategies' base class need. Without MPI (or when not launched by an MPI
// launcher) the job is this one process and every collective is the identity. Implemented by
// engine/mpi/mpi_env.cpp (MPI builds) or engine/process_solo.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pb {

struct ProcessInfo {
  int rank = 0, size = 1;
  int local_rank = 0;               // among the job's processes on this host (GPUs: engine/gpu_placement.h)
  std::vector<int> local_ranks;     // per rank
  std::vector<std::string> hosts;   // per rank
  std::vector<int> host_cpus;       // per rank: the CPUs its host's ranks may run on (their affinity masks' union)
};

// Whether an MPI launcher started this process (OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK set),
// so that a plain `parbench` never needs mpirun.
bool launched_by_mpi();

// Initialises MPI when launched by MPI, and finalises it on destruction. The workers' calls are
// serialized (a worker thread drives the communicator while the main thread waits); MPI_THREAD_MULTIPLE,
// where provided, lets a thread progress started operations beside them (engine/mpi/mpi_progress.h).
class ProcessSession {
 public:
  ProcessSession(int* argc, char*** argv);
  ~ProcessSession();
  ProcessSession(const ProcessSession&) = delete;
  ProcessSession& operator=(const ProcessSession&) = delete;
};

const ProcessInfo& process();  // rank 0 of 1 until a session initialised MPI
inline bool multi_process() { return process().size > 1; }

// Host-side collectives over all processes; every process calls them in the same order.
void world_sum(double* v, int64_t n);
void world_sum(float* v, int64_t n);
void world_broadcast(float* v, int64_t n, int root);
double world_max(double v);
std::vector<uint64_t> world_allgather(uint64_t v);
std::vector<std::string> world_allgather(const std::string& v);  // per rank

// A blocking MPI call (collective, send, receive, wait) that lasts longer than this ends the job
// with a message naming this rank and the call: a stopped or hung rank must not hang the others
// forever. 0 disables the watchdog. Default kDefaultCommTimeout; set from --comm-timeout.
constexpr double kDefaultCommTimeout = 300;
void set_comm_timeout(double seconds);
// The same limit, for the NCCL communicator's watchdog (engine/nccl/nccl_comm.cpp).
double comm_timeout();

// Marks a blocking MPI call for the watchdog for the object's life. `what` names the call.
class CommWatch {
 public:
  explicit CommWatch(const char* what);
  ~CommWatch();
  CommWatch(const CommWatch&) = delete;
  CommWatch& operator=(const CommWatch&) = delete;
};

// Prints "parbench: rank R (host): error: MSG" and ends the whole job with exit code `code`
// (MPI_Abort): a failing rank must not leave the others blocked in a collective.
[[noreturn]] void abort_job(const std::string& msg, int code);

}  // namespace pb
