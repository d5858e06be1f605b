#include "engine/batch_split.h"

#include <algorithm>

#include "engine/check.h"

namespace pb {

std::vector<BatchPart> conv_batch_parts(const ConvGeom& g, int64_t max_elements) {
  PB_CHECK(g.n >= 1, "convolution batch must be at least 1, got {}", g.n);
  PB_CHECK(max_elements >= 1, "max_elements must be at least 1, got {}", max_elements);
  const int64_t per_image = std::max(g.c * g.h * g.w, g.k * g.p() * g.q());
  if (per_image > max_elements)
    throw Error(fmt::format("convolution x[{},{},{},{}] -> [{},{},{},{}]: one image has {} elements, more than the "
                            "{} one cuDNN tensor may hold",
                            g.n, g.c, g.h, g.w, g.n, g.k, g.p(), g.q(), per_image, max_elements));
  const int64_t most = max_elements / per_image;  // images per part
  const int64_t parts = (g.n + most - 1) / most;
  std::vector<BatchPart> out;
  out.reserve(static_cast<std::size_t>(parts));
  int64_t offset = 0;
  for (int64_t i = 0; i < parts; ++i) {
    const int64_t n = g.n / parts + (i < g.n % parts ? 1 : 0);
    out.push_back({offset, n});
    offset += n;
  }
  return out;
}

}  // namespace pb
