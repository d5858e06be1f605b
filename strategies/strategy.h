// The strategy interface: one training step of a net, computed over N devices in some way.
// Every strategy computes the gradient of the same global loss (MSE mean over the global batch)
// and applies the same Adam step. Timing, warm-up and printing belong to the caller.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/comm.h"
#include "engine/trace.h"
#include "engine/net.h"
#include "plan/plan.h"

namespace pb {

// Pipeline schedules: GPipe fill-drain (every forward, then every backward) or 1F1B
// (PipeDream-flush / Megatron: P-1-s warm-up forwards on stage s, then one forward and one
// backward alternately, then the remaining backwards), or zero-bubble ZB-H1 (1F1B's order with
// each backward split into B, the input gradient, and W, the weight gradients, stage s deferring
// s of its W's to fill the drain; pipeline-zb, strategies/rules.cpp), or interleaved 1F1B (Megatron's
// virtual stages: V model chunks per worker; pipeline-interleaved).
enum class Schedule { GPipe, OneFOneB, ZeroBubble, Interleaved };

struct StrategyOptions {
  int devices = 1;
  DeviceKind kind = DeviceKind::Cpu;
  bool oversubscribe = false;        // allow more workers than GPUs (they share GPUs)
  int micro_batches = 4;             // pipeline
  // dp x pp: at most the samples of a replica's piece (the default rule, min(4, batch), applied
  // per replica), rather than refused as a --micro-batches given.
  bool cap_micro_batches = false;
  std::size_t bucket_bytes = 25u << 20;  // ddp gradient buckets
  std::vector<int> balance;          // mp/pipeline: layers per stage; empty = balance_by decides
  // mp/pipeline without a balance list: stages balanced by forward FLOPs, by per-layer forward +
  // backward time measured on the first worker's device (untimed, at setup), or the seed's split.
  enum class BalanceBy { Flops, Time, Seed } balance_by = BalanceBy::Flops;
  int seed_first_stage = 0;    // BalanceBy::Seed: layers of the seed's first stage; 0: the workload has none
  int64_t profile_batch = 1;   // BalanceBy::Time: the global batch (profiled per micro-batch)
  // BalanceBy::Time: each layer's forward + backward seconds at a micro-batch of n samples, when
  // known without running (the projection's profile); empty: timed on the device at setup.
  std::function<std::vector<double>(int64_t n)> layer_seconds;
  Schedule schedule = Schedule::GPipe;  // pipeline
  bool recompute = false;            // pipeline: keep only stage inputs, recompute in backward
  int virtual_stages = 2;            // pipeline-interleaved: model chunks per worker (V)
  BackendOptions backend;
  std::size_t first_bucket_bytes = 1u << 20;  // ddp: the first bucket (last layers), so its all-reduce starts early
  // mp, pipeline, dp x pp: a plan someone wrote (--plan FILE), run as the step instead of the
  // strategy's own once check_stage_plan accepts it; plan_source names it in errors.
  std::shared_ptr<const Plan> plan;
  std::string plan_source;
  // ddp: Global weights each rank by its samples (the global mean, as every strategy); Local is
  // torch DDP's mean over ranks of each rank's local mean (differs on uneven chunks).
  enum class GradAverage { Global, Local } grad_average = GradAverage::Global;
  // The wire dtype of gradient reductions (all-reduce, reduce, reduce-scatter) of the data-parallel
  // strategies and hybrids, and of fsdp/zero2's parameter all-gathers (docs/bf16.md).
  DType reduce_dtype = DType::F32;
  DType param_dtype = DType::F32;
  // Under Precision::Bf16, pipeline stages send activations and their gradients in bf16: bf16
  // values already, so the same bits arrive (docs/bf16.md). No flag: false (fp32) is for tests
  // that show the values unchanged.
  bool bf16_activation_wire = true;
};

// One worker's last step, on its device's clock. forward + backward + loss + optimizer +
// transfer + idle + other_s = step_s, the group's step; other_s is what no span covers (host
// work between the calls; negative where spans on two queues overlap, on GPUs).
struct WorkerStats {
  std::string device;
  int64_t samples = 0;        // chunk size this worker got (dp/ddp), or the batch (mp stages)
  double step_s = 0;          // the group's step: from its start until the last worker is done
  double forward_s = 0, backward_s = 0, optimizer_s = 0, loss_s = 0;  // compute phases
  double compute_s = 0;       // forward + backward + optimizer + loss
  double comm_s = 0;          // transfers alone (CommStats::seconds)
  double transfer_s = 0;      // = comm_s
  double wait_s = 0;          // idle inside the communicator: waiting for peers or its own device
  double idle_s = 0;          // wait_s, plus before the worker's part began and after it ended
  double other_s = 0;         // step_s less every part above (the remainder, not hidden)
  double exposed_transfer_s = 0;  // transfer not overlapped by this worker's compute
  std::size_t comm_bytes = 0; // last step, sent by this worker
  CollStats kinds[kCollKinds];  // per collective kind: payload bytes, transfer seconds, calls
  std::size_t peak_bytes = 0; // device peak since setup
  int layer_begin = 0, layer_end = 0;  // mp/pipeline: the stage's layers [begin, end)
  std::vector<Span> spans;    // the last step's spans (this process's workers only)
};

// A ddp gradient bucket: layers [first_layer, last_layer] (global indices), floats [begin, end)
// of the flat gradient buffer.
struct BucketLayout {
  int first_layer = 0, last_layer = 0;
  int64_t begin = 0, end = 0;
};

struct StepStats {
  std::vector<WorkerStats> workers;
  int workers_used = 0;
  double step_s = 0;           // the last step, from the group's start to the last worker done
  double bubble_fraction = 0;  // pipeline (and mp, M = 1): (P-1)/(M+P-1)
  bool oversubscribed = false;
  int micro_batches = 1;       // pipeline: micro-batches the last step ran (torch.chunk may give fewer)
  std::string communicator = "none";  // "none" (one worker), "inproc" or "nccl"
  bool staged = false;         // mp/pipeline: workers hold stages (layer_begin/end)
  // pipeline-interleaved: every stage's layers [begin, end), stage c * P + r on worker r (a worker's
  // layer_begin/end are its first chunk's); empty otherwise.
  std::vector<std::pair<int, int>> chunk_stages;
  std::vector<BucketLayout> buckets;  // ddp, in all-reduce order
};

// In a multi-process (MPI) job every process holds one worker and calls every method in the same
// order: loss(), params() and stats() combine the processes' parts and are collective.
class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual std::string name() const = 0;
  // Untimed: place parameters (the whole net's flat vector) and optimizer state.
  virtual void setup(const NetPlan& plan, const std::vector<float>& params, const AdamParams& adam) = 0;
  // Untimed: place one global batch (host, [batch, ...]) and its target.
  virtual void load_batch(const std::vector<float>& x, const std::vector<float>& target, int64_t batch) = 0;
  // One training iteration; returns when every device has finished its work.
  virtual void step() = 0;
  // Global mean loss of the last step (reads back from the devices).
  virtual double loss() = 0;
  // The whole net's parameters, gathered to the host.
  virtual std::vector<float> params() = 0;
  virtual StepStats stats() const = 0;
  // Per-layer, named spans from the next step on (a traced step); off: one span per call.
  virtual void set_trace_detail(bool on) = 0;
  // The step it runs, every worker's actions (made when a batch is loaded); null: none.
  virtual const Plan* step_plan() const { return nullptr; }
};

using StrategyFactory = std::function<std::unique_ptr<Strategy>(const StrategyOptions&)>;

// What the rest of the program may know about a strategy without making one.
struct StrategyInfo {
  std::string name;
  std::string description;      // one line, for --help
  bool single_device = false;   // runs on exactly one device (regular)
  bool multi_process = false;   // can run as one process per worker under MPI
};

// The dp x pp hybrids' family name: in the strategy list, `--strategies` and the registry. Its
// members are named dp<D>xpp<P> plus the pipeline variant's suffix (-1f1b, -recompute): D
// replicas of a P-stage pipeline on D * P devices (strategies/pipeline.cpp).
inline const std::string kHybridFamily = "dpxpp";
std::string hybrid_name(int dp, int pp, Schedule schedule, bool recompute);
// Whether `name` is a member (as hybrid_name writes it); if so, its shape, schedule and recompute.
bool parse_hybrid_name(const std::string& name, int* dp, int* pp, Schedule* schedule, bool* recompute);
// The dp x tp hybrids' family: members dp<D>xtp<T>, D replicas of a T-way tp group on D * T
// devices (strategies/tp.cpp).
inline const std::string kDpTpFamily = "dpxtp";
std::string dptp_name(int dp, int tp);
bool parse_dptp_name(const std::string& name, int* dp, int* tp);
// Hybrid sharded data parallel's family: members hsdp<R>x<S>, fsdp within each of R groups of S
// workers and the shards' gradients all-reduced across the groups, on R * S devices (fsdp.cpp).
inline const std::string kHsdpFamily = "hsdp";
std::string hsdp_name(int replicas, int shards);
bool parse_hsdp_name(const std::string& name, int* replicas, int* shards);
// The one parser of the hybrids' factors: `name` spelled <first>A<second>B<rest> with A and B
// positive integers without leading zeros; false when it is not. Each factor and their product
// must be at most kMaxHybridDevices: beyond that UsageError naming the strategy, never a wrapped int.
inline constexpr int kMaxHybridDevices = 1 << 16;
bool parse_factor_name(const std::string& name, const char* first, const char* second, int* a, int* b,
                       std::size_t* used);
// The hybrids of a family at `devices`: every D x S = devices (S: stages or tp ways), D ascending,
// both sides at least 2 unless `dp` or `side` (> 0) fix one.
std::vector<std::pair<int, int>> hybrid_factorizations(int devices, int dp = 0, int side = 0);

// A strategy name parsed by the registry's one grammar: the registry line it names (a strategy,
// a family, or the family of a member such as dp2xpp2) and what the name itself fixes.
struct StrategySpec {
  std::string entry;                    // the registry line: "ddp", "pipeline-1f1b", kHybridFamily, ...
  bool family = false;                  // the line is a family (the name is the family or a member)
  int first = 0, second = 0;            // a member's factors: D x P, D x T or R x S; 0 for other names
  Schedule schedule = Schedule::GPipe;  // a GPipe/1F1B pipeline's or a dp x pp member's
  bool recompute = false;
  bool fill_drain = false;              // pipeline[-1f1b][-recompute] or a dp x pp member: --schedule and
                                        // --recompute apply, and a plan file may run as it
  bool member() const { return first > 0; }
  bool member_of(const std::string& f) const { return member() && entry == f; }
  int devices() const { return first * second; }
};
// nullopt for a name that is neither a registered strategy or family nor a family's member.
std::optional<StrategySpec> parse_strategy(const std::string& name);

// Every strategy, in display order (the seed's comparison first).
const std::vector<StrategyInfo>& strategy_infos();
// UsageError listing the known strategies when the name is unknown.
const StrategyInfo& strategy_info(const std::string& name);
std::vector<std::string> strategy_names();
// UsageError listing the known strategies when the name is unknown.
std::unique_ptr<Strategy> make_strategy(const std::string& name, const StrategyOptions& opts);

}  // namespace pb
