// The event simulator that prices a step: each worker's program of compute and communication
// operations (actors: a worker's compute, a communication stream beside it), played with blocking
// rendezvous for send/recv and collectives, CPU cores shared between worker threads, and
// collectives beside compute only where the machine overlaps them.
#pragma once

#include <vector>

#include "projection/machine.h"

namespace pb::projection {

struct Op {
  enum Kind { Compute, Send, Recv, Coll, Signal, Wait, Delay } kind = Compute;
  double s = 0;       // seconds: compute at full speed, the transfer (Send, Coll), or a start's lag (Delay)
  int peer = -1;      // Send/Recv: the other actor
  int tag = 0;        // Coll: the collective instance; Signal/Wait: the event
  int count = 0;      // Coll: participants
  bool eager = false; // Send/Recv: the sender goes on once its data is out (a buffer per message)
  double late = -1;   // Coll: its seconds when the last participant arrives late (< 0: s)
  int action = -1;    // the plan action it plays (an id on its actor's worker); -1: none
};

// A collective's seconds: its participants arriving together, or the last one late (its peers
// already waiting).
struct CollTime {
  double s = 0, late = 0;
};
// A collective instance `tag` of `count` participants taking `t`.
Op coll_op(const CollTime& t, int tag, int count);

struct Actor {
  int worker = 0;
  bool uses_cores = true;  // false: a communication stream
  std::vector<Op> ops;
};

// An op of a plan action as played: from when it began to work (computing, moving data) to its end.
struct ActionSpan {
  int worker = 0, action = 0;
  double start = 0, end = 0;
};

struct SimResult {
  double end = 0;
  std::vector<double> compute, exposed;  // per worker
  std::vector<ActionSpan> actions;       // every op with an action, in the order they ended
};

// One-thread CPU workers of a node beyond its cores are bound to them round robin
// (strategies/pool.cpp): local worker i on core i mod C.
bool bound_round_robin(const Machine& m, int threads, int workers);

// Plays the actors' programs. Send/Recv pairs meet (rendezvous) unless eager, the receiver going
// on sender_trails_s before the sender; a Coll starts when
// all its participants arrived; compute on a node whose CPU cores are shared runs at each busy
// thread's share of the cores, min(1, C / busy threads), relative to the share it had while the
// profile was timed (`timed_busy` workers of `threads` threads each).
SimResult simulate(const std::vector<Actor>& actors, int workers, const Machine& m, int threads, int timed_busy,
                   const std::vector<double>& busy_seconds);

}  // namespace pb::projection
