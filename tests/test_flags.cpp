// Integer flags in every command: values beyond the accepted range are refused (exit 2, naming
// the flag and the range) before anything runs, instead of wrapping into int.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

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
      {"profile --device-kind cpu --batches 1," + big + " --out " + path("o.json"), "batches"},
      {"profile --device-kind cpu --repetitions " + big + " --out " + path("o.json"), "repetitions"},
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
