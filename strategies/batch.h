// How a batch is cut into pieces: dp/ddp chunks over workers, pipeline micro-batches. Always
// torch.chunk's rule, so the pieces match PyTorch's DataParallel and GPipe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pb {

// torch.chunk sizes: ceil(batch / n) each, the last shorter, possibly fewer chunks than n.
std::vector<int64_t> chunk_sizes(int64_t batch, int n);

// chunk_sizes of a batch over `workers`, with a warning on stderr when some workers get none, as
// they then sit idle.
std::vector<int64_t> split_batch(int64_t batch, int workers, const std::string& strategy);

std::vector<int64_t> chunk_offsets(const std::vector<int64_t>& sizes);  // start of each piece

// The hybrids' torch.chunk pieces of a batch, one per replica; UsageError naming the strategy
// when torch.chunk gives fewer pieces than replicas (every replica needs one).
std::vector<int64_t> replica_pieces(int64_t batch, int replicas, const std::string& strategy);

}  // namespace pb
