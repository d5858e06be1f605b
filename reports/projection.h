// Projection: every strategy's step time, its parts and its memory on machines and device counts
// one does not have, from a measured per-layer profile (profile.json) and a machine description
// (machines/*.json: peak FLOP/s, memory, alpha-beta link costs per collective and algorithm).
// Each strategy's step is written as one program of compute and communication operations per
// worker, as strategies/*.cpp run it, and played by one event simulator (blocking rendezvous for
// send/recv and collectives, CPU cores shared between worker threads, collectives beside compute
// only where the machine overlaps them). Formulas and assumptions: docs/projection.md.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace pb::projection {

// ---- profile.json ----------------------------------------------------------------------------
struct LayerProfile {
  int index = 0;
  std::string type;  // conv2d, relu, linear, flatten
  std::vector<int64_t> in, out;
  int64_t params = 0;
  double forward_flops = 0;  // per sample
  std::vector<double> forward_s, backward_data_s, backward_weights_s;  // per entry of Profile::batches
  double activation_bytes_per_sample = 0;
  double workspace_bytes = 0;
};

struct Profile {
  std::string source;
  nlohmann::json context;
  std::vector<int64_t> batches;
  std::vector<LayerProfile> layers;
  std::vector<double> loss_s;
  double optimizer_s_per_param = 0;
  int threads = 0;          // context.threads; 0 when not recorded
  // context.concurrent_workers: how many workers timed the same layers at once, each with
  // `threads` threads (1: the profile ran alone). The simulator takes the profile's speed as the
  // speed of that many busy workers on a node and scales from there.
  int concurrent = 1;
  std::string device_kind;  // context.device_kind or context.device ("cpu", "cuda", ...)

  int64_t param_count() const;
  double forward_flops() const;  // per sample
  double input_bytes_per_sample() const;
  double output_bytes_per_sample() const;
  // Seconds at batch b: linear between the measured batches, extrapolated along the last two.
  double forward(int layer, double b) const;
  double backward_data(int layer, double b) const;
  double backward_weights(int layer, double b) const;
  double loss(double b) const;
  // The highest forward rate of any layer at any measured batch (FLOPs / second).
  double best_forward_flops_per_s() const;
};

// Throws pb::UsageError "SOURCE: field: what was expected".
Profile parse_profile(const std::string& text, const std::string& source);
Profile load_profile(const std::string& path);
nlohmann::json profile_json(const Profile& p);
// The profile of the same convolutional net at images `to` pixels wide instead of `from`: times,
// FLOPs and activation bytes of every layer scale with the pixel count (to/from)^2, parameters and
// the optimizer do not -- an assumption, exact for FLOPs, close for large convolutions. UsageError
// for a net with linear or flatten layers, whose width the image changes.
Profile scale_image(const Profile& p, int64_t from, int64_t to);

// ---- machines/*.json ---------------------------------------------------------------------------
enum class Coll { AllReduce, Broadcast, Reduce, AllGather, ReduceScatter, SendRecv };
const char* coll_name(Coll c);
// nccl-tests' bus-bandwidth factor: all-reduce 2(N-1)/N, all-gather and reduce-scatter (N-1)/N,
// broadcast / reduce / send-recv 1.
double bus_factor(Coll c, int ranks);
// Latency terms of one collective on `ranks` under an algorithm (ring, tree, direct).
double latency_steps(Coll c, const std::string& algorithm, int ranks);

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
    // 64 B alongside 8 MiB (2 workers: 4 us at 48 B, 5.3 at 1 KiB; the fit's alpha said 6.2).
    std::vector<std::pair<double, double>> points;
    // Optional, likewise: the times when the last worker arrives late, its peers already polling
    // (small messages; in-process). Arriving together, threads contend for the rendezvous: 2
    // workers' 48 B all-reduce took 4-5 us so, 2.5-3 us with one 0.3 us or more behind.
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
  double peak_flops = 0;       // per device: the rate compute times scale with
  double memory_bytes = 0;     // per device (CPU: all workers together)
  int shared_cores = 0;        // CPU: cores all workers of a node share (0: each device its own)
  // CPU: how many busy threads run at full speed together, as calibrate measured it (the cores,
  // on a machine nobody else loads; fewer while other work takes its share). 0: shared_cores.
  double parallel_threads = 0;
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
  // fsdp / zero2: per unit and step, what the strategy's own bookkeeping costs beyond the unit's
  // layers and collectives (gathering into fresh buffers, freeing them, zeroed gradients).
  std::map<std::string, double> unit_overhead_s;
  LinkCosts intra_node, inter_node;
  nlohmann::json calibration;  // what calibrate measured, kept for the record
  int total_devices() const { return devices_per_node * nodes; }
};

Machine parse_machine(const std::string& text, const std::string& source);
Machine load_machine(const std::string& path);
nlohmann::json machine_json(const Machine& m);

struct CollCost {
  double seconds = 0;
  std::string algorithm;
};
// The cheapest listed algorithm for `bytes` over `ranks` devices; a group that spans nodes pays
// the inter-node costs (the slowest link of a ring or tree sets its pace). UsageError naming the
// machine file when it lists no cost for the collective.
// fit_ranks: the worker count whose fit (`ranks`) applies, when not `ranks` itself (0); layout:
// the group's place among the workers, whose fit (`groups`) applies first where listed.
// late: the last participant arrives late (late_points apply where listed).
CollCost collective_cost(const Machine& m, Coll c, double bytes, int ranks, bool spans_nodes, int fit_ranks = 0,
                         const AlphaBeta::Layout* layout = nullptr, bool late = false);

// Fits alpha and bus bandwidth to measured times by least squares on
// t = alpha * latency_steps + bytes * bus_factor / bandwidth.
struct Sample {
  int ranks = 0;
  double bytes = 0, seconds = 0;
};
AlphaBeta fit_alpha_beta(Coll c, const std::string& algorithm, const std::vector<Sample>& samples);
// The samples (one worker count or group) as AtRanks::points: bytes ascending, times made
// non-decreasing in bytes by the least-squares monotone fit (neighbours that measured out of order
// pooled to their mean), so that a larger message never reads as cheaper than a smaller one.
std::vector<std::pair<double, double>> monotone_points(std::vector<Sample> samples);

// ---- configurations and predictions -------------------------------------------------------------
// The hybrids the model knows (names: strategies/strategy.h): hybrid_shape gives {D, P} of a
// dp<D>xpp<P> in the GPipe schedule, as modelled; dptp_shape {D, T} of a dp<D>xtp<T>; nothing
// for any other name.
std::optional<std::pair<int, int>> hybrid_shape(const std::string& strategy);
std::optional<std::pair<int, int>> dptp_shape(const std::string& strategy);

struct Config {
  // regular, dp, ddp, mp, pipeline, fsdp, zero2, tp, dp<D>xpp<P> (D x P = devices); also the
  // registered pipeline variants pipeline-1f1b, pipeline-recompute, pipeline-1f1b-recompute
  // (schedule and recompute from the name)
  std::string strategy;
  int devices = 1;
  int64_t global_batch = 1;
  int micro_batches = 1;  // pipeline, dp<D>xpp<P>: per replica
  double bucket_bytes = 25.0 * (1 << 20);  // ddp
  std::string schedule = "gpipe";          // pipeline: gpipe or 1f1b
  bool recompute = false;                  // pipeline: stage activations recomputed in backward
  std::string label() const;               // e.g. "pipeline (M=8, 1f1b)"
  std::vector<std::string> options() const;  // benchmark-name options: micro_batches:8, ...
};

struct Options {
  double compute_scale = 1;  // profile seconds x this (a profile from another device)
  int threads_per_worker = 0;  // CPU: 0 = cores shared as run shares them: max(1, cores / N)
  // CPU, measured: busy_seconds[b - 1] = the same work's seconds while b workers (of these
  // threads) compute at once on the node. When given, a worker's speed with b busy is
  // busy_seconds[k0 - 1] / busy_seconds[b - 1] (k0: the profile's concurrent workers) instead of
  // the parallel_threads formula; beyond its end, time grows in proportion to b.
  std::vector<double> busy_seconds;
};

struct Prediction {
  Config config;
  bool feasible = true;
  std::string reason;      // why not, when infeasible
  double step_s = 0;
  double compute_s = 0;        // the busiest worker's compute
  double exposed_comm_s = 0;   // its transfers while it is not computing
  double idle_s = 0;           // the rest: waiting for peers (pipeline bubble), starting the step
  double peak_bytes = 0;       // per device, the largest
  bool fits = true;
  double comm_bytes = 0;       // per step, sent by all workers together
  double samples_per_s = 0;
};

Prediction predict(const Profile& p, const Machine& m, const Config& c, const Options& o = {});

// The largest worker's peak memory for `c` (pipeline's schedule and recompute from its fields),
// as engine/memory_estimate.h counts each strategy's buffers, with the profile's workspace of the
// layers a worker runs (their largest: one backend's scratch serves them all). `stages`: mp,
// pipeline, dp<D>xpp<P>: each stage's layers [begin, end). Prediction::peak_bytes.
double memory_peak(const Profile& p, const Config& c, const std::vector<std::pair<int, int>>& stages);

// A `project --validate --out` file's rows, read back to pool several validations (--combine).
struct ValidationRow {
  std::string name;
  int threads = 0;
  std::vector<double> measured_times_s;  // every timed iteration of the run (seconds); else measured_s alone
  double measured_s = 0, predicted_s = 0, compute_s = 0, exposed_comm_s = 0, idle_s = 0;
};
struct Validation {
  std::string source;
  std::vector<ValidationRow> rows;
};
// Throws pb::UsageError "SOURCE: field: what was expected".
Validation parse_validation(const std::string& text, const std::string& source);
Validation load_validation(const std::string& path);

}  // namespace pb::projection
