// The communicator's typed entry points: fp32 and bf16 buffers, and fp32 buffers sent as bf16
// (the wire dtype of --reduce-dtype and --param-dtype, docs/bf16.md).
#include "engine/check.h"
#include "engine/comm.h"

#include <algorithm>

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

// The next slot, holding x's n values rounded to bf16 (queued on the rank's compute queue).
Bf16* Communicator::rounded(int rank, const float* x, int64_t n) {
  Bf16* s = staging(rank, n);
  backend(rank).to_bf16(n, x, s);
  return s;
}

void Communicator::all_reduce(int rank, float* buf, int64_t n, DType wire) {
  all_reduce_start(rank, buf, n, wire);
  wait(rank);
}

void Communicator::all_reduce_start(int rank, float* buf, int64_t n, DType wire) {
  if (wire == DType::F32) return all_reduce_typed(rank, buf, n, DType::F32);
  Bf16* s = rounded(rank, buf, n);
  all_reduce_typed(rank, s, n, DType::Bf16);
  widen_[rank].push_back({s, buf, n});
}

// The blocking calls below give their slots back on return: the next use of a slot is queued
// after the widening that reads it, on the same compute queue.
void Communicator::reduce(int rank, float* buf, int64_t n, int root, DType wire) {
  if (wire == DType::F32) return reduce_typed(rank, buf, n, root, DType::F32);
  const int held = staged_[rank];
  Bf16* s = rounded(rank, buf, n);
  reduce_typed(rank, s, n, root, DType::Bf16);
  if (rank == root) backend(rank).from_bf16(n, s, buf);  // the others keep their fp32 values
  staged_[rank] = held;
}

void Communicator::all_gather(int rank, const float* send, float* recv, int64_t n, DType wire) {
  if (wire == DType::F32) return all_gather_typed(rank, send, recv, n, DType::F32, false);
  const int held = staged_[rank];
  Bf16* in = rounded(rank, send, n);
  Bf16* out = staging(rank, n * size());
  all_gather_typed(rank, in, out, n, DType::Bf16, false);
  backend(rank).from_bf16(n * size(), out, recv);
  staged_[rank] = held;
}

void Communicator::all_gather_start(int rank, const float* send, float* recv, int64_t n, DType wire) {
  if (wire == DType::F32) return all_gather_typed(rank, send, recv, n, DType::F32, true);
  Bf16* in = rounded(rank, send, n);
  Bf16* out = staging(rank, n * size());
  all_gather_typed(rank, in, out, n, DType::Bf16, true);
  widen_[rank].push_back({out, recv, n * size()});
}

void Communicator::all_gather(int rank, const float* send, Bf16* recv, int64_t n) {
  const int held = staged_[rank];
  all_gather_typed(rank, rounded(rank, send, n), recv, n, DType::Bf16, false);
  staged_[rank] = held;
}

void Communicator::all_gather_start(int rank, const float* send, Bf16* recv, int64_t n) {
  all_gather_typed(rank, rounded(rank, send, n), recv, n, DType::Bf16, true);  // its slot held until wait()
}

void Communicator::reduce_scatter(int rank, const float* send, float* recv, int64_t n, DType wire) {
  if (wire == DType::F32) return reduce_scatter_typed(rank, send, recv, n, DType::F32);
  const int held = staged_[rank];
  Bf16* in = rounded(rank, send, n * size());
  Bf16* out = staging(rank, n);
  reduce_scatter_typed(rank, in, out, n, DType::Bf16);
  backend(rank).from_bf16(n, out, recv);
  staged_[rank] = held;
}

int WireSlots::take(int64_t n) {
  std::size_t k = 0;
  while (k < busy_.size() && busy_[k]) ++k;
  if (k == busy_.size()) sizes_.push_back(0), busy_.push_back(0);
  sizes_[k] = std::max(sizes_[k], n);
  busy_[k] = 1;
  return static_cast<int>(k);
}

void WireSlots::reserve(const std::vector<int64_t>& sizes) {
  for (char b : busy_) PB_CHECK(!b, "bf16 staging reserved while a transfer holds a slot");
  if (sizes_.size() < sizes.size()) sizes_.resize(sizes.size(), 0), busy_.resize(sizes.size(), 0);
  for (std::size_t k = 0; k < sizes.size(); ++k) sizes_[k] = std::max(sizes_[k], sizes[k]);
}

void Communicator::reserve_transfer_staging(int rank, const std::vector<int64_t>& values) {
  PB_CHECK(0 <= rank && rank < size() && is_local(rank), "rank {} of {} is not local", rank, size());
  p2p_slots_[rank].reserve(values);
  for (std::size_t k = 0; k < values.size(); ++k) p2p_slot(rank, static_cast<int>(k));
}

int64_t WireSlots::total() const {
  int64_t t = 0;
  for (int64_t n : sizes_) t += n;
  return t;
}

// Slot k of the rank's p2p staging, as large as WireSlots made it (null while it holds nothing).
Bf16* Communicator::p2p_slot(int rank, int k) {
  const int64_t n = p2p_slots_[rank].sizes().at(k);
  std::vector<Tensor>& slots = p2p_staging_[rank];
  if (static_cast<int>(slots.size()) <= k) slots.resize(k + 1);
  if (n == 0) return nullptr;
  if (slots[k].numel() < n) {
    slots[k] = Tensor();  // released before the larger one is taken
    slots[k] = Tensor::empty({n}, device(rank), DType::Bf16);
  }
  return slots[k].data_bf16();
}

namespace {
// Before a bf16 transfer touches the rank's backend and staging.
void local_rank(const Communicator& c, int rank, int64_t n, const char* what) {
  PB_CHECK(0 <= rank && rank < c.size() && c.is_local(rank) && n >= 0, "{} of {} values at rank {} of {}", what, n, rank,
           c.size());
}
}  // namespace

// The fp32 values are bf16 ones (docs/bf16.md), so a pipeline's receiver gets the same bits.
void Communicator::send(int rank, const float* buf, int64_t n, int peer, DType wire) {
  if (wire == DType::F32) return send_typed(rank, buf, n, peer, wire);
  local_rank(*this, rank, n, "send");
  const int k = p2p_slots_[rank].take(n);
  Bf16* s = p2p_slot(rank, k);
  if (n > 0) backend(rank).to_bf16(n, buf, s);
  send_typed(rank, s, n, peer, wire);
  p2p_slots_[rank].give(k);
}

void Communicator::recv(int rank, float* buf, int64_t n, int peer, DType wire) {
  if (wire == DType::F32) return recv_typed(rank, buf, n, peer, wire);
  local_rank(*this, rank, n, "recv");
  const int k = p2p_slots_[rank].take(n);
  Bf16* s = p2p_slot(rank, k);
  recv_typed(rank, s, n, peer, wire);
  if (n > 0) backend(rank).from_bf16(n, s, buf);
  p2p_slots_[rank].give(k);
}

// A started transfer's slot stays taken until its wait_transfer.
int64_t Communicator::send_start(int rank, const float* buf, int64_t n, int peer, DType wire) {
  if (wire == DType::F32) return transfer_start(rank, true, const_cast<float*>(buf), n, peer, wire);
  local_rank(*this, rank, n, "send");
  const int k = p2p_slots_[rank].take(n);
  Bf16* s = p2p_slot(rank, k);
  if (n > 0) backend(rank).to_bf16(n, buf, s);
  const int64_t id = transfer_start(rank, true, s, n, peer, wire);
  p2p_staged_[rank].push_back({id, {k, nullptr, n}});
  return id;
}

int64_t Communicator::recv_start(int rank, float* buf, int64_t n, int peer, DType wire) {
  if (wire == DType::F32) return transfer_start(rank, false, buf, n, peer, wire);
  local_rank(*this, rank, n, "recv");
  const int k = p2p_slots_[rank].take(n);
  const int64_t id = transfer_start(rank, false, p2p_slot(rank, k), n, peer, wire);
  p2p_staged_[rank].push_back({id, {k, buf, n}});
  return id;
}

void Communicator::staged_done(int rank, int64_t id) {
  auto& held = p2p_staged_[rank];  // erasing keeps its capacity: a step after the first allocates nothing
  const auto it = std::find_if(held.begin(), held.end(), [id](const auto& e) { return e.first == id; });
  if (it == held.end()) return;  // an fp32 transfer
  const Staged st = it->second;
  held.erase(it);
  if (st.to && st.n > 0) backend(rank).from_bf16(st.n, p2p_slot(rank, st.slot), st.to);
  p2p_slots_[rank].give(st.slot);
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
