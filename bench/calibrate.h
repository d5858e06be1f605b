// parbench calibrate's timers: collectives between CPU workers (bench/calibrate_collectives.cpp),
// and the machine's per-step overheads, start lags and compute rates
// (bench/calibrate_overheads.cpp); bench/calibrate.cpp fits and writes what they measure.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/backend.h"
#include "scenarios/scenarios.h"

namespace pb::calibration {

namespace pj = projection;
using clk = std::chrono::steady_clock;

inline double since(clk::time_point t0) { return std::chrono::duration<double>(clk::now() - t0).count(); }

// About 2 us of one thread's arithmetic (a small layer's worth), the same amount every call.
inline void busy_work(int iters = 600) {
  volatile float x = 1.0f;
  for (int i = 0; i < iters; ++i) x = x * 0.999f + 0.001f;
}

// What the last worker computes more than the others when it is to arrive late: long enough that
// its peers are already waiting, no longer contending with it for the rendezvous.
inline constexpr int kLateIters = 450;
inline constexpr int64_t kSmall = 64 * 1024;  // messages up to this size: latency, microseconds; timed more often

// One collective over `ranks` workers, `n` floats. In a multi-process job this process is one rank
// and the others are the other processes: the median over reps of the slowest rank's time. In-
// process, with skew_s = 0, each call after a little computation, as in a step (below); else rank i
// arrives skew_s x i late and the time is from the last arrival to the last rank done, the early
// ones woken from their wait.
// layout (in-process, no skew): the workers in groups of layout->size, ranks layout->stride apart
// (stride 1: {0, 1}, {2, 3}; stride 2: {0, 2}, {1, 3}), every group calling at once.
// late (in-process, no skew): the last rank of each group computes about 1 us more before each call,
// so arrives when its peers are already waiting.
double time_collective(CollKind c, int ranks, int64_t n, int reps, double skew_s, const pj::AlphaBeta::Layout* layout = nullptr,
                       bool late = false);

// The group layouts calibrate times: in-process, without skew, for each worker count beyond the
// cores (run binds one-thread workers round robin there), groups of every size G dividing it,
// consecutive ranks (stride 1) and ranks N / G apart; send/recv in pairs only.
std::vector<pj::AlphaBeta::Layout> group_layouts(const std::vector<int64_t>& ranks, int cores, bool pairs_only, double skew_s);

// How long after the caller (task 0) the other N - 1 workers of a step start, on average: the
// median over reps of their mean lag.
double time_start_lag(int workers, int reps);

// Two workers' blocking send/recv of 64 B after a little computation each, as dp's scatter and
// gather: how long after the receiver goes on the sender does (it waits for the receiver's copy).
double time_sender_trail(int reps);

// Starting N workers for a step that does nothing: the step overhead run pays per worker count.
double time_dispatch(int workers, int reps);

// One worker's step overhead: what run times for regular's step beyond the net's own work -- the
// step as sweep times it, on a small MLP (microseconds of arithmetic), less what project predicts
// for it from the same net's profile (layers, loss, Adam timed as profile times them) with no
// overhead. And fsdp's and zero2's bookkeeping per unit: their one-device step of the same MLP
// less regular's, over its units. In `rounds` alternations, so that a slow spell touches all
// alike; the medians of the rounds' differences, which `record` keeps.
//
// And each further worker count's: ddp's step of the same MLP, batch 2 per worker, on 2 and 4
// workers sharing the cores as run shares them, less what project predicts for it with `m` (its
// collectives, start lag and sender trail as calibrated) and no worker overhead: what starting,
// meeting and finishing that many workers costs beyond what the simulator sees (the dispatch of
// an empty step missed half of it: a worker's bookkeeping around its calls, its late start).
struct Overheads {
  double action_s = 0;  // per plan action
  double step_s = 0;
  std::map<std::string, double> unit_s;
  std::map<int, double> workers_s;  // worker count -> step overhead beyond one worker's
};
Overheads time_overheads(int threads, int rounds, const pj::Machine& m, nlohmann::json* record);

// The engine's best effective rate (counted FLOPs / time) on all cores, a wide 3x3 convolution as
// great_net runs them: the CPU's "peak" against which `project --from-machine` scales a profile to
// another device (Winograd kernels can make it exceed a datasheet peak). bf16: the bf16 convolution
// autocast runs.
double conv_flops(int threads, Precision precision = Precision::Fp32);

// How many busy workers run at full speed together here: k threads each running the same
// one-thread convolution through the engine, their total rate against one thread's, the best over
// k. The cores on an idle machine with a core per thread; fewer where threads share a core's
// vector units (hyper-threads) or other work takes its share.
double parallel_threads(int cores);

}  // namespace pb::calibration
