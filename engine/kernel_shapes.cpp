// Launch geometry of parbench's own CUDA kernels (engine/kernel_shapes.h): plain arithmetic,
// built with or without CUDA.
#include "engine/kernel_shapes.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "engine/check.h"

namespace pb::kernels {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The grid's x dimension holds at most 2^31 - 1 blocks.
int64_t checked_blocks(int64_t blocks, const char* kernel) {
  PB_CHECK(blocks <= std::numeric_limits<int32_t>::max(), "{}: {} blocks exceed a CUDA grid", kernel, blocks);
  return blocks;
}

// A grid-stride loop over n elements.
Launch grid_stride(int64_t n, double bytes_per_element, double flops_per_element, const char* kernel) {
  Launch l;
  if (n <= 0) return l;
  l.blocks = checked_blocks(std::min(ceil_div(n, kThreads), kMaxBlocks), kernel);
  l.active = std::min(n, l.blocks * kThreads);
  l.serial = ceil_div(n, l.blocks * kThreads);
  l.bytes = bytes_per_element * static_cast<double>(n);
  l.flops = flops_per_element * static_cast<double>(n);
  return l;
}

}  // namespace

Launch fill(int64_t n) { return grid_stride(n, 4, 0, "fill"); }
Launch relu_forward(int64_t n) { return grid_stride(n, 8, 1, "relu_forward"); }
Launch relu_backward(int64_t n) { return grid_stride(n, 12, 1, "relu_backward"); }

Launch bias_relu(int64_t n, int64_t channels) {
  Launch l = grid_stride(n, 8, 2, "bias_relu");
  if (l.blocks > 0) l.bytes += 4.0 * static_cast<double>(channels);
  return l;
}

Launch broadcast_rows(int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0) return {};
  Launch l = grid_stride(rows * cols, 4, 0, "broadcast_rows");
  l.bytes += 4.0 * static_cast<double>(cols);
  return l;
}

Launch mse_loss_grad(int64_t n) {
  // n == 0 still runs one block, so the loss becomes 0.
  Launch l;
  l.blocks = std::clamp<int64_t>(ceil_div(n, kThreads), 1, kMseMaxBlocks);
  l.active = std::max<int64_t>(1, std::min(n, l.blocks * kThreads));
  // Then the last block to finish adds the blocks' partial sums.
  l.serial = std::max(ceil_div(n, l.blocks * kThreads), ceil_div(l.blocks, kThreads));
  l.bytes = 12.0 * static_cast<double>(n) + 8.0 * 2 * static_cast<double>(l.blocks) + 4;
  l.flops = 4.0 * static_cast<double>(n) + static_cast<double>(l.blocks);
  return l;
}

Launch adam(int64_t n, bool weight_decay) { return grid_stride(n, 28, weight_decay ? 15 : 13, "adam"); }

Launch add(int64_t n, int value_bytes) { return grid_stride(n, 3.0 * value_bytes, 1, "add"); }
// Bytes count each value once: a window's four inputs are read by the one thread that writes its
// output (forward) or by the four threads of its inputs, one each (backward), its dy shared.
Launch max_pool2x2_forward(int64_t outputs, int value_bytes) {
  return grid_stride(outputs, 5.0 * value_bytes, 3, "max_pool2x2_forward");
}
Launch max_pool2x2_backward(int64_t inputs, int value_bytes) {
  return grid_stride(inputs, 2.25 * value_bytes, 3, "max_pool2x2_backward");
}
Launch upsample2x_forward(int64_t outputs, int value_bytes) {
  return grid_stride(outputs, 1.25 * value_bytes, 0, "upsample2x_forward");
}
Launch upsample2x_backward(int64_t inputs, int value_bytes) {
  return grid_stride(inputs, 5.0 * value_bytes, 3, "upsample2x_backward");
}

Launch transpose(int64_t batches, int64_t rows, int64_t cols, int value_bytes) {
  Launch l;
  if (batches <= 0 || rows <= 0 || cols <= 0) return l;
  if (!transpose_tiled(rows, cols)) return grid_stride(batches * rows * cols, 2.0 * value_bytes, 0, "transpose");
  constexpr int64_t T = kTransposeTile, lanes = kThreads / kTransposeTile;  // 32 x 8 threads
  const int64_t tr = ceil_div(rows, T), tc = ceil_div(cols, T), tiles = batches * tr * tc;
  l.blocks = checked_blocks(std::min(tiles, kMaxBlocks), "transpose");
  // Threads of a tile with vr x vc values: those that read (column < vc, first row < vr) or
  // write (column < vr, first row < vc); averaged over the tile sizes, for the first wave.
  // (Rows and columns are at least T here: the edge tiles are the only partial ones.)
  const auto active_in = [&](int64_t vr, int64_t vc) {
    const int64_t a = std::min(vr, lanes), b = std::min(vc, lanes);
    return vc * a + vr * b - std::min(vc, vr) * std::min(a, b);
  };
  const int64_t full_r = rows / T, full_c = cols / T, rest_r = rows % T, rest_c = cols % T;
  double total = 0;
  for (const auto& [nr, vr] : {std::pair{full_r, T}, std::pair{rest_r > 0 ? int64_t(1) : int64_t(0), rest_r}})
    for (const auto& [nc, vc] : {std::pair{full_c, T}, std::pair{rest_c > 0 ? int64_t(1) : int64_t(0), rest_c}})
      total += static_cast<double>(nr * nc) * static_cast<double>(active_in(vr, vc));
  l.active = static_cast<int64_t>(static_cast<double>(l.blocks) * total / static_cast<double>(tr * tc));
  l.serial = T / lanes * ceil_div(tiles, l.blocks);
  l.bytes = 2.0 * value_bytes * static_cast<double>(batches * rows * cols);
  return l;
}

Launch add_channel_bias(int64_t n, int64_t channels) {
  Launch l = grid_stride(n, 8, 1, "add_channel_bias");
  if (l.blocks > 0) l.bytes += 4.0 * static_cast<double>(channels);
  return l;
}

Launch to_bf16(int64_t n) { return grid_stride(n, 6, 0, "to_bf16"); }
Launch from_bf16(int64_t n) { return grid_stride(n, 6, 0, "from_bf16"); }
Launch relu_bf16(int64_t n) { return grid_stride(n, 4, 1, "relu_bf16"); }
Launch relu_backward_bf16(int64_t n) { return grid_stride(n, 6, 1, "relu_backward_bf16"); }

Launch broadcast_bf16(int64_t n, int64_t channels) {
  Launch l = grid_stride(n, 2, 0, "broadcast_bf16");
  if (l.blocks > 0) l.bytes += 2.0 * static_cast<double>(channels);
  return l;
}

Launch widen_bf16(int64_t n, bool accumulate) {
  return grid_stride(n, accumulate ? 10 : 6, accumulate ? 1 : 0, "widen_bf16");
}

ChannelSums channel_sums(int64_t outer, int64_t channels, int64_t inner, int value_bytes, int acc_bytes,
                         bool accumulate) {
  ChannelSums s;
  if (channels <= 0) return s;
  PB_CHECK(inner >= 1 && outer >= 0, "channel sums over outer {} x inner {}", outer, inner);
  const int64_t m = outer * inner;  // elements a channel
  const int64_t n = channels * m;
  // Elements a thread adds: 1 while the work has fewer than kFillThreads elements (every element
  // its own thread), then more, up to kMaxSerial, so that n / serial >= kFillThreads threads.
  const int64_t serial = std::clamp<int64_t>(n / kFillThreads, 1, kMaxSerial);
  if (inner >= kSegmentInner) {
    s.segments = true;
    s.chunk = kThreads * serial;
    s.chunks = std::max<int64_t>(1, ceil_div(m, s.chunk));
    if (s.chunks > kMaxChunks) {
      s.chunk = ceil_div(ceil_div(m, kMaxChunks), kThreads) * kThreads;
      s.chunks = ceil_div(m, s.chunk);
    }
    s.partial.blocks = checked_blocks(channels * s.chunks, "channel_sums");
    // Every chunk but a channel's last fills its block (chunk >= kThreads).
    s.partial.active = channels * ((s.chunks - 1) * kThreads + std::min<int64_t>(kThreads, m - (s.chunks - 1) * s.chunk));
    s.partial.serial = ceil_div(std::min(m, s.chunk), kThreads);
    s.partials = s.chunks > 1 ? channels * s.chunks : 0;
    s.group = s.chunks;
  } else {
    const int64_t rows = outer, cols = channels * inner;
    s.width = 1;
    while (s.width < 32 && s.width < cols) s.width *= 2;
    const int64_t lanes = kThreads / s.width;
    s.col_blocks = ceil_div(cols, s.width);
    s.chunk = lanes * serial;
    s.chunks = std::max<int64_t>(1, ceil_div(rows, s.chunk));
    if (s.chunks * inner > kMaxChunks) {
      s.chunk = ceil_div(ceil_div(rows, kMaxChunks / inner), lanes) * lanes;
      s.chunks = ceil_div(rows, s.chunk);
    }
    s.partial.blocks = checked_blocks(s.col_blocks * s.chunks, "channel_sums");
    // Row lanes that get a row: all of every chunk's but the last one's.
    const int64_t last = rows - (s.chunks - 1) * s.chunk;
    const int64_t lanes_used = rows <= 0 ? 0 : (s.chunks - 1) * lanes + std::min(lanes, last);
    s.partial.active = cols * lanes_used;
    s.partial.serial = ceil_div(std::min(rows, s.chunk), lanes);
    s.partials = s.chunks > 1 || inner != 1 ? s.chunks * cols : 0;
    s.group = inner;
    s.stride = cols;
  }
  s.partial.bytes = static_cast<double>(value_bytes) * static_cast<double>(n);
  s.partial.flops = static_cast<double>(n);
  const double db_bytes = (accumulate ? 8.0 : 4.0) * static_cast<double>(channels);
  if (s.partials == 0) {
    s.partial.bytes += db_bytes;
    return s;
  }
  s.partial.bytes += static_cast<double>(acc_bytes) * static_cast<double>(s.partials);
  s.per_channel = s.partials / channels;
  s.finish.blocks = checked_blocks(channels, "channel_sums finish");
  s.finish.active = channels * std::min<int64_t>(kThreads, s.per_channel);
  s.finish.serial = ceil_div(s.per_channel, kThreads);
  s.finish.bytes = static_cast<double>(acc_bytes) * static_cast<double>(s.partials) + db_bytes;
  s.finish.flops = static_cast<double>(s.partials);
  return s;
}

}  // namespace pb::kernels
