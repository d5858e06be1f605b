// The communicator's typed entry points: fp32 and bf16 buffers, and fp32 buffers sent as bf16
// (the wire dtype of --reduce-dtype and --param-dtype, docs/bf16.md).
#include "engine/check.h"
#include "engine/comm.h"

namespace pb {

// Slots grow and stay: after the first step a step allocates nothing (the SteadyAlloc tests).
Bf16* Communicator::staging(int rank, int64_t n) {
  std::vector<Tensor>& slots = staging_.at(rank);
  const int k = staged_[rank]++;
  if (static_cast<int>(slots.size()) <= k) slots.resize(k + 1);
  if (slots[k].numel() < n) {
    slots[k] = Tensor();  // released before the larger one is taken
    slots[k] = Tensor::empty({n}, device(rank), DType::Bf16);
  }
  return slots[k].data_bf16();
}

void Communicator::all_reduce(int rank, float* buf, int64_t n, DType wire) {
  all_reduce_start(rank, buf, n, wire);
  wait(rank);
}

void Communicator::all_reduce_start(int rank, float* buf, int64_t n, DType wire) {
  if (wire == DType::F32) return all_reduce_typed(rank, buf, n, DType::F32);
  Bf16* s = staging(rank, n);
  backend(rank).to_bf16(n, buf, s);
  all_reduce_typed(rank, s, n, DType::Bf16);
  widen_[rank].push_back({s, buf, n});
}

// The blocking calls below give their slots back on return: the next use of a slot is queued
// after the widening that reads it, on the same compute queue.
void Communicator::reduce(int rank, float* buf, int64_t n, int root, DType wire) {
  if (wire == DType::F32) return reduce_typed(rank, buf, n, root, DType::F32);
  const int held = staged_[rank];
  Bf16* s = staging(rank, n);
  backend(rank).to_bf16(n, buf, s);
  reduce_typed(rank, s, n, root, DType::Bf16);
  if (rank == root) backend(rank).from_bf16(n, s, buf);  // the others keep their fp32 values
  staged_[rank] = held;
}

void Communicator::all_gather(int rank, const float* send, float* recv, int64_t n, DType wire) {
  if (wire == DType::F32) return all_gather_typed(rank, send, recv, n, DType::F32, false);
  const int held = staged_[rank];
  Bf16* in = staging(rank, n);
  Bf16* out = staging(rank, n * size());
  backend(rank).to_bf16(n, send, in);
  all_gather_typed(rank, in, out, n, DType::Bf16, false);
  backend(rank).from_bf16(n * size(), out, recv);
  staged_[rank] = held;
}

void Communicator::all_gather_start(int rank, const float* send, float* recv, int64_t n, DType wire) {
  if (wire == DType::F32) return all_gather_typed(rank, send, recv, n, DType::F32, true);
  Bf16* in = staging(rank, n);
  Bf16* out = staging(rank, n * size());
  backend(rank).to_bf16(n, send, in);
  all_gather_typed(rank, in, out, n, DType::Bf16, true);
  widen_[rank].push_back({out, recv, n * size()});
}

void Communicator::all_gather(int rank, const float* send, Bf16* recv, int64_t n) {
  const int held = staged_[rank];
  Bf16* in = staging(rank, n);
  backend(rank).to_bf16(n, send, in);
  all_gather_typed(rank, in, recv, n, DType::Bf16, false);
  staged_[rank] = held;
}

void Communicator::all_gather_start(int rank, const float* send, Bf16* recv, int64_t n) {
  Bf16* in = staging(rank, n);  // held until wait()
  backend(rank).to_bf16(n, send, in);
  all_gather_typed(rank, in, recv, n, DType::Bf16, true);
}

void Communicator::reduce_scatter(int rank, const float* send, float* recv, int64_t n, DType wire) {
  if (wire == DType::F32) return reduce_scatter_typed(rank, send, recv, n, DType::F32);
  const int held = staged_[rank];
  Bf16* in = staging(rank, n * size());
  Bf16* out = staging(rank, n);
  backend(rank).to_bf16(n * size(), send, in);
  reduce_scatter_typed(rank, in, out, n, DType::Bf16);
  backend(rank).from_bf16(n, out, recv);
  staged_[rank] = held;
}

void Communicator::all_reduce(int rank, Bf16* buf, int64_t n) {
  all_reduce_typed(rank, buf, n, DType::Bf16);
  wait(rank);
}
void Communicator::all_reduce_start(int rank, Bf16* buf, int64_t n) { all_reduce_typed(rank, buf, n, DType::Bf16); }
void Communicator::reduce(int rank, Bf16* buf, int64_t n, int root) { reduce_typed(rank, buf, n, root, DType::Bf16); }
void Communicator::all_gather(int rank, const Bf16* send, Bf16* recv, int64_t n) {
  all_gather_typed(rank, send, recv, n, DType::Bf16, false);
}
void Communicator::all_gather_start(int rank, const Bf16* send, Bf16* recv, int64_t n) {
  all_gather_typed(rank, send, recv, n, DType::Bf16, true);
}
void Communicator::reduce_scatter(int rank, const Bf16* send, Bf16* recv, int64_t n) {
  reduce_scatter_typed(rank, send, recv, n, DType::Bf16);
}

}  // namespace pb
