#include "strategies/batch.h"

#include <algorithm>
#include <cstdio>

#include <fmt/ranges.h>

#include "engine/check.h"

namespace pb {

std::vector<int64_t> chunk_sizes(int64_t batch, int n) {
  std::vector<int64_t> out;
  if (batch <= 0 || n <= 0) return out;
  const int64_t chunk = (batch + n - 1) / n;
  for (int64_t start = 0; start < batch; start += chunk) out.push_back(std::min(chunk, batch - start));
  return out;
}

std::vector<int64_t> split_batch(int64_t batch, int workers, const std::string& strategy) {
  PB_CHECK(batch >= 1, "batch of {}", batch);
  std::vector<int64_t> sizes = chunk_sizes(batch, workers);
  if (static_cast<int>(sizes.size()) < workers)
    fmt::print(stderr, "parbench: warning: {}: a batch of {} over {} workers gives {} chunk(s) ({}); {} worker(s) sit idle\n",
               strategy, batch, workers, sizes.size(), fmt::join(sizes, ","), workers - static_cast<int>(sizes.size()));
  return sizes;
}

std::vector<int64_t> replica_pieces(int64_t batch, int replicas, const std::string& strategy) {
  std::vector<int64_t> pieces = chunk_sizes(batch, replicas);
  if (static_cast<int>(pieces.size()) < replicas)
    throw UsageError(fmt::format("{}: torch.chunk cuts the batch of {} into {} piece(s) for {} replicas; every "
                                 "replica needs one (a batch that is a multiple of {} works)", strategy, batch,
                                 pieces.size(), replicas, replicas));
  return pieces;
}

std::vector<int64_t> chunk_offsets(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> out;
  int64_t at = 0;
  for (int64_t s : sizes) {
    out.push_back(at);
    at += s;
  }
  return out;
}

}  // namespace pb
