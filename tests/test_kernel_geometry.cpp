// The launch geometry of parbench's own CUDA kernels (engine/kernel_shapes.h), checked on a CPU:
// at the shapes a training step of great_net 512x512 runs (and Linear and small-image shapes),
// every kernel has threads enough to fill an H200 and short per-thread work, and the bias
// gradients' reductions sum every element once into its channel. No GPU needed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "engine/kernel_shapes.h"
#include "engine/net.h"
#include "engine/tensor.h"
#include "workloads/workload.h"

namespace pb {
namespace {

using kernels::ChannelSums;
using kernels::Launch;
using ::testing::IsEmpty;
using ::testing::Not;

// Threads an H100 or H200 holds resident: 132 SMs x 2048.
constexpr int64_t kResident = 132 * 2048;
// Elements one thread may handle in sequence while the work is under 16 x kResident elements.
constexpr int64_t kShortWork = 16;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// One launch at a problem size: n elements handled; channel, for a per-channel reduction, the
// elements of one channel (no thread may walk all of them). A reduction's second pass adds a
// few partials a channel: its time is a launch's latency, so it is held to short work and to a
// bound on the partials (`most_partials`), not to filling the GPU.
struct Case {
  std::string name;
  Launch launch;
  int64_t n = 0;
  int64_t channel = 0;
  int64_t most_partials = 0;  // second pass only
};

// What is wrong with a launch, one line each; empty when it fills the GPU.
std::vector<std::string> problems(const Case& c) {
  std::vector<std::string> out;
  const Launch& l = c.launch;
  const std::string at = fmt::format("{} (n {})", c.name, c.n);
  if (l.blocks < 1) out.push_back(at + ": no blocks");
  if (l.blocks * l.threads * l.serial < c.n)
    out.push_back(fmt::format("{}: {} blocks x {} threads x {} each cover fewer than n", at, l.blocks, l.threads, l.serial));
  const int64_t want = std::min(kResident, c.n);
  const bool second = c.most_partials > 0;
  if (!second && l.active < want)
    out.push_back(fmt::format("{}: {} threads at work, fewer than {} (the GPU's {} or n)", at, l.active, want, kResident));
  if (second && c.n > c.most_partials) out.push_back(fmt::format("{}: more than {} partials", at, c.most_partials));
  const int64_t most = second ? kShortWork : std::max(kShortWork, ceil_div(c.n, kResident));
  if (l.serial > most) out.push_back(fmt::format("{}: {} elements a thread, more than {}", at, l.serial, most));
  if (c.channel > kShortWork && l.serial >= c.channel)
    out.push_back(fmt::format("{}: one thread walks a whole channel ({} elements)", at, c.channel));
  return out;
}

// The two passes of a per-channel sum over outer x channels x inner.
void add_channel_sums(std::vector<Case>& cases, const std::string& name, const ChannelSums& s, int64_t outer,
                      int64_t channels, int64_t inner) {
  const int64_t n = outer * channels * inner;
  cases.push_back({name, s.partial, n, outer * inner, 0});
  if (s.finish.blocks == 0) return;
  // A partial for every kThreads elements of a channel (segments) or every 8 rows of a column
  // (columns: 8 row lanes or more a block), a channel's or column's last one shorter.
  const int64_t most = s.segments ? n / kernels::kThreads + channels : n / 8 + channels * inner;
  cases.push_back({name + " finish", s.finish, s.partials, s.per_channel, most});
}

// Every custom kernel a training step of `plan` at `batch` launches on the CUDA backend, fp32
// (or tf32) and bf16, at the sizes it launches them (engine/model.cpp, model_bf16.cpp,
// cuda_backend.cpp, cuda_bf16.cpp; Linear layers as their backward does).
std::vector<Case> step_launches(const NetPlan& plan, int64_t batch) {
  std::vector<Case> cases;
  const auto add = [&](const std::string& name, const Launch& l, int64_t n) { cases.push_back({name, l, n, 0, 0}); };
  for (const LayerPlan& l : plan.layers) {
    const int64_t in = batch * numel_of(l.in), out = batch * numel_of(l.out);
    const std::string at = fmt::format("layer {} ", l.index);
    add(at + "to_bf16 (input)", kernels::to_bf16(in), in);
    add(at + "from_bf16 (input gradient)", kernels::from_bf16(in), in);
    if (l.spec.type == LayerType::ReLU) {
      add(at + "relu_forward", kernels::relu_forward(out), out);
      add(at + "relu_backward", kernels::relu_backward(out), out);
      add(at + "relu_bf16", kernels::relu_bf16(out), out);
      add(at + "relu_backward_bf16", kernels::relu_backward_bf16(out), out);
    }
    if (l.spec.type == LayerType::Conv2d) {
      const int64_t k = l.out[0], pq = l.out[1] * l.out[2];
      add(at + "broadcast_bf16 (conv bias)", kernels::broadcast_bf16(out, k), out);
      add(at + "bias_relu (conv bias and the ReLU after it)", kernels::bias_relu(out, k), out);
      add(at + "from_bf16 (tp's widened dy)", kernels::from_bf16(out), out);
      for (bool acc : {false, true}) {
        add(at + "widen_bf16 (weight gradient)", kernels::widen_bf16(l.weight_numel, acc), l.weight_numel);
        add_channel_sums(cases, at + "channel_sums_bf16 (conv bias gradient)",
                         kernels::channel_sums_bf16(batch, k, pq, acc), batch, k, pq);
        // --layout nhwc: dy is rows of k channels.
        add_channel_sums(cases, at + "channel_sums_bf16 (NHWC conv bias gradient)",
                         kernels::channel_sums_bf16(batch * pq, k, 1, acc), batch * pq, k, 1);
      }
      // --layout nhwc, bf16: where a run of NHWC activations begins or ends, x and dx, y and dy
      // change layout; the filter goes to KRSC and its gradient back.
      const int64_t c = l.in[0], hw = l.in[1] * l.in[2], rs = l.weight_numel / (k * c);
      add(at + "transpose (x to NHWC)", kernels::transpose(batch, c, hw, 2), in);
      add(at + "transpose (dx to NCHW)", kernels::transpose(batch, hw, c, 2), in);
      add(at + "transpose (dy to NHWC)", kernels::transpose(batch, k, pq, 2), out);
      add(at + "transpose (y to NCHW)", kernels::transpose(batch, pq, k, 2), out);
      add(at + "transpose (w to KRSC)", kernels::transpose(k, c, rs, 2), l.weight_numel);
      add(at + "transpose (dw to KCRS)", kernels::transpose(k, rs, c, 2), l.weight_numel);
    }
    if (l.spec.type == LayerType::Linear) {
      const int64_t o = l.out[0];
      add(at + "broadcast_rows (linear bias)", kernels::broadcast_rows(batch, o), out);
      add(at + "broadcast_bf16 (linear bias)", kernels::broadcast_bf16(out, o), out);
      for (bool acc : {false, true}) {
        add_channel_sums(cases, at + "column_sums (linear bias gradient)", kernels::column_sums(batch, o, acc), batch, o,
                         1);
        add_channel_sums(cases, at + "channel_sums_bf16 (linear bias gradient)",
                         kernels::channel_sums_bf16(batch, o, 1, acc), batch, o, 1);
      }
    }
  }
  const int64_t out = batch * numel_of(plan.output), params = plan.param_count;
  add("mse_loss_grad", kernels::mse_loss_grad(out), out);
  add("from_bf16 (the output, for the loss)", kernels::from_bf16(out), out);
  add("adam", kernels::adam(params, false), params);
  add("adam (weight decay)", kernels::adam(params, true), params);
  add("to_bf16 (the parameters' bf16 copy)", kernels::to_bf16(params), params);
  add("fill (gradients)", kernels::fill(params), params);
  return cases;
}

NetPlan great_net_512() {
  WorkloadOptions o;
  o.image = 512;
  o.width = 1.0;
  return plan_net(resolve_workload("great_net", o));
}

TEST(KernelGeometry, EveryKernelFillsAGpuAtGreatNet512) {
  const NetPlan plan = great_net_512();
  ASSERT_EQ(plan.layers[12].out, (Shape{1024, 512, 512}));  // the largest: 268M values a sample
  for (int64_t batch : {1, 4}) {
    const std::vector<Case> cases = step_launches(plan, batch);
    ASSERT_GT(cases.size(), 100u);
    for (const Case& c : cases) EXPECT_THAT(problems(c), IsEmpty()) << "batch " << batch;
  }
}

// The skip ops (residual add, 2x2 max pooling, nearest 2x upsampling), fp32 and bf16, and a
// transposed convolution's bias and its gradient, at a U-Net's levels from 512x512 with 32
// channels down to 32x32 with 512, batch 1 and 4.
TEST(KernelGeometry, SkipOpsFillAGpuAtUNetShapes) {
  int checked = 0;
  for (int64_t batch : {1, 4})
    for (int64_t level = 0; level < 5; ++level) {
      const int64_t c = 32 << level, hw = 512 >> level, n = batch * c * hw * hw;
      for (int bytes : {4, 2}) {
        const std::string at = fmt::format("{} B, {}x{}x{}x{}: ", bytes, batch, c, hw, hw);
        for (const Case& k : {Case{at + "add", kernels::add(n, bytes), n},
                              Case{at + "max_pool2x2_forward", kernels::max_pool2x2_forward(n / 4, bytes), n / 4},
                              Case{at + "max_pool2x2_backward", kernels::max_pool2x2_backward(n, bytes), n},
                              Case{at + "upsample2x_forward", kernels::upsample2x_forward(4 * n, bytes), 4 * n},
                              Case{at + "upsample2x_backward", kernels::upsample2x_backward(n, bytes), n},
                              Case{at + "add_channel_bias", kernels::add_channel_bias(n, c), n}}) {
          EXPECT_THAT(problems(k), IsEmpty());
          ++checked;
        }
      }
      std::vector<Case> sums;
      add_channel_sums(sums, "channel_sums_f32 (transposed convolution's bias gradient)",
                       kernels::channel_sums_f32(batch, c, hw * hw, true), batch, c, hw * hw);
      for (const Case& k : sums) EXPECT_THAT(problems(k), IsEmpty());
    }
  EXPECT_EQ(checked, 2 * 5 * 2 * 6);
}

// The reductions at Linear and small-image shapes, both paths and the boundary between them:
// Linear layers from one sample to a million, 2 to 4096 features; images of 1x1 to 64x64.
TEST(KernelGeometry, BiasGradientsFillAGpuAtLinearAndSmallImageShapes) {
  int checked = 0;
  for (int64_t rows : {1, 4, 64, 1000, 1 << 20})
    for (int64_t cols : {2, 5, 33, 1000, 4096}) {
      std::vector<Case> cases;
      add_channel_sums(cases, "column_sums", kernels::column_sums(rows, cols, false), rows, cols, 1);
      add_channel_sums(cases, "channel_sums_bf16", kernels::channel_sums_bf16(rows, cols, 1, true), rows, cols, 1);
      for (const Case& c : cases) {
        EXPECT_THAT(problems(c), IsEmpty());
        ++checked;
      }
    }
  for (int64_t batch : {1, 8, 256})
    for (int64_t k : {3, 64, 2048})
      for (int64_t pq : {1, 4, 16, 31, 32, 49, 196, 256, 257, 4096}) {
        std::vector<Case> cases;
        add_channel_sums(cases, "channel_sums_bf16", kernels::channel_sums_bf16(batch, k, pq, false), batch, k, pq);
        for (const Case& c : cases) {
          EXPECT_THAT(problems(c), IsEmpty());
          ++checked;
        }
      }
  EXPECT_GT(checked, 100);
}

// The bias gradients before: one thread a channel, adding all of its outer x inner values.
Launch one_thread_a_channel(int64_t outer, int64_t channels, int64_t inner) {
  Launch l;
  l.blocks = std::min<int64_t>(ceil_div(channels, kernels::kThreads), 4096);
  l.active = channels;
  l.serial = outer * inner;
  return l;
}

// The check fails on what it is there to catch: great_net's 1024-channel layer got 4 blocks of
// 256 threads, each thread adding 262,144 values; the fp32 Linear's column sums walked every row.
TEST(KernelGeometry, TheCheckRefusesOneThreadAChannel) {
  const int64_t pq = 512 * 512;
  const std::vector<std::string> conv = problems({"old channel_sums_bf16", one_thread_a_channel(1, 1024, pq), 1024 * pq, pq, 0});
  EXPECT_THAT(conv, Not(IsEmpty()));
  EXPECT_THAT(fmt::format("{}", fmt::join(conv, "\n")), ::testing::HasSubstr("one thread walks a whole channel"));
  EXPECT_THAT(problems({"old column_sums", one_thread_a_channel(1 << 20, 2, 1), 2 << 20, 1 << 20, 0}), Not(IsEmpty()));
  // And the new geometry at the same shapes passes.
  std::vector<Case> now;
  add_channel_sums(now, "channel_sums_bf16", kernels::channel_sums_bf16(1, 1024, pq, false), 1, 1024, pq);
  add_channel_sums(now, "column_sums", kernels::column_sums(1 << 20, 2, false), 1 << 20, 2, 1);
  for (const Case& c : now) EXPECT_THAT(problems(c), IsEmpty());
}

// The reduction's index map, as cuda_channel_sums.cu's kernels walk it, run on the CPU: every
// element of dy lands in exactly one partial of its own channel, and every partial in exactly one
// channel's second pass (or, without one, the first pass writes each db[c] once).
void expect_each_element_once(int64_t outer, int64_t channels, int64_t inner) {
  SCOPED_TRACE(fmt::format("outer {} channels {} inner {}", outer, channels, inner));
  const ChannelSums s = kernels::channel_sums_bf16(outer, channels, inner, false);
  const int64_t n = outer * channels * inner, T = kernels::kThreads;
  std::vector<int> seen(static_cast<std::size_t>(n), 0);
  // For each partial (or db[c] directly): the channel it belongs to.
  const int64_t slots = s.partials > 0 ? s.partials : channels;
  std::vector<int64_t> slot_channel(static_cast<std::size_t>(slots), -1);
  const auto land = [&](int64_t element, int64_t slot) {
    ASSERT_GE(element, 0);
    ASSERT_LT(element, n);
    ASSERT_LT(slot, slots);
    ++seen[static_cast<std::size_t>(element)];
    const int64_t c = (element / inner) % channels;
    int64_t& sc = slot_channel[static_cast<std::size_t>(slot)];
    ASSERT_TRUE(sc == -1 || sc == c) << "slot " << slot << " gets channels " << sc << " and " << c;
    sc = c;
  };
  int64_t most = 0;  // elements one thread added
  for (int64_t b = 0; b < s.partial.blocks; ++b)
    for (int64_t t = 0; t < T; ++t) {
      int64_t count = 0;
      if (s.segments) {
        const int64_t c = b / s.chunks, j = b % s.chunks, m = outer * inner;
        for (int64_t k = j * s.chunk + t; k < std::min(m, (j + 1) * s.chunk); k += T, ++count)
          land((k / inner * channels + c) * inner + k % inner, s.partials > 0 ? c * s.chunks + j : c);
      } else {
        const int64_t lanes = T / s.width, cols = channels * inner;
        const int64_t r0 = (b / s.col_blocks) * s.chunk, col = (b % s.col_blocks) * s.width + t % s.width;
        if (col < cols)
          for (int64_t r = r0 + t / s.width; r < std::min(outer, r0 + s.chunk); r += lanes, ++count)
            land(r * cols + col, s.partials > 0 ? (b / s.col_blocks) * cols + col : col);
      }
      most = std::max(most, count);
    }
  EXPECT_EQ(most, s.partial.serial) << "the most elements a thread adds";
  for (int64_t e = 0; e < n; ++e) ASSERT_EQ(seen[static_cast<std::size_t>(e)], 1) << "element " << e;
  if (s.partials == 0) {
    EXPECT_EQ(s.finish.blocks, 0);
    return;
  }
  ASSERT_EQ(s.finish.blocks, channels);
  std::vector<int> read(static_cast<std::size_t>(s.partials), 0);
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t m = 0; m < s.per_channel; ++m) {
      const int64_t at = (m / s.group) * s.stride + c * s.group + m % s.group;
      ASSERT_LT(at, s.partials);
      ++read[static_cast<std::size_t>(at)];
      // A partial nothing landed in (a chunk past a short channel's end) stays unclaimed.
      const int64_t sc = slot_channel[static_cast<std::size_t>(at)];
      ASSERT_TRUE(sc == -1 || sc == c) << "channel " << c << " reads a partial of channel " << sc;
    }
  for (int64_t p = 0; p < s.partials; ++p) ASSERT_EQ(read[static_cast<std::size_t>(p)], 1) << "partial " << p;
}

TEST(KernelGeometry, EveryElementIsSummedOnceIntoItsChannel) {
  // Segments: one chunk a channel, many, a chunk ending mid-row, over a million elements (more
  // than one element a thread), no rows; columns: Linear from 1 row to many chunks of rows, inner
  // up to 31.
  for (const auto& [outer, channels, inner] : std::vector<std::array<int64_t, 3>>{
           {1, 3, 256}, {3, 5, 300}, {2, 7, 5100}, {2, 3, 262144}, {1, 1, 600000}, {0, 4, 256},
           {1, 1, 1}, {4, 1000, 1}, {1000, 37, 1}, {5000, 3, 1}, {300, 5, 63}, {2, 1024, 49}, {3000, 2, 255},
           {300, 5, 7}, {1, 1024, 16}, {40, 3, 31}, {2, 9, 32}})
    expect_each_element_once(outer, channels, inner);
}

// The per-channel bias kernels (bias_relu, broadcast_bf16, add_channel_bias) step each value's
// channel along their grid-stride loops (kernels::ChannelStep): run here for every thread of the
// grid those kernels launch, each value is visited once and gets (i / inner) % channels. Shapes
// with more values than threads (so that threads step), inner 1 (NHWC, rows), strides that wrap
// the plane and the channels.
TEST(KernelGeometry, ChannelStepGivesEveryValueItsChannel) {
  for (const auto& [outer, channels, inner] : std::vector<std::array<int64_t, 3>>{
           {2, 7, 157609}, {2, 1024, 1}, {1, 3, 1000003}, {5, 9, 49999}, {1, 1, 2100000}, {3, 5, 1},
           {2, 64, 65536}, {700000, 3, 1}, {2, 3, 5}})
    for (const Launch& l : {kernels::bias_relu(outer * channels * inner, channels),
                            kernels::broadcast_bf16(outer * channels * inner, channels),
                            kernels::add_channel_bias(outer * channels * inner, channels)}) {
      SCOPED_TRACE(fmt::format("outer {} channels {} inner {}, {} blocks", outer, channels, inner, l.blocks));
      const int64_t n = outer * channels * inner, stride = l.blocks * l.threads;
      std::vector<uint8_t> seen(static_cast<std::size_t>(n), 0);
      int64_t wrong = 0, most = 0;
      for (int64_t first = 0; first < std::min(n, stride); ++first) {
        kernels::ChannelStep at(first, stride, channels, inner);
        int64_t count = 0;
        for (int64_t i = first; i < n; i += stride, at.next(), ++count) {
          ++seen[static_cast<std::size_t>(i)];
          wrong += at.channel() != (i / inner) % channels;
        }
        most = std::max(most, count);
      }
      EXPECT_EQ(wrong, 0) << "values given another channel";
      EXPECT_EQ(most, l.serial) << "the most values a thread handles";
      EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), n) << "values not visited exactly once";
    }
}

}  // namespace
}  // namespace pb
