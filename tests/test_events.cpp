// Ordering between queues (Backend events) and what communicators time: the transfer, with the
// wait for peers booked apart. GPU checks skip without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include "engine/check.h"
#include "engine/comm.h"
#include "engine/tensor.h"
#include "strategies/pool.h"
#include "strategies/strategy.h"
#include "workloads/workload.h"

#ifdef PARBENCH_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace pb {
namespace {

std::vector<Device> backends_present() {
  std::vector<Device> d = {cpu()};
  if (cuda_device_count() > 0) d.push_back(cuda());
  return d;
}

TEST(Events, ElapsedBetweenRecordsOnCpuAndGpu) {
  for (const Device& d : backends_present()) {
    SCOPED_TRACE(d.str());
    auto be = make_backend(d);
    auto a = be->create_event(), b = be->create_event();
    be->record(*a);
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    be->record(*b);
    be->synchronize(*b);
    const double s = be->elapsed_s(*a, *b);
    EXPECT_GE(s, 0.025);
    EXPECT_LT(s, 5.0);
  }
}

#ifdef PARBENCH_HAVE_CUDA
// A copy on a side stream that waits for an event sees the compute queued before the event: a
// long ReLU over negative values, which the copy must find zeroed.
TEST(Events, GpuSideStreamWaitsForComputeBeforeTheEvent) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  auto be = make_backend(cuda());
  const int64_t n = int64_t(1) << 26;
  Tensor x = Tensor::from_host({n}, std::vector<float>(static_cast<std::size_t>(n), -1.0f), cuda());
  Tensor z = Tensor::from_host({n}, std::vector<float>(static_cast<std::size_t>(n), 7.0f), cuda());
  auto side = be->create_stream();
  auto ready = be->create_event(), copied = be->create_event();
  for (int k = 0; k < 8; ++k) be->relu_forward(n, x.data(), x.data());  // long enough to race
  be->record(*ready);
  be->wait(*ready, side.get());
  ASSERT_EQ(cudaMemcpyAsync(z.data(), x.data(), n * sizeof(float), cudaMemcpyDeviceToDevice,
                            static_cast<cudaStream_t>(side->native())),
            cudaSuccess);
  be->record(*copied, side.get());
  be->synchronize(*copied);
  const std::vector<float> got = z.to_host();
  EXPECT_EQ(std::count(got.begin(), got.end(), 0.0f), n);
}
#endif

// In-process: rank 1 receives from a rank 0 that sends 50 ms after rank 1 is there (counted from
// rank 1's arrival, not from the dispatch: a VM may start rank 1's thread milliseconds late). The
// wait is rank 1's wait_s; its transfer (a copy of 4 KiB) is far shorter.
TEST(CommTiming, InProcessBooksWaitingForAPeerApartFromTheCopy) {
  std::vector<std::unique_ptr<Backend>> bs;
  for (int r = 0; r < 2; ++r) bs.push_back(make_backend(cpu(r)));
  auto comm = make_communicator({bs[0].get(), bs[1].get()}, CommKind::InProcess);
  std::vector<float> buf(1024, 1.0f), got(1024, 0.0f);
  std::atomic<bool> arrived{false};
  WorkerPool pool(2);
  pool.run(2, [&](int r) {
    comm->reset_stats(r);
    if (r == 0) {
      while (!arrived.load()) std::this_thread::yield();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      comm->send(0, buf.data(), 1024, 1);
    } else {
      arrived.store(true);
      comm->recv(1, got.data(), 1024, 0);
    }
  }, [&] { comm->abort(); });
  EXPECT_EQ(got, buf);
  const CommStats& s = comm->stats(1);
  EXPECT_GE(s.wait_s, 0.045);
  EXPECT_LT(s.seconds, 0.02);
  EXPECT_EQ(s.calls, 1);
}

// Pipeline on one shared GPU (two stages, oversubscribed): before events the communicator
// synchronized the device inside its timer, booking the queued compute as communication.
TEST(CommTiming, PipelineOnOneSharedGpuCommunicatesFarLessThanItComputes) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  StrategyOptions o;
  o.devices = 2;
  o.kind = DeviceKind::Cuda;
  o.oversubscribe = true;
  o.micro_batches = 4;
  const NetSpec net = great_net(128, 0.5);
  const NetPlan plan = plan_net(net);
  const int64_t batch = 8;
  const std::vector<float> x = synthetic_values(batch * numel_of(plan.input), 1);
  const std::vector<float> t = synthetic_values(batch * numel_of(plan.output), 2);
  auto s = make_strategy("pipeline", o);
  s->setup(plan, init_params(plan, 0), net.adam);
  s->load_batch(x, t, batch);
  for (int k = 0; k < 3; ++k) s->step();  // warm-up: algorithm choice, allocations
  double worst_share = 0;
  for (int k = 0; k < 5; ++k) {
    const auto t0 = std::chrono::steady_clock::now();
    s->step();
    const double iter = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    double comm = 0;
    for (const WorkerStats& w : s->stats().workers) comm = std::max(comm, w.comm_s);
    worst_share = std::max(worst_share, comm / iter);
  }
  EXPECT_LT(worst_share, 0.25) << "communication share of the iteration time";
}

}  // namespace
}  // namespace pb
