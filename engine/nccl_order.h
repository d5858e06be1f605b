// What NCCL sees of a job, as data: the launches NcclComm (engine/nccl/nccl_comm.cpp) makes from
// its front end's calls, and a simulator of NCCL's matching, so that the order of every rank's
// NCCL calls is checked on CPU (tests/test_nccl_order.cpp). Part of the core, not the CUDA module.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/comm.h"

namespace pb {

// One NCCL call inside a launch.
struct NcclOp {
  enum Kind : uint8_t { Send, Recv, Coll };
  Kind kind = Send;
  int comm = 0;       // which communicator: an id of the caller's
  int peer = -1;      // Send, Recv: the other rank, as a job rank
  int64_t count = 0;  // values
  CollKind coll = CollKind::Other;  // Coll
  int root = -1;                    // Coll: broadcast, reduce
  bool arrival = false;             // a collective's arrival handshake
};

// What one ncclGroupStart/End (or a bare call) launches on a rank's stream: its ops progress
// together and the launch completes when all have.
struct NcclLaunch {
  std::vector<NcclOp> ops;
  int stream = 0;
  // Launches of the same rank (indices) that complete before it starts: the transfers the rank's
  // compute waited for before issuing it, on other streams (its own stream orders the rest).
  std::vector<int> after = {};
};

// A point-to-point start; buf and id are NcclComm's.
struct P2pStart {
  bool send = true;
  int peer = -1;  // the rank in the communicator
  int64_t n = 0;
  void* buf = nullptr;
  int64_t id = -1;
  DType t = DType::F32;  // its values' (bf16: a pipeline's activations under --precision bf16)
};

// The values of a collective's arrival handshake.
inline constexpr int64_t kArrivalCount = 1;

// A batch of starts as NcclComm launches it: one group, in the order given. No handshake goes
// before it: the two ends of a message may group their ops differently (GPipe's turn from
// forwards to backwards), and a blocking handshake per batch then deadlocks
// (tests/test_nccl_order.cpp shows it); the wait for peers is split off afterwards instead
// (split_arrival). job_ranks maps a communicator rank to a job rank (empty: the same).
NcclLaunch p2p_launch(const std::vector<P2pStart>& batch, int comm, const std::vector<int>& job_ranks = {});
// A collective as NcclComm launches it: a kArrivalCount all-reduce, on the same communicator,
// then the collective. Every member issues the same collectives in the same order, so the
// handshakes always meet, and the collective begins with every member there: the handshake's
// span is the wait, the collective's the transfer.
std::vector<NcclLaunch> collective_launches(CollKind kind, int64_t n, int root, int comm);

// A point-to-point launch's span [from, to) on one clock, split given when each peer reached
// its matching launch: no data moves before the last of them has, so until then (at most to)
// the rank waits.
struct ArrivalSplit {
  double wait_s = 0, transfer_s = 0;
};
ArrivalSplit split_arrival(double from_s, double to_s, const std::vector<double>& peer_from_s);

// One rank's starts as NcclComm batches them: outside a group each start is a batch of its own;
// inside, the group's starts are one batch, issued at group_end.
class P2pBatcher {
 public:
  void group_start() { grouped_ = true; }
  bool grouped() const { return grouped_; }
  // True when the start is to be issued now (outside a group): take() has it.
  bool add(const P2pStart& s) {
    batch_.push_back(s);
    return !grouped_;
  }
  // The batch to issue, leaving none (and no group open).
  std::vector<P2pStart> take() {
    grouped_ = false;
    return std::move(batch_);
  }

 private:
  bool grouped_ = false;
  std::vector<P2pStart> batch_;
};

// The launches of every rank of a job, from its ranks' front-end calls (CommCall), as NcclComm
// makes them: each communicator's on a stream of its own (per rank), every launch starting only
// once the compute queued before it may run, so after the transfers that compute waited for (a
// wait_transfer, or a blocking call) on the rank's other communicators.
class NcclJob {
 public:
  explicit NcclJob(int ranks) : launches_(ranks), waited_(ranks) {}
  // A communicator over members (job ranks; position = rank in it); returns its id.
  int add_comm(std::vector<int> members);
  // Rank `rank` of communicator `comm` made call c.
  void call(int comm, int rank, const CommCall& c);
  const std::vector<std::vector<NcclLaunch>>& launches() const { return launches_; }
  const std::vector<std::vector<int>>& members() const { return members_; }

 private:
  std::vector<std::vector<NcclLaunch>> launches_;  // per job rank
  std::vector<std::vector<int>> members_;          // per communicator
  std::vector<std::vector<P2pBatcher>> batchers_;  // per communicator, per rank in it
  std::vector<std::vector<std::map<int64_t, int>>> started_;  // per communicator, rank in it: transfer id -> launch
  std::vector<std::map<int, int>> waited_;  // per job rank: stream -> the latest launch its compute waited for
};

// NCCL's matching, run to the end: each (rank, stream) runs its launches one after another in
// issue order, each once the launches it comes after (NcclLaunch::after) are complete; the k-th send from r to p on a communicator meets the k-th receive at p from r on
// it, of the same count, and the j-th collective on a communicator is every member's j-th there,
// of the same kind, count and root; an op completes only when its match is in the launch running
// at the peer (every member, for a collective). Returns "" when everything meets and completes;
// else what does not: the mismatch, or for a deadlock what each stuck rank waits for.
std::string simulate_nccl(const std::vector<std::vector<NcclLaunch>>& ranks,
                          const std::vector<std::vector<int>>& members);

std::string describe(const NcclOp& op);

}  // namespace pb
