// The link model: a collective's cost on a machine from its alpha-beta fits or measured points,
// and the least-squares fits calibrate makes of them.
#include "projection/links.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "engine/check.h"

namespace pb::projection {

double latency_steps(CollKind c, const std::string& algorithm, int n) {
  if (n <= 1) return 0;
  if (c == CollKind::SendRecv) return 1;
  const double log_n = std::ceil(std::log2(static_cast<double>(n)));
  const bool tree = algorithm == "tree";
  switch (c) {
    case CollKind::AllReduce: return tree ? 2 * log_n : 2.0 * (n - 1);  // reduce-scatter + all-gather, or up and down a tree
    case CollKind::AllGather:
    case CollKind::ReduceScatter: return tree ? log_n : n - 1.0;
    default: return tree ? log_n : n - 1.0;  // broadcast, reduce: a pipelined chain or a tree
  }
}

namespace {
// AtRanks::points at `bytes`; beyond the last, seconds_per_byte for each byte more.
double read_points(const std::vector<std::pair<double, double>>& p, double bytes, double seconds_per_byte) {
  if (bytes <= p.front().first) return p.front().second;
  if (bytes >= p.back().first) return p.back().second + (bytes - p.back().first) * seconds_per_byte;
  const auto hi = std::lower_bound(p.begin(), p.end(), bytes, [](const auto& q, double b) { return q.first < b; });
  const auto lo = hi - 1;
  return lo->second + (hi->second - lo->second) * (bytes - lo->first) / (hi->first - lo->first);
}
}  // namespace

std::vector<std::pair<double, double>> monotone_points(std::vector<Sample> samples) {
  std::sort(samples.begin(), samples.end(), [](const Sample& a, const Sample& b) { return a.bytes < b.bytes; });
  // Pool adjacent violators; samples of one size are pooled from the start.
  struct Block {
    double sum, n;
    std::size_t first, last;
  };
  std::vector<Block> blocks;
  for (std::size_t i = 0; i < samples.size(); ++i) {
    if (!blocks.empty() && samples[blocks.back().last].bytes == samples[i].bytes) {
      blocks.back().sum += samples[i].seconds, blocks.back().n += 1, blocks.back().last = i;
    } else {
      blocks.push_back({samples[i].seconds, 1, i, i});
    }
    while (blocks.size() >= 2 && blocks[blocks.size() - 2].sum / blocks[blocks.size() - 2].n > blocks.back().sum / blocks.back().n) {
      Block b = blocks.back();
      blocks.pop_back();
      blocks.back().sum += b.sum, blocks.back().n += b.n, blocks.back().last = b.last;
    }
  }
  std::vector<std::pair<double, double>> out;
  for (const Block& b : blocks)
    for (std::size_t i = b.first; i <= b.last; ++i)
      if (out.empty() || out.back().first != samples[i].bytes) out.push_back({samples[i].bytes, b.sum / b.n});
  return out;
}

CollCost collective_cost(const Machine& m, CollKind c, double bytes, int ranks, bool spans_nodes, int fit_ranks,
                         const AlphaBeta::Layout* layout, bool late) {
  CollCost best;
  if (ranks <= 1) return best;
  const LinkCosts& level = spans_nodes ? m.inter_node : m.intra_node;
  const auto it = level.find(coll_kind_name(c));
  if (it == level.end())
    throw UsageError(fmt::format("{}: links.{}.{}: needed by this configuration, but the machine lists no cost for it",
                                 m.source, spans_nodes ? "inter_node" : "intra_node", coll_kind_name(c)));
  best.seconds = std::numeric_limits<double>::infinity();
  for (const auto& [alg, ab] : it->second) {
    const auto at = ab.at_ranks.find(fit_ranks > 0 ? fit_ranks : ranks);
    const auto in = layout ? ab.in_groups.find(*layout) : ab.in_groups.end();
    const AlphaBeta::AtRanks* f = in != ab.in_groups.end() ? &in->second : at != ab.at_ranks.end() ? &at->second : nullptr;
    const double alpha = f ? f->alpha_s : ab.alpha_s;
    const double bus = f ? f->bus_bytes_per_s : ab.bus_bytes_per_s;
    // Measured times apply to the very meeting they timed: this group's layout, or all `ranks`.
    const bool measured = f && !f->points.empty() && (in != ab.in_groups.end() || fit_ranks <= 0 || fit_ranks == ranks);
    const bool late_measured = measured && late && !f->late_points.empty() && bytes <= f->late_points.back().first;
    const double t = late_measured ? read_points(f->late_points, bytes, 0)
                     : measured    ? read_points(f->points, bytes, bus_factor(c, ranks) / bus)
                                   : alpha * latency_steps(c, alg, ranks) + bytes * bus_factor(c, ranks) / bus;
    if (t < best.seconds) best = {t, alg};
  }
  return best;
}

AlphaBeta fit_alpha_beta(CollKind c, const std::string& algorithm, const std::vector<Sample>& samples) {
  // t = a * x1 + g * x2 with x1 = latency steps, x2 = bytes * factor; g = 1 / bandwidth. Least
  // squares weighted by 1/t, so small and large messages count alike (relative error).
  double s11 = 0, s12 = 0, s22 = 0, s1t = 0, s2t = 0;
  for (const Sample& s : samples) {
    const double w = 1.0 / (s.seconds * s.seconds);
    // One rank moves nothing (engine/comm.h's bus_factor is 1 there for broadcast, reduce, send/recv).
    const double x1 = latency_steps(c, algorithm, s.ranks), x2 = s.ranks > 1 ? s.bytes * bus_factor(c, s.ranks) : 0;
    s11 += w * x1 * x1, s12 += w * x1 * x2, s22 += w * x2 * x2, s1t += w * x1 * s.seconds, s2t += w * x2 * s.seconds;
  }
  const double det = s11 * s22 - s12 * s12;
  PB_CHECK(det > 0, "calibration of {}: the samples do not determine alpha and bandwidth", coll_kind_name(c));
  double a = (s1t * s22 - s2t * s12) / det, g = (s11 * s2t - s12 * s1t) / det;
  if (a < 0) a = 0, g = s2t / s22;  // a negative latency is noise: refit the slope alone
  if (g <= 0) g = 1e-15, a = s1t / s11;
  AlphaBeta out;
  out.alpha_s = a, out.bus_bytes_per_s = 1.0 / g;
  return out;
}

}  // namespace pb::projection
