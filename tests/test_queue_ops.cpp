// The backends' queued data movement (fill, copy_2d, copy) against plain host loops: on the CPU
// here, and on a GPU (compute queue and a side stream) where there is one.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "engine/backend.h"
#include "engine/tensor.h"
#include "tests/gpu_skip.h"

namespace pb {
namespace {

struct Case {
  int64_t rows = 5, width = 3, src_pitch = 7, dst_pitch = 4;
};

std::vector<float> ramp(int64_t n) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(i) + 0.5f;
  return v;
}

// dst starts as `before`; rows x width from src into it, by the definition.
std::vector<float> strided_reference(const Case& c, const std::vector<float>& src, std::vector<float> dst) {
  for (int64_t r = 0; r < c.rows; ++r)
    for (int64_t i = 0; i < c.width; ++i) dst[r * c.dst_pitch + i] = src[r * c.src_pitch + i];
  return dst;
}

// fill, then copy_2d over it, then copy out to the host on `side` (null: the compute queue).
std::vector<float> run(Backend& be, const Case& c, float value, Stream* side) {
  const Device d = be.device();
  const std::vector<float> src_h = ramp(c.rows * c.src_pitch);
  Tensor src = Tensor::from_host({c.rows * c.src_pitch}, src_h, d), dst = Tensor::empty({c.rows * c.dst_pitch}, d);
  be.fill(dst.data(), dst.numel(), value);
  be.copy_2d(dst.data(), c.dst_pitch, src.data(), c.src_pitch, c.width, c.rows);
  std::vector<float> out(static_cast<std::size_t>(dst.numel()), -1.0f);
  if (side) {
    // The side stream is ordered after nothing by itself: wait for the compute queue's work.
    auto done = be.create_event();
    be.record(*done);
    be.wait(*done, side);
    be.copy(cpu(), out.data(), d, dst.data(), dst.bytes(), side);
    be.synchronize(*side);
  } else {
    be.copy(cpu(), out.data(), d, dst.data(), dst.bytes());
    be.synchronize();
  }
  return out;
}

void expect_filled_and_copied(Backend& be, Stream* side) {
  const Case c;
  for (float value : {0.0f, -2.25f}) {
    SCOPED_TRACE(value);
    const std::vector<float> before(static_cast<std::size_t>(c.rows * c.dst_pitch), value);
    EXPECT_EQ(run(be, c, value, side), strided_reference(c, ramp(c.rows * c.src_pitch), before));
  }
}

TEST(QueueOps, CpuFillStridedCopyAndCopyFollowTheDefinition) {
  auto be = make_backend(cpu(0));
  expect_filled_and_copied(*be, nullptr);
  auto side = be->create_stream();
  expect_filled_and_copied(*be, side.get());
}

TEST(QueueOps, GpuFillStridedCopyAndCopyFollowTheDefinition) {
  PB_REQUIRE_GPU();
  auto be = make_backend(cuda(0));
  expect_filled_and_copied(*be, nullptr);
  auto side = be->create_stream();
  expect_filled_and_copied(*be, side.get());
  // Zeros queued on the compute stream, read back on the host's clock.
  Tensor z = Tensor::zeros({1000}, *be);
  be->synchronize();
  EXPECT_EQ(z.to_host(), std::vector<float>(1000, 0.0f));
}

}  // namespace
}  // namespace pb
