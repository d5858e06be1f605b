// Flags in every command: integers beyond the accepted range are refused (exit 2, naming the flag
// and the range) before anything runs, instead of wrapping into int; malformed flags name
// themselves. Config files, names and defaults: tests/test_flag_files.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "tests/cli_fixture.h"

namespace pb {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class Flags : public test::CliTest {
 protected:
  Flags() : CliTest("pb_flags_") {}
  static std::string project() {
    const std::string dir = (test::source_dir() / "tests/fixtures/projection").string();
    return "project --profile " + dir + "/uniform.json --machine " + dir + "/machine.json";
  }
  // Runs the command and expects exit 2 with `message` on stderr.
  void refused(const std::string& args, const std::string& message) {
    const test::Result r = parbench(args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.out << r.err;
    EXPECT_THAT(r.err, HasSubstr(message)) << args;
  }
};

// 4294967298 = 2^32 + 2 used to train on 2 devices; 10^12 to print rows for -727379968.
TEST_F(Flags, DeviceCountsBeyondTheRangeAreRefusedNotWrapped) {
  const std::string range = "flag --devices expects an integer from 1 to 65536";
  refused("train --device-kind cpu --workload linear --strategy ddp --devices 4294967298", range + ", got '4294967298'");
  refused("run --device-kind cpu --workload linear --strategies dp --devices 1,4294967298 --out " + path("r"), range);
  refused("replay --device-kind cpu --workload linear --strategy dp --devices 4294967298 --out " + path("p"), range);
  refused(project() + " --devices 1000000000000", range);
  refused("train --device-kind cpu --workload linear --devices 99999999999999999999", range);  // beyond 64 bits
  refused("train --device-kind cpu --workload linear --devices 0", range + ", got '0'");
}

TEST_F(Flags, EveryIntegerFlagHasAnUpperBound) {
  const std::string big = "4294967297";  // 2^32 + 1: 1 as an int
  const std::string linear = " --device-kind cpu --workload linear";
  struct Case {
    std::string args, flag;
  };
  const Case cases[] = {
      {"train" + linear + " --batch " + big, "batch"},
      {"train" + linear + " --iterations " + big, "iterations"},
      {"train" + linear + " --warmup " + big, "warmup"},
      {"train" + linear + " --threads " + big, "threads"},
      {"train" + linear + " --strategy pipeline --devices 2 --micro-batches " + big, "micro-batches"},
      {"train" + linear + " --dp " + big + " --pp 2", "dp"},
      {"train --device-kind cpu --image " + big, "image"},
      {"replay" + linear + " --steps " + big + " --out " + path("o"), "steps"},
      {"run" + linear + " --batch " + big + " --out " + path("o"), "batch"},
      {"profile --device-kind cpu --batch 1," + big + " --out " + path("o.json"), "batch"},
      {"profile --device-kind cpu --reps " + big + " --out " + path("o.json"), "reps"},
      {"calibrate --ranks " + big + " --out " + path("c.json"), "ranks"},
      {"calibrate --reps " + big + " --out " + path("c.json"), "reps"},
      {"ab a b --pairs " + big, "pairs"},
      {project() + " --batch " + big, "batch"},
      {project() + " --micro-batches 1," + big, "micro-batches"},
  };
  for (const Case& c : cases) refused(c.args, "flag --" + c.flag + " expects an integer from ");
  // Sizes in MiB become byte counts: no overflowing cast either.
  refused("train" + linear + " --strategy ddp --bucket-mb 1e300", "--bucket-mb must be positive, at most 1048576");
  refused("train" + linear + " --strategy ddp --first-bucket-mb 1e30", "--first-bucket-mb must be positive, at most");
}

// --conv-workspace-mib: a whole number of MiB or refused naming the flag; the environment variable
// that is not read is refused, so a script setting it does not run uncapped unawares.
TEST_F(Flags, ConvWorkspaceCapIsWholeMibAndTheUnreadVariableIsRefused) {
  const std::string linear = " --device-kind cpu --workload linear --batch 2 --iterations 1";
  const std::string expects = "--conv-workspace-mib expects a whole number of MiB from 0 to 1073741824, got ";
  refused("train" + linear + " --conv-workspace-mib 1.5", expects + "'1.5'");
  refused("train" + linear + " --conv-workspace-mib=-1", expects + "'-1'");
  refused("train" + linear + " --conv-workspace-mib 1073741825", expects + "'1073741825'");
  const test::Result env = parbench("train" + linear, "PARBENCH_CONV_WORKSPACE_MIB=65536");
  EXPECT_EQ(env.code, 2) << env.out << env.err;
  EXPECT_THAT(env.err, HasSubstr("pass --conv-workspace-mib 65536 instead"));
  const test::Result ok = parbench("train" + linear + " --conv-workspace-mib 0");
  EXPECT_EQ(ok.code, 0) << ok.out << ok.err;
}

// --layout: nchw or nhwc; nhwc is a CUDA layout of the fp32 and tf32 convolutions, refused on a CPU
// run (which would otherwise run NCHW under an nhwc label) and under bf16. The run context says which.
TEST_F(Flags, LayoutIsNchwOrNhwcAndNhwcIsRefusedWhereItWouldNotApply) {
  const std::string linear = " --device-kind cpu --workload linear --batch 2 --iterations 1";
  refused("train" + linear + " --layout channels_last", "--layout expects nchw or nhwc, got 'channels_last'");
  refused("train" + linear + " --layout nhwc", "--layout nhwc is a layout of the CUDA convolutions, and this run is on the CPU");
  refused("run" + linear + " --layout nhwc --out " + path("r"), "--layout nhwc is a layout of the CUDA convolutions");
  refused("profile --device-kind cpu --workload linear --layout nhwc --out " + path("p.json"),
          "--layout nhwc is a layout of the CUDA convolutions");
  const test::Result ok = parbench("run" + linear + " --layout nchw --warmup 0 --out " + path("ok"));
  ASSERT_EQ(ok.code, 0) << ok.out << ok.err;
  const nlohmann::json results = nlohmann::json::parse(test::slurp(path("ok/results.json")));
  EXPECT_EQ(results["context"]["conv_layout"], "n/a");
}

TEST_F(Flags, TypesAreCheckedWhenParsedEvenForFlagsTheCommandDoesNotRead) {
  // --image is read for great_net only; before, a bad value passed unnoticed with linear.
  refused("train --device-kind cpu --workload great_net --image x", "flag --image expects an integer, got 'x'");
  refused("train --device-kind cpu --workload linear --micro-batches 2x", "flag --micro-batches expects an integer, got '2x'");
  refused("train --device-kind cpu --workload linear --bucket-mb fast", "flag --bucket-mb expects a finite number, got 'fast'");
  refused("run --device-kind cpu --workload linear --devices 1,two --out " + path("r"),
          "flag --devices expects a comma-separated list of integers, got '1,two'");
  refused("compare a.json b.json --threshold nan", "flag --threshold expects a finite number, got 'nan'");
  EXPECT_FALSE(std::filesystem::exists(path("r")));
}

TEST_F(Flags, MalformedFlagsNameThemselves) {
  refused("train --device-kind cpu --workload linear --batchh 2",
          "unknown flag --batchh for 'parbench train' (see parbench train --help)");
  refused("train --device-kind cpu --workload linear -b 2", "unknown flag -b for 'parbench train'");
  refused("train --device-kind cpu --workload linear --batch", "flag --batch needs a value (B)");
  refused("train --device-kind cpu --workload linear --oversubscribe=yes", "flag --oversubscribe takes no value");
  // A negative number is a value, not a flag: the command's own check answers.
  refused("train --device-kind cpu --workload linear --comm-timeout -1", "--comm-timeout must be >= 0 seconds, got -1");
  // The last of a repeated flag wins, as before.
  const test::Result r = parbench("train --device-kind cpu --workload linear --batch 9 --batch 3 --iterations 1 --warmup 0");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("input 3 x"));
}

TEST_F(Flags, AnUnknownCommandIsOneErrorLine) {
  const test::Result r = parbench("frobnicate --batch 2");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "parbench: error: unknown command 'frobnicate' (see parbench --help)\n");
  EXPECT_EQ(r.out, "");
}

TEST_F(Flags, GreatNetTooLargeForAnyDeviceNamesImage) {
  // Within --image's range, but no device holds the activation it makes.
  const test::Result r = parbench("train --device-kind cpu --workload great_net --image 2000000000");
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("--image 2000000000"));
  EXPECT_THAT(r.err, HasSubstr("more than any device can hold"));
  // Beyond int: the range, naming the flag.
  refused("train --device-kind cpu --workload great_net --image 2147483648",
          "flag --image expects an integer from 1 to 2147483647, got '2147483648'");
  // A size that fits still trains.
  const test::Result ok = parbench("train --device-kind cpu --workload great_net --image 8 --width 0.125 --batch 1 "
                                   "--iterations 1 --warmup 0");
  EXPECT_EQ(ok.code, 0) << ok.err;
  EXPECT_THAT(ok.err, Not(HasSubstr("expects an integer")));
}

}  // namespace
}  // namespace pb
