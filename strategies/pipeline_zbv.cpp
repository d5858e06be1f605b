// pipeline-zbv: zero-bubble V (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024, section 6;
// PyTorch's ScheduleZBVZeroBubble). The net in 2P stages, worker r holding stage r (its chunk 0)
// and stage 2P-1-r (its chunk 1): activations run down the workers and back up, so the last worker
// hands its chunk 0's output to its chunk 1 in place, and worker 0 computes the loss. Backwards are
// split into the input gradient (B), on the critical path, and the weight gradients (W), which fill
// what would be the pipeline's bubble; a W right after its own B runs with it as one backward.
#include <fmt/format.h>

#include "engine/check.h"
#include "strategies/rules.h"

namespace pb {

namespace {

using Part = PipeOp::Part;

// Worker r's order, as PyTorch's: warm-up forwards of chunk 0, then of both chunks, then chunk 1's
// first forwards each with its B and W; a steady state of one forward, B and W per chunk; a
// cool-down of B's, then the W's left. Made on max(M, 2P-1) micro-batches (the most the warm-up
// fills) with those beyond M dropped.
std::vector<PipeOp> zbv_ops(int P, int r, int M) {
  const int n = std::max(M, 2 * P - 1);
  int f[2] = {0, 0}, b[2] = {0, 0}, w[2] = {0, 0};
  std::vector<PipeOp> ops;
  auto F = [&](int c) { ops.push_back({true, f[c]++, false, false, Part::Whole, c}); };
  auto B = [&](int c) { ops.push_back({false, b[c]++, false, false, Part::Data, c}); };
  auto W = [&](int c) { ops.push_back({false, w[c]++, false, false, Part::Weights, c}); };
  for (int i = 0; i < 2 * (P - r) - 1; ++i) F(0);
  for (int i = 0; i < r; ++i) F(1), F(0);
  for (int i = 0; i < P - r; ++i) F(1), B(1), W(1);
  while (f[1] < f[0] || f[0] < n) {
    if (f[0] < n) F(0);
    B(0), W(0), F(1), B(1), W(1);
  }
  for (int i = 0; i < r; ++i) B(0), B(1);
  for (int i = 0; i < P - r; ++i) B(0), W(0);
  while (w[1] < b[1]) W(1);
  while (w[0] < b[0]) W(0);
  for (int c = 0; c < 2; ++c)
    PB_CHECK(f[c] == n && b[c] == n && w[c] == n, "ZB-V worker {} of {}: chunk {} ran {} forwards, {} B's, {} W's of {}", r,
             P, c, f[c], b[c], w[c], n);
  std::vector<PipeOp> out;
  bool first[2] = {true, true};
  for (const PipeOp& op : ops) {
    if (op.micro >= M) continue;
    if (op.part == Part::Weights && !out.empty() && out.back().part == Part::Data && out.back().chunk == op.chunk &&
        out.back().micro == op.micro) {
      out.back().part = Part::Whole;  // W right after its B: one whole backward, nothing kept
    } else {
      out.push_back(op);
    }
    PipeOp& last = out.back();
    if (!last.forward && last.part != Part::Data) last.first_backward = first[last.chunk], first[last.chunk] = false;
  }
  return out;
}

}  // namespace

ChunkSchedule zbv_schedule(const StrategyOptions&) {
  ChunkSchedule s;
  s.chunks = 2;
  s.stage = [](int workers, int rank, int chunk) { return chunk == 0 ? rank : 2 * workers - 1 - rank; };
  s.ops = [](int workers, int rank, int micro, const std::string&) { return zbv_ops(workers, rank, micro); };
  s.bubble = [](int workers, int micro) { return chunk_bubble(zbv_schedule({}), workers, micro, 1, 1, 1); };
  // Between workers r and r + 1 chunk 0's activations and chunk 1's input gradients go down,
  // chunk 1's activations and chunk 0's input gradients up, each kind in its own order: a channel
  // each, one way.
  s.one_way_channels = true;
  return s;
}

}  // namespace pb
