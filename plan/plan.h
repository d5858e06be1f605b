// A plan: one training step of a strategy as data -- per worker, the ordered actions it takes,
// each with the buffers it reads and writes, its lane and its bytes. Strategies generate plans
// (strategies/*_plan.cpp); the ordering checker and the validator (plan/check.h) interpret them.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "engine/comm.h"

namespace pb {

enum class ActionKind : uint8_t {
  Forward,          // layers [layer_begin, layer_end) of micro-batch `micro`
  Recompute,        // a forward again, just before its backward (pipeline -recompute)
  BackwardData,     // the input gradient through layers [layer_begin, layer_end)
  BackwardWeights,  // the weight gradients of layers [layer_begin, layer_end)
  Loss,             // MSE and its gradient
  Send,             // point-to-point to `peer`; async: completes at a Wait
  Recv,             // point-to-point from `peer`; async: completes at a Wait
  Collective,       // `coll` over `group`; async (an all-reduce start) completes at a Wait
  Wait,             // the async actions `waits` (ids on this worker) have completed
  GroupStart,       // the starts up to GroupEnd go out together (ncclGroupStart)
  GroupEnd,
  Copy,             // on the compute lane: reads into writes
  Free,             // a gathered buffer's values are dropped (fsdp)
  Optimizer,        // Adam over the worker's parameters (or its shard)
};
inline constexpr int kActionKinds = 14;

// Where an action runs. Actions of one lane run in their order; a communication start is ordered
// after the compute queued before it, and compute after a Wait after what it waits for.
enum class PlanLane : uint8_t { Compute, SendUp, SendDown, Coll };  // Send*: p2p towards higher / lower ranks
inline constexpr int kPlanLanes = 4;

const char* action_kind_name(ActionKind k);
const char* lane_name(PlanLane l);
// UsageError naming `what` and the accepted names when `name` is none of them.
ActionKind parse_action_kind(const std::string& name, const std::string& what);
PlanLane parse_lane(const std::string& name, const std::string& what);
CollKind parse_coll_kind(const std::string& name, const std::string& what);

// What a buffer holds. Interpreters bind a buffer to memory by its role, index and chunk; its
// label ("c1/x[3]") is for people. The JSON word of each is its label's stem.
enum class BufferRole : uint8_t {
  Input,            // x: the step's input; x[j]: micro-batch j's, at a pipeline's first stage
  StageInput,       // in[s]: a later stage's received input, slot s
  Target,           // t
  Output,           // y: the net's output (a data-parallel worker's gathered one)
  OutputGrad,       // dy: the loss's gradient, or a stage's received output gradient
  LocalOutputGrad,  // dy_local: tp's own channels of it
  InputGrad,        // dx[s]: an input gradient going back, slot s
  Loss,
  Activations,      // acts: the model's own; acts[i]: slot i, or unit / layer i's output
  KeptGrad,         // keep[s]: a split backward's output gradients, kept for its weight pass
  Params,
  Grads,            // grads: all of them; grads[k]: bucket k
  AdamState,        // adam
  ShardParams,
  ShardGrads,
  UnitGrads,        // an fsdp unit's whole gradients before the reduce-scatter
  Gathered,         // gathered parameters (fsdp: unit or prefetch slot i) or channels (tp)
  Scratch,          // a computation's own working buffers (a Sequential's backward input gradients)
  ParamCopy,        // bf16: the bf16 copy of parameters a Sequential computes with (params16)
  Staging,          // the communicator's bf16 wire slots (staging[k]; -1: a collective's)
};
inline constexpr int kBufferRoles = 20;
const char* buffer_role_name(BufferRole r);
BufferRole parse_buffer_role(const std::string& name, const std::string& what);

// A buffer of one worker (a tensor, or a region of one the plan tells apart: a micro-batch slot).
struct PlanBuffer {
  int worker = 0;
  BufferRole role = BufferRole::Input;
  int index = -1;  // which of the role's buffers (micro-batch, slot, bucket, unit); -1: the only one
  int chunk = 0;   // an interleaved pipeline's model chunk on its worker
  // Its size, held from setup (or its first use) to the end of the step, as the engine keeps its
  // buffers for the next step; a KeptGrad's only from its write to its read (plan/memory.h).
  int64_t bytes = 0;
  DType dtype = DType::F32;  // what its values are kept in (fsdp's gathered parameters: bf16 under --param-dtype bf16)
};
// "x", "x[3]", "c1/x[3]": for messages and the text and CSV plans.
std::string buffer_label(const PlanBuffer& b);
// What tells buffers apart: (worker, role, index, chunk).
using BufferKey = std::tuple<int, BufferRole, int, int>;
inline BufferKey buffer_key(const PlanBuffer& b) { return {b.worker, b.role, b.index, b.chunk}; }
inline bool same_buffer(const PlanBuffer& a, const PlanBuffer& b) { return buffer_key(a) == buffer_key(b); }

// The workers a communicator spans; a worker's rank in it is its index in `members`.
struct PlanGroup {
  std::string name;
  std::vector<int> members;
};

struct Action {
  int id = 0;  // its index in its worker's list
  ActionKind kind = ActionKind::Forward;
  PlanLane lane = PlanLane::Compute;
  int layer_begin = -1, layer_end = -1;
  int micro = -1;
  int peer = -1;   // Send, Recv: the other worker (a worker id, not a rank)
  int group = -1;  // Send, Recv, Collective: the communicator (index in Plan::groups)
  CollKind coll = CollKind::Other;
  int root = -1;      // broadcast, reduce: the root's rank in the group
  int64_t count = 0;  // values, as the communicator call's n
  int64_t bytes = 0;  // the payload (communication) or the values touched (compute)
  // Collective: the dtype its values travel in (bytes = the payload in it). Bf16 over fp32
  // buffers: rounded on the way in, widened on the way out (Communicator's wire, docs/bf16.md).
  DType dtype = DType::F32;
  int64_t samples = 0;  // compute: the samples it runs at (the simulator's batch for its layers)
  double part = 1;      // compute: the share of its layers' work it does (tp: its channels of K)
  bool async = false; // completes at a later Wait
  std::vector<int> waits;              // Wait: action ids on this worker
  std::vector<int> reads, writes;      // buffer ids (Plan::buffers)
};

struct Plan {
  std::string strategy;
  int workers = 0;
  int micro_batches = 1;
  int64_t batch = 0;
  // What the step was made for, beyond the fields above: (name, value) pairs such as the workload,
  // its shape and the dtypes, as `parbench plan` writes them; `run --plan` and `project --plan`
  // refuse a plan whose identity differs from theirs (plan_identity_mismatch, bench/cli.h).
  std::vector<std::pair<std::string, std::string>> identity;
  // Per layer of the net: its parameters (empty: unknown; the validator then skips layer coverage).
  std::vector<int64_t> layer_params;
  // Per worker: the replica of the net whose step it helps compute (-1: idle this step). Within a
  // replica every layer's forward and both backwards run once per micro-batch (over its workers).
  std::vector<int> replica;
  std::vector<PlanGroup> groups;
  std::vector<PlanBuffer> buffers;
  std::vector<std::vector<Action>> actions;  // per worker, in order
};

// Builds a plan: buffers by (worker, name), actions with their ids.
class PlanBuilder {
 public:
  PlanBuilder(std::string strategy, int workers, int64_t batch, int micro_batches);
  int group(const std::string& name, const std::vector<int>& members);  // reused by name
  // Reused by (worker, role, index, chunk); `bytes` and `dtype` are the first call's.
  int buffer(int worker, BufferRole role, int index, int64_t bytes, DType dtype = DType::F32, int chunk = 0);
  Action& add(int worker, ActionKind kind, PlanLane lane = PlanLane::Compute);
  // Communication: a Send / Recv over `group` to / from worker `peer`, its lane by direction.
  Action& p2p(int worker, ActionKind kind, int group, int peer, int64_t count, int buf, bool async);
  Action& collective(int worker, CollKind coll, int group, int64_t count, int64_t bytes, bool async);
  Action& wait(int worker, std::vector<int> ids);
  Action& compute(int worker, ActionKind kind, int layer_begin, int layer_end, int micro, std::vector<int> reads,
                  std::vector<int> writes);
  // Compute actions of `worker` added from now on run at `samples` samples (Action::samples).
  void at(int worker, int64_t samples) { samples_.at(worker) = samples; }
  int next_id(int worker) const { return static_cast<int>(plan_.actions.at(worker).size()); }
  Plan take() { return std::move(plan_); }
  Plan& plan() { return plan_; }

 private:
  Plan plan_;
  std::vector<int64_t> samples_;
};

// Writers: text (each worker's buffers with their sizes, then one line per action, readable), CSV
// (one row per action, a header) and JSON
// (the whole plan; read_plan_json reads it back).
void write_plan_text(std::ostream& os, const Plan& p);
void write_plan_csv(std::ostream& os, const Plan& p);
std::string plan_to_json(const Plan& p);
// UsageError naming `source` and the offending worker / action / field.
Plan plan_from_json(const std::string& text, const std::string& source);
Plan read_plan_file(const std::string& path);

// One line describing an action, for messages: "worker 1 action 7 (send to 2, 4096 B)".
std::string describe(const Plan& p, int worker, int id);

}  // namespace pb
