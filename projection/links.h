// The link model: what a collective costs on a machine (the cheapest listed algorithm, a fit per
// worker count or group layout, measured points), and calibrate's fits of it to measured times.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "engine/comm.h"
#include "projection/machine.h"

namespace pb::projection {

// The collectives are engine/comm.h's CollKind: their names coll_kind_name (the keys of a machine
// file's links), their nccl-tests bus factor bus_factor.
// Latency terms of one collective on `ranks` under an algorithm (ring, tree, direct).
double latency_steps(CollKind c, const std::string& algorithm, int ranks);

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
CollCost collective_cost(const Machine& m, CollKind c, double bytes, int ranks, bool spans_nodes, int fit_ranks = 0,
                         const AlphaBeta::Layout* layout = nullptr, bool late = false);

// Fits alpha and bus bandwidth to measured times by least squares on
// t = alpha * latency_steps + bytes * bus_factor / bandwidth.
struct Sample {
  int ranks = 0;
  double bytes = 0, seconds = 0;
};
AlphaBeta fit_alpha_beta(CollKind c, const std::string& algorithm, const std::vector<Sample>& samples);
// The samples (one worker count or group) as AtRanks::points: bytes ascending, times made
// non-decreasing in bytes by the least-squares monotone fit (neighbours that measured out of order
// pooled to their mean), so that a larger message never reads as cheaper than a smaller one.
std::vector<std::pair<double, double>> monotone_points(std::vector<Sample> samples);

}  // namespace pb::projection
