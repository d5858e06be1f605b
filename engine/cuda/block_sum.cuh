// A block's sum in a fixed order (a shuffle tree in each warp, then the warps' sums in one), for
// the reductions whose results must not depend on timing (MSE loss, bias gradients).
#pragma once

namespace pb::cu {

// Sum of `v` over the block, valid in thread 0. blockDim.x must be kThreads; every thread calls it.
template <int kThreads, class Acc>
__device__ Acc block_sum(Acc v) {
  __shared__ Acc warp_sums[kThreads / 32];
  for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  v = threadIdx.x < kThreads / 32 ? warp_sums[threadIdx.x] : Acc(0);
  if (warp == 0)
    for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
  __syncthreads();  // warp_sums may be reused by a following call
  return v;
}

}  // namespace pb::cu
