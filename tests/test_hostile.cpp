// Hostile input, concurrent runs and failing resources: every case ends in a clear error with the
// documented exit code, nothing crashes, nothing is clobbered, nothing is half-written.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <thread>

#include "tests/cli_fixture.h"
#include "engine/check.h"
#include "engine/device.h"
#include "engine/fsutil.h"
#include "engine/json_input.h"
#include "engine/memory_estimate.h"
#include "engine/npy.h"
#include "reports/gbjson.h"
#include "workloads/workload.h"
#include "tests/paths.h"

namespace pb {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

using test::Result;
using test::slurp;

class Hostile : public test::CliTest {
 protected:
  Hostile() : CliTest("parbench_hostile_") {}
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path(name)) << text;
    return path(name);
  }
  std::string npy(const std::string& name, const Shape& shape, const std::vector<float>& v) const {
    write_npy(path(name), shape, v.data());
    return path(name);
  }
};

// --- 1. outputs never replace a device, FIFO or symlink ------------------------------------------

TEST_F(Hostile, WritesThroughAFifoInsteadOfReplacingIt) {
  const std::string fifo = path("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  std::string got;
  std::thread reader([&] { got = slurp(fifo); });
  write_file_atomic(fifo, "through the pipe");
  reader.join();
  EXPECT_EQ(got, "through the pipe");
  struct stat st {};
  ASSERT_EQ(::lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode)) << "the FIFO was replaced by a regular file";
}

TEST_F(Hostile, ReplacesASymlinksTargetAndKeepsTheLink) {
  const std::string target = write("target.md", "old");
  const std::string link = path("link.md");
  fs::create_symlink(target, link);
  write_file_atomic(link, "new");
  EXPECT_TRUE(fs::is_symlink(link)) << "the symlink was replaced by a regular file";
  EXPECT_EQ(slurp(target), "new");
}

TEST_F(Hostile, AFullDeviceIsAnErrorAndStaysADevice) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  try {
    write_file_atomic("/dev/full", "x");
    ADD_FAILURE() << "writing /dev/full succeeded";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("cannot write /dev/full"));
  }
  EXPECT_TRUE(fs::is_character_file("/dev/full"));
}

TEST_F(Hostile, CompareOutToASymlinkKeepsTheLink) {
  const std::string md = write("real.md", "old");
  const std::string link = path("summary.md");
  fs::create_symlink(md, link);
  const std::string run = (test::source_dir() / "tests/fixtures/linear/expected.json").string();
  // Any Google Benchmark JSON will do; write a minimal one.
  const std::string gb = write("a.json", R"({"context": {}, "benchmarks": [
    {"name": "x/regular/devices:1/batch:1", "run_type": "iteration", "real_time": 1.0, "time_unit": "ms",
     "iterations": 1}]})");
  (void)run;
  const Result r = parbench("compare " + gb + " " + gb + " --out " + link);
  EXPECT_EQ(r.code, 3) << r.err;  // one repetition: inconclusive, and the summary written
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_THAT(slurp(md), HasSubstr("x/regular"));
}

// --- 2. an empty batch -----------------------------------------------------------------------------

TEST_F(Hostile, ReplayWithAnEmptyBatchIsBadInputNamingTheFile) {
  const std::string x = npy("x.npy", {0, 5}, {}), t = npy("t.npy", {0, 2}, {});
  for (const char* strategy : {"regular", "dp", "ddp"}) {
    const std::string devices = std::string(strategy) == "regular" ? "1" : "2";
    const Result r = parbench(std::string("replay --workload linear --device-kind cpu --strategy ") + strategy +
                              " --devices " + devices + " --input " + x + " --target " + t + " --out " + path("out"));
    EXPECT_EQ(r.code, 2) << strategy << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr(x + ": shape (0, 5): the batch is empty")) << strategy;
    EXPECT_FALSE(fs::exists(path("out"))) << strategy;
  }
}

// --- 3. one writer per run folder ----------------------------------------------------------------

TEST_F(Hostile, ASecondWriterOfARunFolderIsRefused) {
  const std::string run = path("run");
  DirLock first(run);
  EXPECT_THROW(DirLock second(run), UsageError);
  const Result r = parbench("run --workload linear --strategies regular --devices 1 --iterations 2 --warmup 0 "
                            "--device-kind cpu --out " + run);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr(run + " is being written by another parbench process"));
  EXPECT_FALSE(fs::exists(run + "/results.json"));
}

TEST_F(Hostile, ALockedFolderThatStaysEmptyIsRemovedButAnExistingOneIsKept) {
  { DirLock lock(path("fresh")); }
  EXPECT_FALSE(fs::exists(path("fresh")));
  fs::create_directories(path("old"));
  { DirLock lock(path("old")); }
  EXPECT_TRUE(fs::exists(path("old")));
}

// --- 5. nesting depth, duplicate keys ------------------------------------------------------------

std::string nested(int depth) { return std::string(depth, '[') + "1" + std::string(depth, ']'); }

TEST_F(Hostile, DeeplyNestedJsonIsRefusedWithoutOverflowingTheStack) {
  const std::string net = R"({"input": [5], "layers": [{"type": "linear", "out_features": 2}], "lr": )" +
                          nested(100000) + "}";
  try {
    parse_net_json(net, "deep.json");
    ADD_FAILURE() << "no error";
  } catch (const UsageError& e) {
    EXPECT_THAT(e.what(), HasSubstr("deep.json: malformed JSON: nested deeper than 64 levels"));
  }
  try {
    reports::parse_run_json(R"({"benchmarks": )" + nested(100000) + "}", "deep_gb.json");
    ADD_FAILURE() << "no error";
  } catch (const UsageError& e) {
    EXPECT_THAT(e.what(), HasSubstr("deep_gb.json: malformed JSON: nested deeper than 64 levels"));
  }
  // 64 levels are fine.
  EXPECT_NO_THROW(parse_json_input(nested(63), "ok.json"));
}

TEST_F(Hostile, DuplicateKeysAreRefused) {
  try {
    parse_net_json(R"({"input": [5], "layers": [{"type": "linear", "out_features": 2, "out_features": 3}]})",
                   "dup.json");
    ADD_FAILURE() << "no error";
  } catch (const UsageError& e) {
    EXPECT_THAT(e.what(), HasSubstr("dup.json: malformed JSON: key \"out_features\" appears twice"));
  }
  // The same key in two different objects is not a duplicate.
  EXPECT_NO_THROW(parse_json_input(R"({"a": {"k": 1}, "b": {"k": 2}})", "ok.json"));
}

// --- 6. memory estimated before allocating -------------------------------------------------------

TEST_F(Hostile, OversizedNetsAreRefusedWithTheNumbersBeforeAllocating) {
  const std::string wide = write("wide.json", R"({"input": [3, 8, 8], "layers": [
      {"type": "conv2d", "out_channels": 1000000000, "kernel_size": 3}], "target": "random"})");
  Result r = parbench("train --workload " + wide + " --device-kind cpu --iterations 1 --warmup 0");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("needs at least"));
  EXPECT_THAT(r.err, HasSubstr("device has"));
  EXPECT_THAT(r.err, HasSubstr(wide));

  const std::string big = write("big.json", R"({"input": [3, 100000, 100000], "layers": [{"type": "relu"}]})");
  r = parbench("train --workload " + big + " --device-kind cpu --iterations 1 --warmup 0");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("needs at least"));
  EXPECT_THAT(r.err, HasSubstr("layer 0 (relu), output (3, 100000, 100000)"));

  r = parbench("train --workload great_net --width 1e9 --device-kind cpu --iterations 1 --warmup 0");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--width"));

  r = parbench("replay --workload linear --device-kind cpu --memory-limit 1e-9 --out " + path("out"));
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--memory-limit"));
  EXPECT_FALSE(fs::exists(path("out")));
}

TEST_F(Hostile, EstimateCountsParametersMomentsAndActivations) {
  NetSpec net = linear_net();  // Linear(5, 2): 12 parameters
  const MemoryEstimate m = estimate_memory(plan_net(net), 10);
  EXPECT_EQ(m.params, 12 * 4);
  EXPECT_EQ(m.grads_and_moments, 3 * 12 * 4);
  EXPECT_EQ(m.activations, 10 * (5 + 2) * 4);  // input and output of each sample
}

#if !defined(__SANITIZE_ADDRESS__)
TEST_F(Hostile, CpuOutOfMemorySaysHowMuchWasFree) {
  try {
    allocator_for(Device{DeviceKind::Cpu, 0}).allocate(std::size_t{1} << 60);
    ADD_FAILURE() << "2^60 bytes allocated";
  } catch (const OutOfMemory& e) {
    EXPECT_GT(e.free_bytes, 0u);
    EXPECT_THAT(e.what(), Not(HasSubstr(" 0 bytes free")));
  }
}
#endif

// --- 7. non-finite and invalid values ------------------------------------------------------------

TEST_F(Hostile, NonFiniteOrInvalidHyperparametersAreBadInput) {
  const std::string out = " --out " + path("out");
  for (const char* lr : {"inf", "nan", "1e308", "-1", "0"}) {
    const Result r = parbench(std::string("replay --workload linear --device-kind cpu --steps 2 --lr ") + lr + out);
    EXPECT_EQ(r.code, 2) << lr << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr("--lr")) << lr;
  }
  Result r = parbench("train --workload great_net --image 8 --width inf --device-kind cpu --iterations 1");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--width"));

  const char* base = R"({"input": [5], "layers": [{"type": "linear", "out_features": 2}], "target": "random", )";
  struct Case {
    std::string field, expect;
  };
  for (const Case& c : std::vector<Case>{{R"("betas": [1.0, 0.999])", "betas[0]"},
                                         {R"("betas": [0.9, -0.1])", "betas[1]"},
                                         {R"("eps": -1)", "eps"},
                                         {R"("weight_decay": -0.5)", "weight_decay"},
                                         {R"("lr": 1e999)", "malformed JSON"},
                                         {R"("lr": 0)", "lr"},
                                         {R"("name": 5)", "name"},
                                         {R"("target": 5, "lr": 1)", "target"}}) {
    const std::string net = write("net.json", std::string(base) + c.field + "}");
    r = parbench("replay --workload " + net + " --device-kind cpu" + out);
    EXPECT_EQ(r.code, 2) << c.field << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr(net)) << c.field;
    EXPECT_THAT(r.err, HasSubstr(c.expect)) << c.field;
  }
  EXPECT_FALSE(fs::exists(path("out")));
}

TEST_F(Hostile, NonFiniteInputsAndParametersAreBadInput) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const std::string x = npy("x.npy", {2, 5}, {1, 2, 3, nan, 5, 6, 7, 8, 9, 10});
  Result r = parbench("replay --workload linear --device-kind cpu --input " + x + " --out " + path("out"));
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr(x + ": value nan at flat index 3 is not finite"));

  fs::create_directories(path("params"));
  npy("params/0.weight.npy", {2, 5}, {0, 0, 0, 0, 0, 0, 0, 0, 0, inf});
  npy("params/0.bias.npy", {2}, {0, 0});
  r = parbench("replay --workload linear --device-kind cpu --params " + path("params") + " --out " + path("out"));
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr(path("params/0.weight.npy") + ": value inf at flat index 9 is not finite"));
  EXPECT_FALSE(fs::exists(path("out")));
}

TEST_F(Hostile, DivergingTrainingIsAnErrorNotASuccess) {
  // A finite but absurd learning rate drives the loss to infinity in float32.
  const Result r = parbench("replay --workload linear --device-kind cpu --steps 20 --lr 1e38 --out " + path("out"));
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("training diverged"));
  EXPECT_FALSE(fs::exists(path("out")));
}

// --- 8. replay checks --out first and never leaves it half-written -------------------------------

TEST_F(Hostile, ReplayChecksOutBeforeTraining) {
  write("file", "not a folder");
  const Result r = parbench("replay --workload linear --device-kind cpu --steps 3 --out " + path("file/out"));
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.err, HasSubstr(path("file/out")));
  EXPECT_THAT(r.err, Not(HasSubstr("step 1/")));
}

TEST_F(Hostile, AFailedReplayWriteLeavesThePreviousOutputWhole) {
  const std::string out = path("out");
  Result r = parbench("replay --workload linear --device-kind cpu --steps 1 --out " + out);
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string before = slurp(out + "/params/0.weight.npy");
  // losses.json cannot be replaced (a folder is in the way): the parameters must not change either.
  fs::remove(out + "/losses.json");
  fs::create_directories(out + "/losses.json/blocker");
  r = parbench("replay --workload linear --device-kind cpu --steps 3 --seed 7 --out " + out);
  EXPECT_NE(r.code, 0);
  EXPECT_EQ(slurp(out + "/params/0.weight.npy"), before);
  for (const auto& e : fs::directory_iterator(out))
    EXPECT_THAT(e.path().filename().string(), Not(HasSubstr("staging"))) << "leftover";
}

// --- 10. Google Benchmark flags ------------------------------------------------------------------

TEST_F(Hostile, InvalidGoogleBenchmarkFlagsAreBadInput) {
  const std::string run = path("run");
  for (const char* flag : {"--benchmark_repetitions=0", "--benchmark_repetitions=-1", "--benchmark_repetitions=x",
                           "--benchmark_format=xml", "--benchmark_out_format=yaml", "--benchmark_min_time=-1",
                           "--benchmark_out=/nonexistent/folder/x.json"}) {
    const Result r = parbench("run --workload linear --strategies regular --devices 1 --iterations 2 --warmup 0 "
                              "--device-kind cpu --out " + run + " " + flag);
    EXPECT_EQ(r.code, 2) << flag << ": " << r.out << r.err;
    const std::string name = std::string(flag).substr(2, std::string(flag).find('=') - 2);
    EXPECT_THAT(r.err, HasSubstr("--" + name)) << flag;
    EXPECT_FALSE(fs::exists(run)) << flag << " left a run folder";
  }
}

// --- 11. leftovers and false success -------------------------------------------------------------

TEST_F(Hostile, ARunThatMatchesNothingLeavesNoFolder) {
  const std::string run = path("run");
  const Result r = parbench("run --workload linear --strategies regular --devices 1 --iterations 2 --warmup 0 "
                            "--device-kind cpu --out " + run + " --benchmark_filter=nomatch");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_FALSE(fs::exists(run));
}

TEST_F(Hostile, AnEndlessInputIsRefusedWithoutReadingItAll) {
  const Result r = parbench("replay --workload linear --device-kind cpu --input /dev/zero --out " + path("out"));
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("/dev/zero: not a .npy file"));

  // A valid header on a stream that never ends: refused once the header's size has been read.
  const std::string fifo = path("stream.npy");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  // The writer's next write after the reader closes fails with EPIPE instead of killing the test.
  struct IgnorePipe {
    void (*old)(int) = std::signal(SIGPIPE, SIG_IGN);
    ~IgnorePipe() { std::signal(SIGPIPE, old); }
  } ignore_pipe;
  std::thread writer([&] {
    const std::vector<float> ten(10, 1.0f);
    write_npy(path("ten.npy"), {2, 5}, ten.data());
    std::string bytes = slurp(path("ten.npy"));
    std::ofstream pipe(fifo);
    pipe << bytes;
    for (int i = 0; i < 1000 && pipe; ++i) pipe << std::string(4096, '\1');  // ends when the reader closes
  });
  try {
    read_npy(fifo);
    ADD_FAILURE() << "no error for trailing data on a stream";
  } catch (const UsageError& e) {
    EXPECT_THAT(e.what(), HasSubstr("trailing data"));
  }
  writer.join();
}

TEST_F(Hostile, AChartThatCannotBeWrittenIsAnError) {
  if (std::system("/usr/bin/python3 -c 'import matplotlib' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "matplotlib missing";
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  const std::string gb = write("a.json", R"({"context": {"workload": "linear"}, "benchmarks": [
    {"name": "linear/regular/devices:1/batch:1", "run_type": "iteration", "real_time": 1.0, "time_unit": "ms",
     "iterations": 1, "samples_per_s": 1000, "devices": 1, "global_batch": 1}]})");
  const Result r = parbench("report " + gb + " --chart /dev/full");
  EXPECT_NE(r.code, 0) << r.err;
  EXPECT_THAT(r.err, Not(HasSubstr("wrote /dev/full")));
  EXPECT_THAT(r.err, HasSubstr("/dev/full"));
  EXPECT_TRUE(fs::is_character_file("/dev/full"));
}

}  // namespace
}  // namespace pb
