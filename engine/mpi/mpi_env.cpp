// The process context under MPI: MPI_Init_thread when an MPI launcher started us, world rank and
// size, local rank (MPI_Comm_split_type SHARED: the processes on this host), hostnames, and the
// host-side collectives over MPI_COMM_WORLD.
#include "engine/process.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <mpi.h>
#include <sched.h>
#include <unistd.h>

#include "engine/check.h"
#include "engine/mpi/mpi_progress.h"

namespace pb {

namespace {
// The CPUs this process may run on.
cpu_set_t affinity() {
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  if (sched_getaffinity(0, sizeof cpus, &cpus) != 0) CPU_SET(0, &cpus);
  return cpus;
}

ProcessInfo g_info = [] {
  ProcessInfo p;
  p.local_ranks = {0};
  char host[256] = {0};
  gethostname(host, sizeof host - 1);  // MPI_Get_processor_name is not callable before MPI_Init
  p.hosts = {host};
  const cpu_set_t cpus = affinity();
  p.host_cpus = {CPU_COUNT(&cpus)};
  return p;
}();
bool g_initialized = false;

// The watchdog: one thread that wakes every second and ends the job when the blocking MPI call in
// progress (at most one at a time: the workers' calls are serialized) has lasted longer than the
// timeout.
struct Watchdog {
  std::mutex mu;
  std::condition_variable cv;
  double timeout_s = kDefaultCommTimeout;
  const char* what = nullptr;
  int depth = 0;
  std::chrono::steady_clock::time_point since;
  bool stop = false;
  std::thread thread;

  void loop() {
    std::unique_lock<std::mutex> lock(mu);
    while (!stop) {
      cv.wait_for(lock, std::chrono::seconds(1));
      if (stop || !what || timeout_s <= 0) continue;
      const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
      if (waited <= timeout_s) continue;
      const std::string msg = fmt::format(
          "{} has waited {:.0f} s for the other ranks (--comm-timeout {:g}): a rank has stopped, hung or died; "
          "ending the job",
          what, waited, timeout_s);
      lock.unlock();
      abort_job(msg, 1);
    }
  }
};
Watchdog g_watchdog;

// See mpi_progress.h. MPI_Iprobe on a communicator of its own matches nothing and touches no
// request of the workers', but drives the library's progress engine, which moves every message.
struct Progress {
  std::mutex mu;
  std::condition_variable cv;
  int in_flight = 0;
  bool stop = false;
  bool on = false;
  MPI_Comm comm = MPI_COMM_NULL;
  std::thread thread;

  void loop() {
    std::unique_lock<std::mutex> lock(mu);
    while (!stop) {
      if (in_flight <= 0) {
        cv.wait(lock);
        continue;
      }
      lock.unlock();
      int flag = 0;
      MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm, &flag, MPI_STATUS_IGNORE);
      // A sleep, not a spin: the worker's compute keeps its core.
      std::this_thread::sleep_for(std::chrono::microseconds(20));
      lock.lock();
    }
  }
};
Progress g_progress;

int count_of(int64_t n) {
  PB_CHECK(0 <= n && n <= INT_MAX, "an MPI message of {} values", n);
  return static_cast<int>(n);
}
// Open MPI's shared-memory transport polls: a rank inside a collective whose peer shares its CPU
// spins until the scheduler runs that peer, and that time is booked as transfer (docs/mpi.md,
// "More ranks than CPUs").
void warn_oversubscribed_hosts(const ProcessInfo& p) {
  std::vector<std::string> seen;
  for (int r = 0; r < p.size; ++r) {
    if (std::find(seen.begin(), seen.end(), p.hosts[r]) != seen.end()) continue;
    seen.push_back(p.hosts[r]);
    const auto ranks = std::count(p.hosts.begin(), p.hosts.end(), p.hosts[r]);
    if (ranks > p.host_cpus[r])
      std::fprintf(stderr,
                   "parbench: warning: %ld ranks on host %s share %d CPU%s: their collectives wait for peers the "
                   "scheduler has not run, and that wait is booked as transfer (docs/mpi.md, \"More ranks than CPUs\")\n",
                   static_cast<long>(ranks), p.hosts[r].c_str(), p.host_cpus[r], p.host_cpus[r] == 1 ? "" : "s");
  }
}

}  // namespace

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(v)) return true;
  return false;
}

ProcessSession::ProcessSession(int* argc, char*** argv) {
  if (!launched_by_mpi()) return;
  g_watchdog.thread = std::thread([] { g_watchdog.loop(); });
  int provided = 0;
  MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided));
  g_initialized = true;
  // Errors come back as codes, which MPI_CHECK turns into exceptions (main then aborts the job).
  MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  if (provided < MPI_THREAD_SERIALIZED)
    abort_job("this MPI library does not provide MPI_THREAD_SERIALIZED, which the worker threads need", 1);
  // PARBENCH_MPI_PROGRESS=0: no progress thread, for A/B runs that measure what it costs and gives.
  const char* progress = std::getenv("PARBENCH_MPI_PROGRESS");
  if (provided >= MPI_THREAD_MULTIPLE && !(progress && std::string(progress) == "0")) {
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &g_progress.comm));
    g_progress.on = true;
    g_progress.thread = std::thread([] { g_progress.loop(); });
  }
  ProcessInfo& p = g_info;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &p.rank));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &p.size));
  MPI_Comm node;
  MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, p.rank, MPI_INFO_NULL, &node));
  MPI_CHECK(MPI_Comm_rank(node, &p.local_rank));
  cpu_set_t cpus = affinity();  // the host's ranks' together
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &cpus, static_cast<int>(sizeof cpus), MPI_BYTE, MPI_BOR, node));
  int host_cpus = CPU_COUNT(&cpus);
  MPI_CHECK(MPI_Comm_free(&node));
  p.host_cpus.assign(p.size, 0);
  MPI_CHECK(MPI_Allgather(&host_cpus, 1, MPI_INT, p.host_cpus.data(), 1, MPI_INT, MPI_COMM_WORLD));
  p.local_ranks.assign(p.size, 0);
  MPI_CHECK(MPI_Allgather(&p.local_rank, 1, MPI_INT, p.local_ranks.data(), 1, MPI_INT, MPI_COMM_WORLD));
  char host[MPI_MAX_PROCESSOR_NAME] = {0};
  int len = 0;
  MPI_CHECK(MPI_Get_processor_name(host, &len));
  std::vector<char> all(static_cast<std::size_t>(p.size) * MPI_MAX_PROCESSOR_NAME);
  MPI_CHECK(MPI_Allgather(host, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR,
                          MPI_COMM_WORLD));
  p.hosts.clear();
  for (int r = 0; r < p.size; ++r) p.hosts.emplace_back(all.data() + static_cast<std::size_t>(r) * MPI_MAX_PROCESSOR_NAME);
  if (p.rank == 0) warn_oversubscribed_hosts(p);
}

ProcessSession::~ProcessSession() {
  if (g_watchdog.thread.joinable()) {
    {
      std::lock_guard<std::mutex> lock(g_watchdog.mu);
      g_watchdog.stop = true;
    }
    g_watchdog.cv.notify_all();
    g_watchdog.thread.join();
  }
  if (g_progress.thread.joinable()) {
    {
      std::lock_guard<std::mutex> lock(g_progress.mu);
      g_progress.stop = true;
    }
    g_progress.cv.notify_all();
    g_progress.thread.join();
    MPI_Comm_free(&g_progress.comm);
  }
  if (g_initialized) MPI_Finalize();
  g_initialized = false;
}

void set_comm_timeout(double seconds) {
  std::lock_guard<std::mutex> lock(g_watchdog.mu);
  g_watchdog.timeout_s = seconds;
}

double comm_timeout() {
  std::lock_guard<std::mutex> lock(g_watchdog.mu);
  return g_watchdog.timeout_s;
}

CommWatch::CommWatch(const char* what) {
  std::lock_guard<std::mutex> lock(g_watchdog.mu);
  if (g_watchdog.depth++ == 0) {
    g_watchdog.what = what;
    g_watchdog.since = std::chrono::steady_clock::now();
  }
}

CommWatch::~CommWatch() {
  std::lock_guard<std::mutex> lock(g_watchdog.mu);
  if (--g_watchdog.depth == 0) g_watchdog.what = nullptr;
}

void mpi_progress_begin(int n) {
  if (!g_progress.on || n <= 0) return;
  {
    std::lock_guard<std::mutex> lock(g_progress.mu);
    g_progress.in_flight += n;
  }
  g_progress.cv.notify_one();
}

void mpi_progress_end(int n) {
  if (!g_progress.on || n <= 0) return;
  std::lock_guard<std::mutex> lock(g_progress.mu);
  g_progress.in_flight -= n;
}

bool mpi_progress_thread() { return g_progress.on; }

const ProcessInfo& process() { return g_info; }

void world_sum(double* v, int64_t n) {
  if (multi_process() && n > 0)
  {
    CommWatch watch("MPI_Allreduce (world_sum)");
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, v, count_of(n), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
  }
}

void world_sum(float* v, int64_t n) {
  if (multi_process() && n > 0)
  {
    CommWatch watch("MPI_Allreduce (world_sum)");
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, v, count_of(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
  }
}

void world_broadcast(float* v, int64_t n, int root) {
  if (multi_process() && n > 0) {
    CommWatch watch("MPI_Bcast (world_broadcast)");
    MPI_CHECK(MPI_Bcast(v, count_of(n), MPI_FLOAT, root, MPI_COMM_WORLD));
  }
}

double world_max(double v) {
  if (multi_process()) {
    CommWatch watch("MPI_Allreduce (world_max)");
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
  }
  return v;
}

std::vector<uint64_t> world_allgather(uint64_t v) {
  std::vector<uint64_t> out(static_cast<std::size_t>(process().size), v);
  if (multi_process()) {
    CommWatch watch("MPI_Allgather (world_allgather)");
    MPI_CHECK(MPI_Allgather(&v, 1, MPI_UINT64_T, out.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD));
  }
  return out;
}

std::vector<std::string> world_allgather(const std::string& v) {
  if (!multi_process()) return {v};
  const ProcessInfo& p = process();
  int len = count_of(static_cast<int64_t>(v.size()));
  std::vector<int> lens(static_cast<std::size_t>(p.size)), offsets(static_cast<std::size_t>(p.size));
  CommWatch watch("MPI_Allgatherv (world_allgather)");
  MPI_CHECK(MPI_Allgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, MPI_COMM_WORLD));
  int64_t total = 0;
  for (int r = 0; r < p.size; ++r) {
    offsets[r] = count_of(total);
    total += lens[r];
  }
  std::string all(static_cast<std::size_t>(total), '\0');
  MPI_CHECK(MPI_Allgatherv(v.data(), len, MPI_CHAR, all.data(), lens.data(), offsets.data(), MPI_CHAR,
                           MPI_COMM_WORLD));
  std::vector<std::string> out;
  for (int r = 0; r < p.size; ++r) out.push_back(all.substr(offsets[r], lens[r]));
  return out;
}

void abort_job(const std::string& msg, int code) {
  const ProcessInfo& p = process();
  fmt::print(stderr, "parbench: rank {} ({}): error: {}\n", p.rank, p.hosts.at(p.rank), msg);
  std::fflush(stdout);
  std::fflush(stderr);
  // MPI_Abort kills the job at once, and the launcher may not have forwarded our stderr yet: give
  // it a moment, or the message that says why the job ended can be lost.
  if (g_initialized) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    MPI_Abort(MPI_COMM_WORLD, code);
  }
  std::exit(code);
}

}  // namespace pb
