// The process context of a build without MPI: the job is this one process, every host-side
// collective is the identity (engine/mpi/mpi_env.cpp is the MPI one).
#ifndef PARBENCH_HAVE_MPI
#include <atomic>
#include <cstdio>
#include <cstdlib>

#include <sched.h>
#include <unistd.h>

#include <fmt/format.h>

#include "engine/process.h"

namespace pb {

bool launched_by_mpi() { return false; }
ProcessSession::ProcessSession(int*, char***) {}
ProcessSession::~ProcessSession() = default;

const ProcessInfo& process() {
  static const ProcessInfo info = [] {
    ProcessInfo p;
    char host[256] = {0};
    gethostname(host, sizeof host - 1);
    p.local_ranks = {0};
    p.hosts = {host};
    cpu_set_t cpus;
    CPU_ZERO(&cpus);
    p.host_cpus = {sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus) : 1};
    return p;
  }();
  return info;
}

void world_sum(double*, int64_t) {}
void world_sum(float*, int64_t) {}
void world_broadcast(float*, int64_t, int) {}
double world_max(double v) { return v; }
std::vector<uint64_t> world_allgather(uint64_t v) { return {v}; }
std::vector<std::string> world_allgather(const std::string& v) { return {v}; }

namespace {
std::atomic<double> g_comm_timeout{kDefaultCommTimeout};  // read by the NCCL watchdog's thread
}  // namespace
void set_comm_timeout(double seconds) { g_comm_timeout = seconds; }
double comm_timeout() { return g_comm_timeout; }
CommWatch::CommWatch(const char*) {}
CommWatch::~CommWatch() = default;

void abort_job(const std::string& msg, int code) {
  fmt::print(stderr, "parbench: rank 0 ({}): error: {}\n", process().hosts[0], msg);
  std::exit(code);
}

}  // namespace pb
#endif
