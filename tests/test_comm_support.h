// What the communicator tests share (tests/test_comm_*.cpp): ranks on devices, each with its own
// backend and thread, the values they contribute, and the loop over 1-4 in-process ranks.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "engine/check.h"
#include "engine/comm.h"
#include "engine/tensor.h"
#include "strategies/pool.h"

namespace pb::comm_test {

using ::testing::HasSubstr;

// Ranks on the given devices, each with its own backend and thread.
struct Group {
  explicit Group(const std::vector<Device>& devs, CommKind kind = CommKind::InProcess) {
    BackendOptions bo;
    bo.threads = 1;
    for (const Device& d : devs) backends.push_back(make_backend(d, bo));
    std::vector<Backend*> raw;
    for (auto& b : backends) raw.push_back(b.get());
    comm = make_communicator(raw, kind);
  }
  // fn(rank) on one thread per rank; the first failure is rethrown after all joined.
  void run(const std::function<void(int)>& fn) {
    WorkerPool pool(comm->size());
    pool.run(comm->size(), fn, [&] { comm->abort(); });
  }
  std::vector<std::unique_ptr<Backend>> backends;
  std::unique_ptr<Communicator> comm;
};

inline std::vector<Device> cpus(int n) {
  std::vector<Device> d;
  for (int i = 0; i < n; ++i) d.push_back(cpu(i));
  return d;
}

inline float value(int rank, int64_t i) { return static_cast<float>((rank + 1) * (i % 7) + rank); }
inline float sum_over_ranks(int n, int64_t i) {
  float s = 0;
  for (int r = 0; r < n; ++r) s += value(r, i);
  return s;
}
inline std::vector<float> rank_values(int rank, int64_t n) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = value(rank, i);
  return v;
}

// Runs `body` for 1..4 in-process ranks on CPU, plus the automatic (no-op) communicator for 1.
inline void for_each_group(const std::function<void(Group&)>& body) {
  for (int n = 1; n <= 4; ++n) {
    SCOPED_TRACE(fmt::format("{} ranks", n));
    Group g(cpus(n));
    body(g);
  }
  SCOPED_TRACE("1 rank, no-op communicator");
  Group solo(cpus(1), CommKind::Auto);
  EXPECT_EQ(solo.comm->name(), "none");
  body(solo);
}

}  // namespace pb::comm_test
