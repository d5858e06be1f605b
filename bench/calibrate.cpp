// parbench calibrate: times the collectives the strategies use (all-reduce, broadcast, reduce,
// all-gather, reduce-scatter, send/recv) between CPU workers at a few sizes -- in-process threads, or MPI ranks when started
// by mpirun -- fits alpha-beta per collective, and writes a machine description for `project`.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include <fmt/ranges.h>

#include "bench/calibrate.h"
#include "bench/cli.h"
#include "bench/project.h"
#include "engine/check.h"
#include "engine/comm.h"
#include "engine/cpu_steal.h"
#include "engine/fsutil.h"
#include "engine/memory_estimate.h"
#include "engine/process.h"
#include "reports/stats.h"
#include "reports/units.h"
#include "strategies/pool.h"
#include "strategies/strategy.h"
#include "strategies/sweep.h"
#include "workloads/workload.h"

namespace pb {

namespace {

using namespace calibration;

using reports::median;

// --sizes: "64B" is 64 bytes, "4" is 4 KiB; in bytes, each a whole number of floats, at least one
// float per rank (an all-gather's piece).
std::vector<int64_t> size_list(const std::string& text, int64_t max_ranks) {
  std::vector<int64_t> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const bool in_bytes = !item.empty() && (item.back() == 'B' || item.back() == 'b');
    const std::string digits = in_bytes ? item.substr(0, item.size() - 1) : item;
    int64_t v = 0;
    const bool number = !digits.empty() && digits.size() <= 12 && std::all_of(digits.begin(), digits.end(), ::isdigit) &&
                        (v = std::stoll(digits)) > 0;
    if (!number) throw UsageError(fmt::format("--sizes: expected sizes in KiB (64) or bytes (64B), comma-separated, got '{}' in '{}'", item, text));
    const int64_t bytes = in_bytes ? v : v * 1024;
    if (bytes % 4 != 0 || bytes / 4 < max_ranks)
      throw UsageError(fmt::format("--sizes: {} is not a whole number of floats, at least one per rank ({} ranks: {} B or more, a multiple of 4)",
                                   item, max_ranks, 4 * max_ranks));
    if (std::find(out.begin(), out.end(), bytes) != out.end()) throw UsageError(fmt::format("--sizes: {} is listed twice in '{}'", item, text));
    out.push_back(bytes);  // in the order given: a pass times them so
  }
  if (out.size() < 2) throw UsageError(fmt::format("--sizes needs at least two different sizes to fit latency and bandwidth, got '{}'", text));
  return out;
}

std::string size_text(double bytes) { return bytes < 1024 ? fmt::format("{:g} B", bytes) : fmt::format("{:g} KiB", bytes / 1024); }

// What calibrate was asked to time, its flags checked.
struct CalibrateArgs {
  int reps = 0;
  double skew_s = 0;
  int pools = 1;
  std::vector<int64_t> ranks, sizes;
};

CalibrateArgs calibrate_args(const Flags& f) {
  if (!f.positional().empty()) throw UsageError(fmt::format("unexpected argument '{}'", f.positional()[0]));
  CalibrateArgs a;
  a.reps = static_cast<int>(f.integer("reps"));
  a.skew_s = f.number("skew-us") * 1e-6;
  if (!(a.skew_s >= 0)) throw UsageError(fmt::format("--skew-us must be 0 or more, got {}", f.str("skew-us")));
  if (a.reps < 1) throw UsageError(fmt::format("--reps must be at least 1, got {}", a.reps));
  a.pools = multi_process() ? 1 : static_cast<int>(f.integer("pools"));
  if (a.pools < 1) throw UsageError(fmt::format("--pools must be at least 1, got {}", f.str("pools")));
  a.ranks = f.int_list("ranks");
  if (multi_process()) a.ranks = {process().size};
  for (int64_t r : a.ranks)
    if (r < 2) throw UsageError(fmt::format("--ranks: every count must be at least 2, got {}", r));
  a.sizes = size_list(f.str("sizes"), *std::max_element(a.ranks.begin(), a.ranks.end()));
  return a;
}

// The machine description's fixed part: what a CPU's workers are, before anything is timed.
pj::Machine cpu_machine(const Flags& f, const std::vector<int64_t>& ranks, int cores) {
  pj::Machine m;
  m.name = f.has("name") ? f.str("name") : (multi_process() ? "this CPU (MPI processes)" : "this CPU");
  m.kind = "cpu";
  m.model = "cpu";
  m.description = fmt::format("calibrated by parbench calibrate: {} workers as {}", fmt::join(ranks, ", "),
                              multi_process() ? "MPI processes" : "threads of one process");
  m.shared_cores = cores;
  m.devices_per_node = 1024;  // CPU workers are threads or processes: any number share the cores
  m.nodes = 1;
  m.overlap = false;  // the worker's own thread moves the data (in-process) or progresses it (MPI)
  m.memory_bytes = static_cast<double>(available_ram_bytes());
  return m;
}

using Timed = std::vector<std::pair<pj::Sample, size_t>>;  // samples (their seconds: later) and their points

// One collective's timed points: at each worker count, in groups, and with the last worker late.
struct Planned {
  CollKind c;
  std::string alg;
  Timed counts, late_counts;
  struct Group {
    pj::AlphaBeta::Layout layout;
    Timed timed, late;
  };
  std::vector<Group> groups;
};

// Every point to time, each a function returning its seconds, and where each collective's are.
struct Points {
  std::vector<std::function<double()>> timings;
  std::vector<Planned> collectives;
  std::map<int, size_t> start_lag;  // in-process: how late w workers start
  size_t sender_trail = 0;          // in-process: how far a blocking send's receiver goes on first
};

Points plan_points(const CalibrateArgs& a, int cores) {
  Points pts;
  const std::vector<std::pair<CollKind, std::string>> colls = {
      {CollKind::AllReduce, "ring"},     {CollKind::Broadcast, "ring"},     {CollKind::Reduce, "ring"},
      {CollKind::AllGather, "ring"},     {CollKind::ReduceScatter, "ring"}, {CollKind::SendRecv, "direct"}};
  // Small messages: latency alone, microseconds; more calls per timing.
  auto collective = [&](CollKind c, int workers, int64_t bytes, double skew, std::optional<pj::AlphaBeta::Layout> layout, bool late = false) {
    const int calls = bytes <= kSmall ? 20 * a.reps : a.reps;
    pts.timings.push_back([=] { return time_collective(c, workers, bytes / 4, calls, skew, layout ? &*layout : nullptr, late); });
    return pts.timings.size() - 1;
  };
  // Small messages in-process are timed a second way too: the last worker arriving late. Not
  // send/recv, whose pair meets as sender and receiver, not as peers.
  auto times_late = [&](CollKind c, int64_t bytes) {
    return !multi_process() && a.skew_s == 0 && c != CollKind::SendRecv && bytes <= kSmall;
  };
  for (const auto& [c, alg] : colls) {
    Planned p{c, alg, {}, {}, {}};
    for (int64_t r : a.ranks) {
      if (c == CollKind::SendRecv && r != a.ranks.front()) continue;
      for (int64_t bytes : a.sizes) {
        const int workers = static_cast<int>(c == CollKind::SendRecv && !multi_process() ? 2 : r);
        const pj::Sample s{static_cast<int>(c == CollKind::SendRecv ? 2 : r), static_cast<double>(bytes), 0};
        p.counts.push_back({s, collective(c, workers, bytes, a.skew_s, {})});
        if (times_late(c, bytes)) p.late_counts.push_back({s, collective(c, workers, bytes, 0, {}, true)});
      }
    }
    // Bound one-thread workers outnumbering the cores, in groups meeting at once (dp x tp's
    // pairs): neither a fraction of all the workers' meeting nor a pair's alone.
    for (const pj::AlphaBeta::Layout& l : group_layouts(a.ranks, cores, c == CollKind::SendRecv, a.skew_s)) {
      p.groups.push_back({l, {}, {}});
      for (int64_t bytes : a.sizes) {
        const pj::Sample s{l.size, static_cast<double>(bytes), 0};
        p.groups.back().timed.push_back({s, collective(c, l.workers, bytes, 0, l)});
        if (times_late(c, bytes)) p.groups.back().late.push_back({s, collective(c, l.workers, bytes, 0, l, true)});
      }
    }
    pts.collectives.push_back(std::move(p));
  }
  if (!multi_process()) {
    pts.timings.push_back([] { return time_sender_trail(200); });
    pts.sender_trail = pts.timings.size() - 1;
    for (int w : {2, 4}) {
      pts.timings.push_back([w] { return time_start_lag(w, 50); });
      pts.start_lag[w] = pts.timings.size() - 1;
    }
  }
  return pts;
}

// Each collective's alpha-beta fit over every worker count, at each count alone, and in each
// group layout, with their measured points and late-arrival points; every time also in `record`.
void fit_collectives(std::vector<Planned>& collectives, const std::vector<double>& medians,
                     const std::vector<int64_t>& ranks, bool lead, pj::Machine& m, nlohmann::json& record) {
  // The late times of one count or group as read-off points (the measured points' own alongside).
  auto late_points = [&](const Timed& late, int count, const std::string& what, nlohmann::json& rec) {
    std::vector<pj::Sample> samples;
    for (const auto& [s0, k] : late) {
      if (s0.ranks != count) continue;
      pj::Sample s = s0;
      s.seconds = medians[k];
      samples.push_back(s);
      rec.push_back({{"ranks", s.ranks}, {"bytes", s.bytes}, {"seconds", s.seconds}});
      if (lead) fmt::print(stderr, "parbench calibrate: {}, the last arriving late, {}: {}\n", what, size_text(s.bytes), reports::format_time(s.seconds));
    }
    return samples.empty() ? std::vector<std::pair<double, double>>{} : pj::monotone_points(samples);
  };
  for (Planned& p : collectives) {
    std::vector<pj::Sample> samples;
    for (auto& [s, k] : p.counts) {
      s.seconds = medians[k];
      samples.push_back(s);
      record[coll_kind_name(p.c)].push_back({{"ranks", s.ranks}, {"bytes", s.bytes}, {"seconds", s.seconds}});
      if (lead) fmt::print(stderr, "parbench calibrate: {} x{} {}: {}\n", coll_kind_name(p.c), s.ranks, size_text(s.bytes), reports::format_time(s.seconds));
    }
    pj::AlphaBeta& fit = m.intra_node[coll_kind_name(p.c)][p.alg];
    fit = pj::fit_alpha_beta(p.c, p.alg, samples);
    for (int64_t r : ranks) {  // and each worker count alone, where several were timed
      std::vector<pj::Sample> one_count;
      for (const pj::Sample& s : samples)
        if (s.ranks == r) one_count.push_back(s);
      if (one_count.size() >= 2) {
        const pj::AlphaBeta one = pj::fit_alpha_beta(p.c, p.alg, one_count);
        fit.at_ranks[static_cast<int>(r)] = {one.alpha_s, one.bus_bytes_per_s, pj::monotone_points(one_count),
                                             late_points(p.late_counts, static_cast<int>(r), fmt::format("{} x{}", coll_kind_name(p.c), r),
                                                         record["late"][coll_kind_name(p.c)])};
      }
    }
    for (auto& [l, in, late] : p.groups) {
      std::vector<pj::Sample> group;
      for (auto& [s, k] : in) {
        s.seconds = medians[k];
        group.push_back(s);
        record["groups"][coll_kind_name(p.c)][pj::layout_key(l)].push_back({{"bytes", s.bytes}, {"seconds", s.seconds}});
        if (lead) fmt::print(stderr, "parbench calibrate: {} in groups of {} {}: {}\n", coll_kind_name(p.c), pj::layout_key(l), size_text(s.bytes), reports::format_time(s.seconds));
      }
      const pj::AlphaBeta one = pj::fit_alpha_beta(p.c, p.alg, group);
      fit.in_groups[l] = {one.alpha_s, one.bus_bytes_per_s, pj::monotone_points(group),
                          late_points(late, l.size, fmt::format("{} in groups of {}", coll_kind_name(p.c), pj::layout_key(l)),
                                      record["late"]["groups"][coll_kind_name(p.c)][pj::layout_key(l)])};
    }
  }
}

// The engine's convolution rate and the step's overheads: regular's measured (a single rank's
// dispatch under MPI, where regular does not run); in-process each further worker's, ddp's
// measured beyond its prediction, a plan action's and a sharded unit's.
void measure_compute_and_overheads(const Points& pts, const std::vector<double>& medians, int cores, pj::Machine& m,
                                   nlohmann::json& record) {
  m.peak_flops = conv_flops(cores);
  m.parallel_threads = parallel_threads(cores);
  if (multi_process()) {
    m.step_overhead_s = time_dispatch(1, 50);
    return;
  }
  for (const auto& [w, k] : pts.start_lag) m.worker_start_at_s[w] = medians[k];
  m.sender_trails_s = medians[pts.sender_trail];
  const Overheads o = time_overheads(cores, 5, m, &record);
  m.step_overhead_s = o.step_s;
  m.action_overhead_s = o.action_s;
  m.unit_overhead_s = o.unit_s;
  m.worker_overhead_at_s = o.workers_s;
  m.worker_overhead_s = (o.workers_s.at(2) + o.workers_s.at(4) / 3) / 2;
}

}  // namespace

int cmd_calibrate(const std::vector<std::string>& args) {
  Flags f("parbench calibrate",
          "Times the collectives the strategies use between CPU workers (all-reduce, broadcast, reduce,\n"
          "all-gather, reduce-scatter, send/recv) at a few sizes and worker counts -- in-process threads,\n"
          "or MPI ranks when started by mpirun -- fits alpha (per step) and bus bandwidth per collective\n"
          "by least squares (over all worker counts, and at each alone; where a count outnumbers the\n"
          "cores, also with its workers in groups meeting at once: pairs of neighbours, pairs 2 apart;\n"
          "messages up to 64 KiB also with the last worker arriving late, its peers already waiting),\n"
          "measures a plan action's cost (a small MLP's ddp step at one device less regular's, over\n"
          "the actions ddp adds), the step overhead (its regular step as run times it, less its\n"
          "predicted work; fsdp's and zero2's per unit; ddp's on 2 and 4 workers, per worker count)\n"
          "and the engine's best convolution rate, and writes a machine description for `parbench\n"
          "project` (the \"this CPU\" preset).",
          {
              {"out", "FILE", "machine JSON to write", "machines/this_cpu.json"},
              {"ranks", "LIST", "worker counts to time (in-process; under mpirun: the job's size)", "2,4"},
              {"sizes", "LIST", "message sizes: KiB, or bytes with a B suffix (64B); between the smallest and largest, project reads a count's or group's time off these", "64B,1,4,64,1024,8192"},
              {"reps", "N", "timed calls per size (median; 20 x N up to 64 KiB, whose microseconds need more calls to average a VM's hiccups out)", "7"},
              {"skew-us", "US", "in-process: rank i arrives at each call US x i microseconds late, its peers asleep by then; the time counts from the last arrival (0: every worker computes about 2 us between calls, as a step's do, and the calls' cost is the loop's time less the same loop without them)", "0"},
              {"pools", "N", "in-process: N passes over every size, count and group in turn, each timing with a fresh set of worker threads; a point's time is its median over the passes (where the scheduler places a set of threads lasts as long as they do, and a slow spell as long as it does: either can change a small message's time several-fold)", "5"},
              {"name", "TEXT", "the machine's name", ""},
          });
  if (!f.parse(args)) return 0;
  const CalibrateArgs a = calibrate_args(f);
  const bool lead = process().rank == 0;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));

  const std::optional<CpuTimes> cpu_before = read_cpu_times();
  pj::Machine m = cpu_machine(f, a.ranks, cores);
  nlohmann::json record = nlohmann::json::object();
  // Every point -- a collective at a size over some workers (or in groups), a dispatch -- is timed
  // once per pass with a fresh set of worker threads, the passes going over all points in turn, and
  // a point's time is its median over the passes. A slow spell (a VM's core taken away for a
  // second, a set of threads placed badly) so sets a pass or two of any point, not every timing of
  // a few neighbouring points.
  Points pts = plan_points(a, cores);
  const std::vector<double> medians = pb::reports::medians_over_passes(pts.timings, a.pools, [&](int pass) {
    if (lead && a.pools > 1) fmt::print(stderr, "parbench calibrate: pass {} of {} over {} points\n", pass + 1, a.pools, pts.timings.size());
  });
  fit_collectives(pts.collectives, medians, a.ranks, lead, m, record);
  measure_compute_and_overheads(pts, medians, cores, m, record);
  if (!multi_process()) {
    record["skew_s"] = a.skew_s;
    record["skew_note"] = "rank i arrived skew_s x i late at every timed call; times run from the last arrival to the last rank done";
  }
  record["parallel_threads_note"] = "one-thread convolutions that run at full speed together: k threads' total rate over one thread's, the best k";
  record["peak_flops_note"] = "the engine's best effective rate on all cores: 3x3 conv 64->64, 32x32, batch 8; not a datasheet peak";
  const Disturbance disturbed = disturbance_since(cpu_before);
  if (disturbed.steal) record["steal_fraction"] = *disturbed.steal;
  if (disturbed.others) record["others_fraction"] = *disturbed.others;
  m.calibration = record;
  if (!lead) return 0;
  warn_if_disturbed(disturbed, "parbench calibrate", "while it calibrated", "its timings are not this machine's own",
                    "calibrate again");
  const std::string text = pj::machine_json(m).dump(2) + "\n";
  pj::parse_machine(text, f.str("out"), unit_classes());  // what we write must read back
  make_dirs(std::filesystem::path(f.str("out")).parent_path().string());
  write_file_atomic(f.str("out"), text);
  fmt::print("parbench calibrate: wrote {} ({}; {:.2f} of {} cores free; conv {:.3g} GFLOP/s; all_reduce alpha {:.3g} us, bus {:.3g} GB/s)\n",
             f.str("out"), m.name, m.parallel_threads, cores, m.peak_flops / 1e9, m.intra_node["all_reduce"]["ring"].alpha_s * 1e6,
             m.intra_node["all_reduce"]["ring"].bus_bytes_per_s / 1e9);
  return 0;
}

}  // namespace pb
