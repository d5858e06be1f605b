// Splitting the layer list into contiguous pipeline stages (mp, pipeline).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "engine/graph_stage.h"
#include "engine/net.h"
#include "plan/plan.h"
#include "strategies/strategy.h"

namespace pb {

// Layer ranges [begin, end) of `stages` contiguous stages: `balance` (layers per stage) when not
// empty, else balanced by forward FLOPs with zero-FLOP layers (ReLU, Flatten) kept with their
// producer. UsageError when a stage would get no layer or the balance does not fit the net.
std::vector<std::pair<int, int>> split_stages(const NetPlan& plan, int stages, const std::vector<int>& balance,
                                              const std::string& strategy);

// As above with per-layer `weights` (seconds, say) in place of forward FLOPs; a stage still
// starts only before a layer with FLOPs where it can.
std::vector<std::pair<int, int>> split_stages_by(const NetPlan& plan, int stages, const std::vector<double>& weights,
                                                 const std::string& strategy);

// The split the options ask for: the balance list, else by FLOPs, by time (the net profiled on
// `device` at the micro-batch size, untimed; in a multi-process job every layer's time is the
// largest over the ranks, so all split alike -- collective), or the seed's 2-stage split.
std::vector<std::pair<int, int>> stage_ranges(const NetPlan& plan, int stages, const StrategyOptions& o,
                                              int micro_batches, Device device, const std::string& strategy);

// How stage s of a net cut into `ranges` meets the others: each value it reads from an earlier
// stage comes from the stage that makes it, and each of its exits goes to every later stage that
// reads it (a skip may cross several stages). A chain stage's are its input from s - 1 and its
// output to s + 1.
struct StageLinks {
  StageBoundary boundary;
  std::vector<int> entry_from;  // per entry: the stage making it (the net's input: stage 0; -1 on stage 0 itself)
  struct Out {
    int exit;   // its index in boundary.exits; -1: the net's input, which stage 0 holds
    int layer;  // the value's layer (kNetInput: the net's input)
    int to;     // the stage reading it
  };
  std::vector<Out> outs;  // by reader stage, then layer: the order a reader's entries come in
  // Per sample, the values of entry j and of out j.
  std::vector<int64_t> entry_numel, out_numel;
};
StageLinks stage_links(const NetPlan& plan, const std::vector<std::pair<int, int>>& ranges, int s);

// Per worker of a staged plan: the bytes it sends a step that are skips -- values (and their
// gradients) other than a stage's last layer's output to the stage after it and the input
// gradient to the stage before (the stages: its forwards' layers). Zero for a chain's pipeline.
std::vector<int64_t> skip_bytes(const Plan& p);

}  // namespace pb
