// Launch geometry of parbench's own CUDA kernels (engine/cuda/*.cu), and the per-thread index
// math they share, in plain C++: every launch site takes its grid and per-thread work from here,
// and tests/test_kernel_geometry.cpp checks on a CPU that each kernel keeps a GPU busy at the
// shapes the workloads run. Formulas and the table of bytes and roofline times:
// docs/gpu.md#parbenchs-own-kernels.
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define PB_HOST_DEVICE __host__ __device__
#else
#define PB_HOST_DEVICE
#endif

namespace pb::kernels {

constexpr int kThreads = 256;  // threads a block, every kernel
// Grid-stride loops: at most this many blocks (2M threads, several times what any current GPU
// holds resident), never more than the work needs.
constexpr int64_t kMaxBlocks = 8192;
// Threads a reduction keeps busy when it has that many elements: about twice what a 132-SM GPU
// (H100, H200: 2048 resident threads an SM) holds at once.
constexpr int64_t kFillThreads = int64_t(1) << 19;
// A reduction's thread adds at most this many elements while a channel's partials stay within
// kMaxChunks (so that the second pass adds at most 16 a thread); beyond that (over 16M elements
// a channel) each thread of the first pass takes more.
constexpr int64_t kMaxSerial = 16;
constexpr int64_t kMaxChunks = 4096;
// The MSE kernel's blocks, each leaving one partial sum (the backend's scratch holds them).
constexpr int kMseMaxBlocks = 2048;

// One kernel launch: a 1-D grid of `blocks` x `threads`.
struct Launch {
  int64_t blocks = 0;      // 0: not launched
  int threads = kThreads;  // a block
  int64_t active = 0;      // threads that read or write at least one element
  int64_t serial = 0;      // the most elements one thread handles in sequence
  double bytes = 0;        // read from and written to device memory (each element once)
  double flops = 0;
};

// Element-wise, grid-stride: y = value; ReLU forward (x -> y) and backward (y, dy -> dx) in fp32.
Launch fill(int64_t n);
Launch relu_forward(int64_t n);
Launch relu_backward(int64_t n);
// y = max(y + b[c], 0) in place over n fp32 values of `channels` channels: a convolution's bias and
// the ReLU after it in one pass (each thread finds its first value's channel once and steps it).
Launch bias_relu(int64_t n, int64_t channels);
// The channel of value i of a [outer, channels, inner] tensor, (i / inner) % channels, along a
// grid-stride loop: divided out once for the thread's first value, then stepped by the stride's
// share, since a GPU divides 64-bit integers in software. The kernels that add a per-channel bias
// use it; tests/test_kernel_geometry.cpp runs it on the CPU for every thread of their grids.
class ChannelStep {
 public:
  PB_HOST_DEVICE ChannelStep(int64_t first, int64_t stride, int64_t channels, int64_t inner)
      : channels_(channels), inner_(inner), step_r_(stride % inner), step_c_((stride / inner) % channels),
        r_(first % inner), c_((first / inner) % channels) {}
  PB_HOST_DEVICE int64_t channel() const { return c_; }
  // To the value `stride` further on: r_ + step_r_ < 2 inner and c_ + step_c_ + 1 < 2 channels, so
  // one subtraction each.
  PB_HOST_DEVICE void next() {
    r_ += step_r_;
    c_ += step_c_;
    if (r_ >= inner_) {
      r_ -= inner_;
      ++c_;
    }
    if (c_ >= channels_) c_ -= channels_;
  }

 private:
  int64_t channels_, inner_, step_r_, step_c_, r_, c_;
};

// y[i, o] = b[o], rows x cols (fp32 Linear's bias before the GEMM adds to it).
Launch broadcast_rows(int64_t rows, int64_t cols);
// The ops of nets with skips, over fp32 (value_bytes 4) or bf16 (2) values, each a grid-stride
// loop over the values it writes: the residual add; 2x2 max pooling over its outputs (forward:
// a window of four each) and over its inputs (backward: each thread its window's argmax and dy);
// nearest 2x upsampling over its outputs (forward) and its inputs (backward: four dy each).
Launch add(int64_t n, int value_bytes);
Launch max_pool2x2_forward(int64_t outputs, int value_bytes);
Launch max_pool2x2_backward(int64_t inputs, int value_bytes);
Launch upsample2x_forward(int64_t outputs, int value_bytes);
Launch upsample2x_backward(int64_t inputs, int value_bytes);
// y += b[c] over n fp32 values of `channels` channels (a transposed convolution's bias).
Launch add_channel_bias(int64_t n, int64_t channels);
// dy = scale (y - t) and the sum of (y - t)^2: blocks of partial sums, the last block adds them.
Launch mse_loss_grad(int64_t n);
// Adam's step over n parameters (p, g, m, v read; p, m, v written).
Launch adam(int64_t n, bool weight_decay);
// bf16: casts, ReLU forward and backward, a bias broadcast over n values of `channels` channels,
// and a bf16 gradient widened into fp32 (added there when accumulating).
Launch to_bf16(int64_t n);
Launch from_bf16(int64_t n);
Launch relu_bf16(int64_t n);
Launch relu_backward_bf16(int64_t n);
Launch broadcast_bf16(int64_t n, int64_t channels);
Launch widen_bf16(int64_t n, bool accumulate);

// dst[b][c][r] = src[b][r][c] (the NHWC layout's conversions). Rows and columns both at least a
// tile: 32 x 32 tiles through shared memory, a block of kThreads (32 x 8) moving one tile at a
// time, 4 values a thread, in a grid-stride loop over the batches x tiles (a tile at an edge keeps
// only its threads with values). Narrower (3 channels, a 3x3 filter's 9 taps): a grid-stride loop
// over dst, a warp writing adjacent values and reading a few short runs.
constexpr int kTransposeTile = 32;
inline bool transpose_tiled(int64_t rows, int64_t cols) { return rows >= kTransposeTile && cols >= kTransposeTile; }
Launch transpose(int64_t batches, int64_t rows, int64_t cols, int value_bytes);

// db[c] (+)= the sum over o < outer, i < inner of dy[(o * channels + c) * inner + i]: a bias
// gradient. Two passes, no atomics (the same sum every run):
//  - segments (inner >= kSegmentInner: convolutions but the smallest images): block (c, j) adds
//    the elements [j * chunk, (j + 1) * chunk) of channel c's outer x inner ones, o-major, thread
//    t those at t, t + kThreads, ...: runs of inner adjacent values, at least a warp's width;
//  - columns (inner < kSegmentInner: Linear, 1x1 to 5x5 images): dy seen as rows = outer by
//    cols = channels x inner; a block holds `width` adjacent columns (a power of two up to 32)
//    by kThreads / width row lanes and adds rows [r * chunk, (r + 1) * chunk) of them, a warp
//    reading 32 adjacent values of the row-major gradient.
// Then one block per channel adds that channel's partials (segments: `chunks` of them; columns:
// chunks x inner) in a fixed order. With one partial a channel the first pass writes db itself.
constexpr int64_t kSegmentInner = 32;
struct ChannelSums {
  bool segments = false;
  int64_t chunks = 0;      // segments: chunks a channel; columns: chunks of rows
  int64_t chunk = 0;       // segments: elements a chunk (a multiple of kThreads); columns: rows a chunk
  int width = 0;           // columns: columns a block
  int64_t col_blocks = 0;  // columns: blocks across a row
  int64_t partials = 0;    // partial sums in scratch; 0: the first pass writes db
  // finish: channel c's partials are m < per_channel, at (m / group) * stride + c * group + m % group.
  int64_t per_channel = 0, group = 1, stride = 0;
  Launch partial, finish;  // finish.blocks == 0: no second pass
};
// value_bytes: an element of dy (4 fp32, 2 bf16); acc_bytes: a partial sum (8 double, 4 float).
// inner >= 1, outer >= 0.
ChannelSums channel_sums(int64_t outer, int64_t channels, int64_t inner, int value_bytes, int acc_bytes,
                         bool accumulate);
// fp32 Linear: db[o] (+)= sum_i dy[i, o], in double.
// fp32 NCHW values, summed in double (a transposed convolution's bias gradient).
inline ChannelSums channel_sums_f32(int64_t outer, int64_t channels, int64_t inner, bool accumulate) {
  return channel_sums(outer, channels, inner, 4, 8, accumulate);
}
inline ChannelSums column_sums(int64_t rows, int64_t cols, bool accumulate) {
  return channel_sums(rows, cols, 1, 4, 8, accumulate);
}
// bf16 convolutions (outer N, inner P * Q) and Linear (inner 1), summed in fp32.
inline ChannelSums channel_sums_bf16(int64_t outer, int64_t channels, int64_t inner, bool accumulate) {
  return channel_sums(outer, channels, inner, 2, 4, accumulate);
}

}  // namespace pb::kernels
