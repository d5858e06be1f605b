// What a run notices of its machine: other busy processes, and the CUDA module loaded only when a
// GPU is used or asked about.
#include "tests/test_harness_support.h"

namespace pb {
namespace {

using namespace pb::harness_test;

// The CUDA module (cuDNN, cuBLAS, NCCL) is opened only when a GPU is used or asked about: the
// dynamic loader's own log (LD_DEBUG=files) of a CPU run must not name it.
// Other processes busy on the cores during a run: it says so, naming the share they took.
TEST_F(Harness, RunBesideBusyProcessesWarns) {
  // A quarter of the cores spinning (at least one): a quarter to a half of the machine's time.
  const unsigned n = std::max(1u, (std::thread::hardware_concurrency() + 3) / 4);
  std::vector<pid_t> spinners;
  for (unsigned i = 0; i < n; ++i) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0) << "fork";
    if (pid == 0) {
      ::execl("/bin/sh", "sh", "-c", "while :; do :; done", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    spinners.push_back(pid);
  }
  const Result r = parbench("run --workload great_net --image 16 --strategies regular --devices 1 --batch 4 --iterations 20 "
                            "--warmup 1 --out " + path("run"));
  for (const pid_t pid : spinners) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("warning: other processes used")) << r.err;
  EXPECT_THAT(r.err, HasSubstr("of this machine's CPU time during the run")) << r.err;
}

TEST_F(Harness, CpuRunsDoNotLoadTheCudaModule) {
  std::vector<std::string> kinds = {"cpu"};
  if (cuda_device_count() == 0) kinds.push_back("auto");  // no GPU: auto is a CPU run too
  for (const std::string& kind : kinds) {
    SCOPED_TRACE("--device-kind " + kind);
    Result r = parbench("train --workload linear --iterations 2 --warmup 1 --device-kind " + kind, "LD_DEBUG=files");
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    ASSERT_THAT(r.err, HasSubstr("needed by")) << "no loader log: LD_DEBUG had no effect";
    EXPECT_THAT(r.err, Not(HasSubstr("libparbench_cuda"))) << r.err;
    EXPECT_THAT(r.err, Not(HasSubstr("libcudnn"))) << r.err;
  }
}

TEST_F(Harness, DevicesNamesTheCudaModuleOrWhyItIsMissingWithOrWithoutGpu) {
#ifdef PARBENCH_HAVE_CUDA
  Result r = parbench("devices");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("libparbench_cuda.so"));
  EXPECT_THAT(r.out, HasSubstr("cuDNN 9."));
  r = parbench("devices", "PARBENCH_CUDA_MODULE=/nonexistent/libparbench_cuda.so");
  if (cuda_device_count() == 0) {
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    EXPECT_THAT(r.out, HasSubstr("could not be loaded"));
  } else {
    EXPECT_EQ(r.code, 1) << r.out << r.err;  // GPUs but no usable backend: an error, not a CPU run
    EXPECT_THAT(r.err, HasSubstr("could not be loaded"));
  }
  EXPECT_THAT(r.out + r.err, HasSubstr("/nonexistent/libparbench_cuda.so"));
#else
  Result r = parbench("devices");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("cuda: not built"));
#endif
}

}  // namespace
}  // namespace pb
