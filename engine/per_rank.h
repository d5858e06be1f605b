// Per-rank state that each rank's own thread updates.
#pragma once

#include <cstddef>
#include <vector>

namespace pb {

// One T per rank, each on cache lines of its own. Ranks on different cores that update their own
// entries of a plain vector pass the lines they share back and forth at every update (false
// sharing): on a 2-vCPU VM that made a microsecond step of two in-process workers 2-3x slower
// than with both threads on one core.
template <class T>
class PerRank {
 public:
  PerRank() = default;
  explicit PerRank(std::size_t n, const T& init = T()) : slots_(n, Slot{init}) {}
  T& operator[](std::size_t i) { return slots_[i].value; }
  const T& operator[](std::size_t i) const { return slots_[i].value; }
  T& at(std::size_t i) { return slots_.at(i).value; }
  const T& at(std::size_t i) const { return slots_.at(i).value; }
  std::size_t size() const { return slots_.size(); }

 private:
  struct alignas(64) Slot {
    T value;
  };
  std::vector<Slot> slots_;
};

}  // namespace pb
