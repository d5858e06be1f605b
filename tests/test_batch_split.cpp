// The batch split for cuDNN's 2^31-element tensor limit: sizes, offsets and limits.
#include <gtest/gtest.h>

#include <numeric>

#include "engine/batch_split.h"
#include "engine/check.h"

namespace pb {
namespace {

ConvGeom conv3x3(int64_t n, int64_t c, int64_t k, int64_t hw) {
  ConvGeom g;
  g.n = n, g.c = c, g.k = k, g.h = hw, g.w = hw, g.r = 3, g.s = 3, g.pad_h = 1, g.pad_w = 1;
  return g;
}

// Parts are consecutive, cover the batch, and each stays under the limit on input and output.
void expect_valid(const ConvGeom& g, const std::vector<BatchPart>& parts, int64_t limit) {
  ASSERT_FALSE(parts.empty());
  int64_t next = 0, lo = parts.front().n, hi = parts.front().n;
  for (const BatchPart& p : parts) {
    EXPECT_EQ(p.offset, next);
    EXPECT_GE(p.n, 1);
    EXPECT_LE(p.n * g.c * g.h * g.w, limit) << "input of part at " << p.offset;
    EXPECT_LE(p.n * g.k * g.p() * g.q(), limit) << "output of part at " << p.offset;
    lo = std::min(lo, p.n), hi = std::max(hi, p.n);
    next += p.n;
  }
  EXPECT_EQ(next, g.n) << "parts cover the batch";
  EXPECT_LE(hi - lo, 1) << "balanced";
}

TEST(BatchSplit, WholeBatchWhenItFits) {
  const ConvGeom g = conv3x3(4, 16, 32, 512);
  EXPECT_EQ(conv_batch_parts(g), (std::vector<BatchPart>{{0, 4}}));
  // Exactly at the limit still fits.
  EXPECT_EQ(conv_batch_parts(conv3x3(2, 1, 1, 4), 32), (std::vector<BatchPart>{{0, 2}}));
}

// great_net's widest layer at 512x512: 1024 channels, 2^28 elements per image. Batch 8 is
// 2^31 elements, which cuDNN refuses; it splits into two parts of 4.
TEST(BatchSplit, GreatNetBatch8SplitsInTwo) {
  const ConvGeom g = conv3x3(8, 512, 1024, 512);
  const auto parts = conv_batch_parts(g);
  EXPECT_EQ(parts, (std::vector<BatchPart>{{0, 4}, {4, 4}}));
  expect_valid(g, parts, kMaxTensorElements);
  // Batch 7 (7 x 2^28 elements) fits: one part.
  EXPECT_EQ(conv_batch_parts(conv3x3(7, 512, 1024, 512)).size(), 1u);
}

// The larger of input and output decides: here the input (c = 64) is 16x the output (k = 4).
TEST(BatchSplit, LargerSideDecides) {
  const ConvGeom g = conv3x3(10, 64, 4, 8);  // input 4096 per image, output 256
  const auto parts = conv_batch_parts(g, 3 * 4096);
  EXPECT_EQ(parts, (std::vector<BatchPart>{{0, 3}, {3, 3}, {6, 2}, {8, 2}}));
  expect_valid(g, parts, 3 * 4096);
  // Strided: the output shrinks, the input decides.
  ConvGeom s = conv3x3(5, 1, 1, 10);
  s.stride_h = s.stride_w = 2;
  EXPECT_EQ(conv_batch_parts(s, 250), (std::vector<BatchPart>{{0, 2}, {2, 2}, {4, 1}}));
}

TEST(BatchSplit, ManyShapesAreValid) {
  for (int64_t n = 1; n <= 40; ++n)
    for (int64_t limit : {1000, 1024, 3000, 4095, 100000}) {
      const ConvGeom g = conv3x3(n, 4, 6, 12);  // input 576, output 864 per image
      SCOPED_TRACE(::testing::Message() << "n " << n << " limit " << limit);
      const auto parts = conv_batch_parts(g, limit);
      expect_valid(g, parts, limit);
      const int64_t most = limit / 864;
      EXPECT_EQ(static_cast<int64_t>(parts.size()), (n + most - 1) / most) << "as few parts as possible";
    }
}

TEST(BatchSplit, OneImageOverTheLimitIsAnError) {
  try {
    conv_batch_parts(conv3x3(1, 3, 8, 100), 1000);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("80000 elements"), std::string::npos) << e.what();
  }
  ConvGeom empty = conv3x3(0, 1, 1, 4);
  EXPECT_THROW(conv_batch_parts(empty), Error);
}

}  // namespace
}  // namespace pb
