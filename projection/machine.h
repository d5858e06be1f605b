// machines/*.json: a machine's devices (peak FLOP/s, memory, shared CPU cores), its nodes, and
// the alpha-beta link costs per collective and algorithm, with calibrate's per-count fits.
#pragma once

#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace pb::projection {

struct AlphaBeta {
  double alpha_s = 0;    // per step
  double bus_bytes_per_s = 0;
  // Optional fits at one worker count each (calibrate's, where it timed that count): used for
  // exactly that count instead of the fit over all of them. Threads sharing two cores do not
  // slow down with the count as a ring's latency steps do.
  struct AtRanks {
    double alpha_s = 0, bus_bytes_per_s = 0;
    // Optional measured times, bytes ascending: from the first size to the last the time is read
    // off them (linearly between neighbours), below the first it is the first's, above the last
    // the last's plus the extra bytes at the fit's bandwidth. Small in-process messages cost what
    // their cache lines' trips between cores cost, which no one alpha and bandwidth fit down to
    // 64 B alongside 8 MiB (docs/projection.md).
    std::vector<std::pair<double, double>> points;
    // Optional, likewise: the times when the last worker arrives late, its peers already polling
    // (small messages; in-process). Arriving together, threads contend for the rendezvous, so a
    // late arrival is cheaper than a simultaneous one (docs/projection.md).
    std::vector<std::pair<double, double>> late_points;
  };
  std::map<int, AtRanks> at_ranks;
  // Optional fits of groups among a process's workers, every group meeting at once: `size`
  // workers each, ranks `stride` apart, out of `workers` bound one-thread workers (calibrate's,
  // where they outnumber the cores). A pair on one core meets by turns on it; pairs across cores
  // meet when both cores run their member: neither is a fraction of all the workers' meeting.
  struct Layout {
    int size = 0, workers = 0, stride = 1;
    bool operator<(const Layout& o) const { return std::tie(size, workers, stride) < std::tie(o.size, o.workers, o.stride); }
  };
  std::map<Layout, AtRanks> in_groups;
};
// "2 of 4 stride 2", the key of AlphaBeta::in_groups in a machine file.
std::string layout_key(const AlphaBeta::Layout& l);

// Per collective (all_reduce, ...), per algorithm (ring, tree, direct): its alpha-beta.
using LinkCosts = std::map<std::string, std::map<std::string, AlphaBeta>>;

struct Machine {
  std::string source, name, description;
  std::string kind;            // cpu or cuda: the device the costs describe
  std::string model;
  double peak_flops = 0;       // per device: the rate compute times scale with (fp32)
  // device.peak_flops_by_precision: the rate in tf32 / bf16 where the file gives one.
  std::map<std::string, double> peak_flops_by_precision;
  // The rate for `precision` (fp32: peak_flops); UsageError naming the machine file and the field
  // where it has none.
  double peak(const std::string& precision) const;
  double memory_bytes = 0;     // per device (CPU: all workers together)
  int shared_cores = 0;        // CPU: cores all workers of a node share (0: each device its own)
  // CPU: how many busy threads run at full speed together, as calibrate measured it (the cores,
  // on a machine nobody else loads; fewer while other work takes its share). 0: shared_cores.
  double parallel_threads = 0;
  // A copy's bytes per second on a device (each byte read and written once: about half the memory
  // bandwidth); prices a plan's Copy actions (tp's layout copies). 0: not known, copies cost nothing.
  double copy_bytes_per_s = 0;
  int devices_per_node = 1, nodes = 1;
  bool overlap = false;        // collectives run beside compute (their own stream / engine)
  double step_overhead_s = 0;    // per step: starting the workers and waiting for them
  double worker_overhead_s = 0;  // per step and additional worker
  // Per step, what exactly that many in-process workers cost beyond one worker's step and what the
  // simulator sees: calibrate's ddp step of a small MLP less its prediction without it (not linear
  // in the count: threads that share cores). Between counts: interpolated (1 worker: 0); beyond
  // the largest: worker_overhead_s per further worker.
  std::map<int, double> worker_overhead_at_s;
  double workers_overhead_s(int local) const;
  // Per count of in-process workers, each on its own core: how long after the step's start (worker
  // 0, the caller) the others start, as calibrate measured it; part of worker_overhead_at_s.
  std::map<int, double> worker_start_at_s;
  // A collective's last participant arriving this long or more after the one before it pays the
  // late times (AtRanks::late_points) where listed.
  double late_arrival_gap_s = 0.3e-6;
  // A blocking send/recv (in-process: the sender waits until the receiver has its copy): the
  // receiver goes on at once, the sender this much later. The pair's time is the sender's.
  double sender_trails_s = 0;
  // Per plan action, on its worker's host thread before the action: the executor's dispatch and
  // the call it makes (a collective at one worker included), as calibrate measured it. 0: free
  // (devices whose host runs ahead of them).
  double action_overhead_s = 0;
  // Per unit class (a name the caller lists: the sharded strategies' classes), per unit and step:
  // the strategy's own bookkeeping beyond the unit's layers and collectives (gathering
  // into fresh buffers, freeing them, zeroed gradients).
  std::map<std::string, double> unit_overhead_s;
  LinkCosts intra_node, inter_node;
  nlohmann::json calibration;  // what calibrate measured, kept for the record
  int total_devices() const { return devices_per_node * nodes; }
  // CPU threads per worker for `devices` workers: `fixed` when > 0, else the shared cores divided
  // among the workers of a node, as run shares them; 1 off the CPU.
  int threads_per_worker(int devices, int fixed) const;
};

// `unit_classes`: the names unit_overhead_s may hold (strategies/sweep.h unit_classes()); any
// other is refused, naming the file and the field.
Machine parse_machine(const std::string& text, const std::string& source, const std::vector<std::string>& unit_classes);
Machine load_machine(const std::string& path, const std::vector<std::string>& unit_classes);
nlohmann::json machine_json(const Machine& m);

}  // namespace pb::projection
