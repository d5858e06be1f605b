// The rules that decide how a strategy spreads a step, written once: the strategies run by them
// and their plan generators (strategies/*_plan.cpp) describe the step by them.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/net.h"
#include "strategies/strategy.h"

namespace pb {

// ddp: the gradient buckets of the whole net, in all-reduce order (see ddp_buckets).
std::vector<BucketLayout> ddp_bucket_layout(const NetPlan& plan, std::size_t first_bytes, std::size_t bytes);

// Pipelines and dp x pp: each replica's micro-batch sizes, its piece of the batch cut by torch.chunk
// into `micro` (capped at the smallest piece when `cap` and there are several replicas);
// UsageError naming the strategy when a piece has fewer samples than micro-batches.
std::vector<std::vector<int64_t>> replica_micro_batches(const std::vector<int64_t>& pieces, int micro, bool cap,
                                                        int64_t batch, const std::string& strategy);

// Micro-batches whose activations stage `stage` holds at once: all M under GPipe, P - s under 1F1B,
// P under ZB-H1 (P - s in flight before B, s more waiting for their W); never more than M.
int pipeline_slots(Schedule schedule, int stages, int stage, int micro);

// One stage's computations of a step, in order: a forward or a backward of a micro-batch.
struct PipeOp {
  bool forward = true;
  int micro = 0;
  bool first_backward = false;  // the stage's first backward (W): it writes the gradients, later ones add
  bool recompute = false;       // a backward whose forward runs again first (the scratch slot holds another)
  // A backward: whole, or (ZB-H1, where W waits for later B's) only its input gradient (B) or
  // only its weight gradients (W).
  enum class Part : uint8_t { Whole, Data, Weights } part = Part::Whole;
  int chunk = 0;  // interleaved 1F1B: the worker's model chunk (stage chunk * P + worker)
};
std::vector<PipeOp> pipeline_ops(Schedule schedule, bool recompute, int stages, int stage, int micro);

// Interleaved 1F1B (Megatron's virtual stages, torch's ScheduleInterleaved1F1B): worker `rank` of
// `workers` holds `chunks` model chunks; its forwards and backwards of every chunk in Megatron's
// order. UsageError naming `strategy` unless micro is a multiple of workers (as Megatron).
std::vector<PipeOp> interleaved_ops(int workers, int chunks, int rank, int micro, const std::string& strategy);
// Micro-batches chunk `chunk` of a worker running `ops` holds at once (its activation and input
// slots): from its forward to the backward that last reads them (whole, or the weights' part).
int chunk_slots(const std::vector<PipeOp>& ops, int chunk);

// A pipeline schedule over model chunks: each of P workers holds `chunks` stages of the net (cut
// into P * chunks), placed by `stage`, and runs the forwards and backwards (whole, or split into
// input and weight gradients) of every chunk in the order `ops` gives. Stages next to each other
// on one worker hand over in place; on two workers, by send and receive. One worker runs the net
// as one stage (its chunks would only hand over to each other). A schedule is one of these and its
// registry line: pipeline.cpp runs it, pipeline_plan.cpp plans it.
struct ChunkSchedule {
  int chunks = 1;
  std::function<int(int workers, int rank, int chunk)> stage;
  // UsageError naming `strategy` for a micro-batch count it cannot run.
  std::function<std::vector<PipeOp>(int workers, int rank, int micro, const std::string& strategy)> ops;
  // The share of each worker's step spent idle when every pass of a chunk takes one time (F = B =
  // W, a whole backward B + W): the report's bubble_fraction.
  std::function<double(int workers, int micro)> bubble;
  // Megatron's batched transfers: each step's receives posted a step ahead and its sends held to
  // its end, one group each (interleaved 1F1B, whose order needs them on NCCL's in-order stream).
  bool batched = false;
  // Each chunk's incoming activations and each chunk's incoming gradients on a communicator of
  // their own (plan groups "acts c" and "grads c"; chunk 0's activations the world's): where each
  // of those flows one way between two workers (ZB-V's V), a worker receives every kind in the
  // order its peer sends it, and no two sends on one communicator face each other, which on NCCL's
  // blocking launches would deadlock.
  bool one_way_channels = false;
};
// Interleaved 1F1B's: o.virtual_stages chunks, worker r's chunk c stage c * P + r.
ChunkSchedule interleaved_schedule(const StrategyOptions& o);
// The schedule played out on `workers` workers and `micro` micro-batches, a chunk's forward taking
// f, its backward's input gradient b and its weight gradients w (a whole backward b + w) and no
// transfer any time: the share of the step each worker is idle (every worker does the same work,
// so the same share). PB_CHECK fails where the order cannot finish.
double chunk_bubble(const ChunkSchedule& s, int workers, int micro, double f, double b, double w);

// fsdp / zero2: each layer with parameters with the parameterless ones after it; leading
// parameterless layers join the first unit; one worker: the whole net as one unit.
struct FsdpUnit {
  int begin = 0, end = 0;      // layers [begin, end)
  int64_t numel = 0;           // its parameters
  int64_t shard = 0;           // per worker: ceil(numel / N); the last shards are padded
  int64_t at = 0;              // its shard's offset in a worker's shard buffers
  int64_t param_offset = 0;    // in the whole net's flat vector
};
std::vector<FsdpUnit> fsdp_units(const NetPlan& plan, int workers);
// Where the units begin, and the last one's end: stage cuts (engine/graph_stage.h).
std::vector<int> unit_cuts(const std::vector<FsdpUnit>& units);

// tp: per layer, its output channels over `ways` workers (Megatron's column split).
struct TpSlice {
  bool split = false;           // false: the layer is whole on every worker
  int64_t channels = 0;         // K: output channels (features); 0: no parameters
  int64_t per_sample = 1;       // P*Q per output channel (1 for linear)
  int64_t fan = 0;              // weight values per output channel
  int64_t piece = 0;            // all-gather piece channels: ceil(K / N)
  std::vector<int64_t> lo, k;   // per worker: first channel and channel count
  std::vector<int64_t> at;      // per worker: offset of its weight slice in its parameter buffer
};
// UsageError naming the strategy when no layer can be split over `ways` workers. Conv2d, linear and
// transposed conv layers are split by output channels; the rest have none (channels 0).
std::vector<TpSlice> tp_slices(const NetPlan& plan, int ways, const std::string& strategy);
// Whether tp runs the net as a chain: no skips, and only conv2d, linear, ReLU and flatten layers.
// Else each layer reads whole outputs and backward sums gradients over readers (tp_plan.cpp).
bool tp_chain(const NetPlan& plan);
// The Scratch buffers (their plan index) of a worker running such a net under bf16: the rounded
// input, the rounded loss gradient, and the fp32 input-gradient sum (tp_plan.cpp, tp.cpp).
enum TpGraphScratch : int { kTpInput16 = 1, kTpLossGrad16 = 2, kTpPartial = 3 };

}  // namespace pb
