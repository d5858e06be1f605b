// calibrate's collective timings between CPU workers: in-process threads bound as a step's are,
// or this process's rank of an MPI job (bench/calibrate.h).
#include <algorithm>
#include <memory>

#include "bench/calibrate.h"
#include "engine/check.h"
#include "engine/comm.h"
#include "engine/process.h"
#include "reports/stats.h"
#include "strategies/pool.h"

namespace pb::calibration {

using reports::median;

double time_collective(CollKind c, int ranks, int64_t n, int reps, double skew_s, const pj::AlphaBeta::Layout* layout,
                       bool late) {
  const bool mpi = multi_process();
  const int local = mpi ? 1 : ranks;
  std::vector<std::unique_ptr<Backend>> backends(local);
  BackendOptions bo;
  bo.threads = 1;
  std::vector<Backend*> ptrs(ranks, nullptr);
  WorkerPool pool(local, WorkerPool::cores_for(local, bo.threads));  // bound as a step's workers are
  pool.run(local, [&](int i) { backends[i] = make_backend(cpu(mpi ? process().rank : i), bo); });
  for (int i = 0; i < local; ++i) ptrs[mpi ? process().rank : i] = backends[i].get();
  // Worker i calls in as rank_of[i] of comms[comm_of[i]]: one communicator of all, or one per group.
  std::vector<std::unique_ptr<Communicator>> comms;
  std::vector<int> comm_of(local, 0), rank_of(local, 0);
  int members = ranks;
  if (layout) {
    const int g = layout->size, s = layout->stride;
    PB_CHECK(!mpi && skew_s == 0 && g >= 2 && s >= 1 && ranks % (g * s) == 0, "calibrate: no layout {} of {}",
             pj::layout_key(*layout), ranks);
    std::vector<std::vector<Backend*>> groups(ranks / g);
    for (int i = 0; i < ranks; ++i) {
      comm_of[i] = i / (g * s) * s + i % s, rank_of[i] = i % (g * s) / s;
      groups[comm_of[i]].push_back(ptrs[i]);
    }
    for (const auto& members_of : groups) comms.push_back(make_communicator(members_of));
    members = g;
  } else {
    comms.push_back(make_communicator(ptrs));
    for (int i = 0; i < local; ++i) rank_of[i] = mpi ? process().rank : i;
  }
  std::vector<std::vector<float>> bufs(local, std::vector<float>(static_cast<std::size_t>(n), 1.0f));
  const int64_t piece = n / members;  // all-gather, reduce-scatter: n is the whole (gathered) buffer
  std::vector<std::vector<float>> pieces(local, std::vector<float>(static_cast<std::size_t>(piece), 0.0f));
  const bool skewed = !mpi && skew_s > 0;
  auto call = [&](int i) {
    const int r = rank_of[i];
    Communicator* comm = comms[comm_of[i]].get();
    float* b = bufs[i].data();
    switch (c) {
      case CollKind::AllReduce: comm->all_reduce(r, b, n); break;
      case CollKind::Broadcast: comm->broadcast(r, b, n, 0); break;
      case CollKind::Reduce: comm->reduce(r, b, n, 0); break;
      case CollKind::AllGather: comm->all_gather(r, b + r * piece, b, piece); break;  // in place, as fsdp
      case CollKind::ReduceScatter: comm->reduce_scatter(r, b, pieces[i].data(), piece); break;
      case CollKind::SendRecv:
        if (r == 0) comm->send(r, b, n, 1);
        else if (r == 1) comm->recv(r, b, n, 0);
        break;
      default: break;
    }
  };
  if (!mpi && !skewed) {
    // Between calls each worker computes a little, as a step's workers do: the cost is then the
    // loop's time less the same loop's without the calls. With several workers to a core, a
    // waiting worker gives its core to one still computing, which a loop of calls alone hides.
    auto loop = [&](bool calls) {
      const auto t0 = clk::now();
      pool.run(local, [&](int i) {
        const bool last = rank_of[i] == members - 1;
        for (int k = 0; k < reps; ++k) {
          busy_work(late && last ? 600 + kLateIters : 600);
          if (calls) call(i);
        }
      });
      return since(t0);
    };
    loop(true);  // untimed
    std::vector<double> with, without;
    for (int k = 0; k < 3; ++k) with.push_back(loop(true)), without.push_back(loop(false));
    return std::max(1e-9, (median(with) - median(without)) / reps);
  }
  std::vector<std::vector<double>> t(local, std::vector<double>(reps + 1));
  std::vector<std::vector<clk::time_point>> arrive(local, std::vector<clk::time_point>(reps + 1)), done = arrive;
  pool.run(local, [&](int i) {
    for (int k = 0; k <= reps; ++k) {  // k = 0: untimed
      if (skewed)
        for (const auto s0 = clk::now(); since(s0) < skew_s * i;) {
        }
      const auto t0 = clk::now();
      arrive[i][k] = t0;
      call(i);
      t[i][k] = since(t0);
      done[i][k] = clk::now();
    }
  });
  std::vector<double> slowest;
  for (int k = 1; k <= reps; ++k) {
    double s = 0;
    if (skewed) {
      clk::time_point last = arrive[0][k], end = done[0][k];
      for (int i = 1; i < local; ++i) last = std::max(last, arrive[i][k]), end = std::max(end, done[i][k]);
      s = std::chrono::duration<double>(end - last).count();
    } else {
      for (int i = 0; i < local; ++i) s = std::max(s, t[i][k]);
    }
    slowest.push_back(world_max(s));
  }
  return median(slowest);
}

std::vector<pj::AlphaBeta::Layout> group_layouts(const std::vector<int64_t>& ranks, int cores, bool pairs_only, double skew_s) {
  std::vector<pj::AlphaBeta::Layout> out;
  if (multi_process() || skew_s > 0) return out;
  for (int64_t r : ranks) {
    const int n = static_cast<int>(r);
    if (n <= cores || WorkerPool::cores_for(n, 1).empty()) continue;
    for (int g = 2; g < n; ++g) {
      if (n % g != 0 || (pairs_only && g != 2)) continue;
      out.push_back({g, n, 1});
      out.push_back({g, n, n / g});
    }
  }
  return out;
}

}  // namespace pb::calibration
