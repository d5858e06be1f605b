// Small convolutions run on the calling thread alone: with threads waiting passively
// (engine/openmp_wait.cpp) every team costs a wake-up per parallel region, which for a small
// net's layers is most of the step and ranks strategies by thread count, not by strategy.
#include <gtest/gtest.h>

#include <filesystem>
#include <thread>
#include <vector>

#include "engine/backend.h"
#ifdef PARBENCH_HAVE_DNNL
#include "engine/dnnl/dnnl_conv.h"
#endif

namespace pb {
namespace {

#ifdef PARBENCH_HAVE_DNNL
int threads_of_process() {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) n += e.is_directory();
  return n;
}

// Threads the process gained while a fresh thread (its own OpenMP pool: libgomp starts a team's
// threads at the first parallel region of its master) ran a conv's three passes at 2 threads.
int threads_started_by(const ConvGeom& g) {
  int started = -1;
  std::thread t([&] {
    DnnlConv conv(2, false);
    std::vector<float> x(g.n * g.c * g.h * g.w, 0.5f), w(g.k * g.c * g.r * g.s, 0.25f), b(g.k, 0.1f);
    std::vector<float> y(g.n * g.k * g.p() * g.q()), dx(x.size()), dw(w.size()), db(b.size());
    const int before = threads_of_process();
    conv.forward(g, x.data(), w.data(), b.data(), y.data());
    conv.backward_data(g, y.data(), w.data(), dx.data());
    conv.backward_weights(g, x.data(), y.data(), dw.data(), db.data(), false);
    started = threads_of_process() - before;
  });
  t.join();
  return started;
}

TEST(SmallOps, SmallConvolutionsWakeNoTeam) {
  // workloads/examples/mixed_stride_pad.json's first layer at batch 4: about 0.1 MFLOP.
  ConvGeom small{4, 3, 13, 10, 6, 5, 3, 2, 1, 2, 0};
  EXPECT_EQ(threads_started_by(small), 0);
  // A convolution worth splitting does start a team: the count above can see one.
  ConvGeom large{4, 32, 64, 64, 32, 3, 3, 1, 1, 1, 1};
  EXPECT_GT(threads_started_by(large), 0);
}
#else
TEST(SmallOps, SmallConvolutionsWakeNoTeam) { GTEST_SKIP() << "built without oneDNN"; }
#endif

}  // namespace
}  // namespace pb
