// parbench ab, the A/B gate, end to end: builds run alternately and compared pair by pair; a
// contender made slower is caught; binaries that cannot run, are not parbench, or measure
// something else are refused with exit 2 and a message naming them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "tests/cli_fixture.h"

namespace pb {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using test::Result;
using test::slurp;

// A small, quick sweep: two configurations of great_net at 8x8.
const std::string kRun = " -- --workload great_net --image 8 --width 0.1875 --strategies regular,ddp --devices 1 "
                         "--iterations 3 --warmup 1 --threads 1 --device-kind cpu";

class Ab : public test::CliTest {
 protected:
  Ab() : CliTest("parbench_ab_") {}
  // An executable shell script.
  std::string script(const std::string& name, const std::string& body) const {
    const std::string p = path(name);
    std::ofstream(p) << "#!/usr/bin/env bash\n" << body;
    ::chmod(p.c_str(), 0755);
    return p;
  }
  static std::string pb() { return test::parbench_binary(); }
};

// The plumbing, not the gate's sensitivity (scripts/compare_noise.sh measures that): on a shared
// machine pairs of the same build can differ by a third or more, and two pairs' t interval (1
// degree of freedom) is some 13 times their spread, so inconclusive; three pairs' (2 degrees) is
// about 4 times: only a ratio beyond 11 counts here.
TEST_F(Ab, SameBuildPassesAndTheFoldersCompareAgain) {
  for (const std::string unit : {"benchmark", "run"}) {
    const std::string out = path("ab-" + unit);
    const Result r = parbench("ab " + pb() + " " + pb() + " --pairs 3 --threshold 10 --interleave " + unit + " --out " +
                              out + kRun);
    ASSERT_EQ(r.code, 0) << r.err << r.out;
    EXPECT_THAT(r.out, HasSubstr("**PASS** suite of 2 benchmark(s)"));
    EXPECT_THAT(r.out, HasSubstr("Paired: 3 baseline runs"));
    EXPECT_THAT(r.err, HasSubstr("pair 3/3: contender"));
    EXPECT_EQ(slurp(out + "/compare.md"), r.out);
    // Per benchmark: a process of its own in each pair; per run: one process measures both.
    if (unit == "benchmark") {
      EXPECT_TRUE(fs::exists(out + "/baseline/1/1/results.json"));
      EXPECT_TRUE(fs::exists(out + "/contender/2/2/results.json"));
    } else {
      EXPECT_TRUE(fs::exists(out + "/baseline/1/results.json"));
      EXPECT_TRUE(fs::exists(out + "/contender/2/results.json"));
    }
    // The same folders through compare --paired give the same summary.
    const Result again = parbench("compare --paired --threshold 10 " + out + "/baseline " + out + "/contender");
    EXPECT_EQ(again.code, 0) << again.err;
    EXPECT_EQ(again.out, r.out);
  }
}

TEST_F(Ab, AContenderThreeTimesSlowerFails) {
  if (std::system("/usr/bin/python3 -c 'import json' >/dev/null 2>&1") != 0) GTEST_SKIP() << "no /usr/bin/python3";
  // A real run whose every time is then multiplied by 3: the slowdown a build would show.
  const std::string slow = script("slow.sh", "set -e\n\"" + pb() + "\" \"$@\"\n" + R"(out=${@: -1}
[[ -f $out/results.json ]] || exit 0
/usr/bin/python3 - "$out/results.json" <<'PY'
import json, sys
p = sys.argv[1]
d = json.loads(open(p).read().replace("-nan", "NaN"))
for b in d["benchmarks"]:
    if b.get("aggregate_unit", "time") == "time" and "real_time" in b:
        b["real_time"] *= 3
        b["cpu_time"] *= 3
d["iteration_times_s"] = {n: [[t * 3 for t in r] for r in reps] for n, reps in d["iteration_times_s"].items()}
open(p, "w").write(json.dumps(d))
PY
)");
  const Result r = parbench("ab " + pb() + " " + slow + " --pairs 4 --out " + path("ab") + kRun);
  EXPECT_EQ(r.code, 1) << r.err << r.out;
  EXPECT_THAT(r.out, HasSubstr("**FAIL** suite of 2 benchmark(s): geometric mean time ratio"));
  EXPECT_THAT(r.out, HasSubstr("**slower**"));
}

TEST_F(Ab, BinariesThatCannotRunOrAreNotParbench) {
  Result r = parbench("ab " + path("nothing") + " " + pb() + kRun);
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("the baseline binary '" + path("nothing") + "' does not exist"));
  std::ofstream(path("plain")) << "not a program";
  r = parbench("ab " + pb() + " " + path("plain") + kRun);
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("the contender binary '" + path("plain") + "' is not an executable file"));
  r = parbench("ab " + pb() + " no-such-parbench-program" + kRun);
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("cannot run the contender binary 'no-such-parbench-program'"));
  // A program that runs but is not parbench: it lists no benchmark, or writes no results.
  r = parbench("ab " + pb() + " /bin/true --out " + path("t1") + kRun);
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("the contender binary '/bin/true' listed no benchmark"));
  r = parbench("ab /bin/true " + pb() + " --interleave run --out " + path("t2") + kRun);
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("the baseline binary '/bin/true' exited 0 but wrote no"));
  EXPECT_THAT(r.err, HasSubstr("is it a parbench binary?"));
  r = parbench("ab /bin/false " + pb() + " --out " + path("t3") + kRun);
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("the baseline binary '/bin/false' could not list its benchmarks"));
  // A build that crashes or fails without results: a failure of the gate (1), with its log.
  const std::string crash = script("crash.sh", "echo 'segmentation fault, probably' >&2\nexit 1\n");
  r = parbench("ab " + pb() + " " + crash + " --interleave run --out " + path("t4") + kRun);
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("failed (exit 1) in pair 1 and wrote no results: segmentation fault, probably"));
  EXPECT_THAT(r.err, HasSubstr(path("t4") + "/contender/1.log"));
}

TEST_F(Ab, BuildsThatMeasureSomethingElseAreRefused) {
  // The contender runs a wider net than it was asked for: the runs are not comparable.
  const std::string wide =
      script("wide.sh", "args=()\nfor a in \"$@\"; do [[ $a == 0.1875 ]] && a=0.25; args+=(\"$a\"); done\nexec \"" + pb() +
                            "\" \"${args[@]}\"\n");
  const Result r = parbench("ab " + pb() + " " + wide + " --pairs 2 --interleave run --out " + path("ab") + kRun);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_THAT(r.err, HasSubstr("the runs are not comparable"));
  EXPECT_THAT(r.err, HasSubstr("workload_params"));
  EXPECT_THAT(r.err, HasSubstr("--force"));
  // Run flags the builds refuse are named by the build, with exit 2.
  const Result bad = parbench("ab " + pb() + " " + pb() + " --interleave run --out " + path("bad") + " -- --lr nan");
  EXPECT_EQ(bad.code, 2);
  EXPECT_THAT(bad.err, HasSubstr("refused its run (exit 2) in pair 1"));
}

TEST_F(Ab, FlagErrors) {
  auto err = [&](const std::string& args) {
    const Result r = parbench(args);
    EXPECT_EQ(r.code, 2) << args;
    return r.err;
  };
  EXPECT_THAT(err("ab " + pb()), HasSubstr("expected BASELINE_BINARY CONTENDER_BINARY, got 1 argument(s)"));
  EXPECT_THAT(err("ab " + pb() + " " + pb() + " --pairs 1"), HasSubstr("--pairs expects 2 to 1000, got 1"));
  EXPECT_THAT(err("ab " + pb() + " " + pb() + " --interleave iteration"), HasSubstr("--interleave expects run or benchmark"));
  EXPECT_THAT(err("ab " + pb() + " " + pb() + " --time gpu"), HasSubstr("--time expects real or cpu"));
  EXPECT_THAT(err("ab " + pb() + " " + pb() + " -- --out x"), HasSubstr("run flag '--out'"));
  EXPECT_THAT(err("ab " + pb() + " " + pb() + " -- --benchmark_out=x.json"), HasSubstr("run flag '--benchmark_out=x.json'"));
  fs::create_directories(path("used"));
  std::ofstream(path("used/file")) << "x";
  EXPECT_THAT(err("ab " + pb() + " " + pb() + " --out " + path("used") + kRun), HasSubstr("exists and is not an empty folder"));
  EXPECT_THAT(err("compare --paired " + path("used/file") + " " + path("used")), HasSubstr("expected a folder of runs"));
  EXPECT_EQ(parbench("ab --help").code, 0);
}

}  // namespace
}  // namespace pb
