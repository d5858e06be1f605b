// Flags across commands: --config files (a sweep kept as a file, recorded in the run folder),
// one name per idea with the old spellings warning once, one great_net default, and --help
// saying what each command's --out names.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <regex>
#include <string>

#include "strategies/strategy.h"
#include "tests/cli_fixture.h"

namespace pb {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class FlagFiles : public test::CliTest {
 protected:
  FlagFiles() : CliTest("pb_flag_files_") {}
  std::string file(const std::string& name, const std::string& text) {
    std::ofstream(path(name)) << text;
    return path(name);
  }
  static int count(const std::string& text, const std::string& what) {
    int n = 0;
    for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  }
  // The help line of `flag` in `command --help`.
  std::string help_line(const std::string& command, const std::string& flag) {
    const test::Result r = parbench(command + " --help");
    EXPECT_EQ(r.code, 0) << command;
    std::smatch m;
    if (!std::regex_search(r.out, m, std::regex("\n  --" + flag + "[ \n][^\n]*"))) return "";
    return m[0];
  }
};

TEST_F(FlagFiles, AConfigFileSetsFlagsAndTheCommandLineWins) {
  const std::string cfg = file("train.toml",
                               "# a kept configuration\n"
                               "workload = \"linear\"\ndevice-kind = \"cpu\"\nbatch = 3\niterations = 1\nwarmup = 0\n");
  const test::Result r = parbench("train --config " + cfg);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("linear: input 3 x"));
  const test::Result over = parbench("train --batch 5 --config " + cfg);
  EXPECT_EQ(over.code, 0) << over.err;
  EXPECT_THAT(over.out, HasSubstr("linear: input 5 x"));
  // INI spelling, a switch from the file.
  const std::string ini = file("train.ini", "workload=linear\ndevice-kind=cpu\niterations=1\nwarmup=0\n"
                                            "strategy=dp\ndevices=2\noversubscribe=true\n");
  const test::Result i = parbench("train --config " + ini);
  EXPECT_EQ(i.code, 0) << i.err;
  EXPECT_THAT(i.out, HasSubstr("strategy dp on 2 cpu device(s)"));
}

TEST_F(FlagFiles, ABadKeyOrValueInAConfigFileNamesTheFileAndTheKey) {
  const std::string typo = file("typo.toml", "workload = \"linear\"\nbatchh = 2\n");
  test::Result r = parbench("train --device-kind cpu --config " + typo);
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr(typo + ": unknown key 'batchh' for parbench train"));
  EXPECT_THAT(r.out, Not(HasSubstr("input")));  // nothing ran
  const std::string section = file("section.toml", "[sweep]\nbatch = 2\n");
  r = parbench("train --device-kind cpu --config " + section);
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr(section + ": unknown key 'sweep.batch'"));
  const std::string value = file("value.toml", "workload = \"linear\"\nbatch = 4294967297\n");
  r = parbench("train --device-kind cpu --config " + value);
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr(value + ": key 'batch': flag --batch expects an integer from 1 to 2147483647"));
  r = parbench("train --config " + path("missing.toml"));
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--config " + path("missing.toml") + ": cannot read the file"));
}

TEST_F(FlagFiles, RunKeepsItsSweepFileInTheRunFolder) {
  const std::string text = "workload = \"linear\"\ndevice-kind = \"cpu\"\nstrategies = [\"regular\", \"ddp\"]\n"
                           "devices = [1, 2]\nbatch = 2\nwarmup = 0\niterations = 1\nreps = 2\n";
  const std::string cfg = file("sweep.toml", text);
  const test::Result r = parbench("run --config " + cfg + " --devices 2 --out " + path("run"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(test::slurp(path("run/config.toml")), text);
  const std::string results = test::slurp(path("run/results.json"));
  // --devices 2 on the command line over the file's [1, 2]: ddp alone (regular is one-device).
  EXPECT_THAT(results, HasSubstr("linear/ddp/devices:2"));
  EXPECT_THAT(results, Not(HasSubstr("devices:1/")));
  EXPECT_THAT(results, HasSubstr("\"repetitions\": 2"));  // --reps: Google Benchmark's repetitions
  EXPECT_THAT(r.err, HasSubstr("skipped regular"));  // the file's list, both of its items
  const test::Result both = parbench("run --config " + cfg + " --benchmark_repetitions=3 --out " + path("run2"));
  EXPECT_EQ(both.code, 2);
  EXPECT_THAT(both.err, HasSubstr("--reps and --benchmark_repetitions: give one"));
  EXPECT_FALSE(std::filesystem::exists(path("run2")));
}

TEST_F(FlagFiles, OldSpellingsStillWorkWithOneWarning) {
  const std::string out = path("p.json");
  const test::Result r = parbench("profile --device-kind cpu --image 8 --width 0.125 --warmup 0 --threads 1 "
                                  "--repetitions 1 --batches 1 --batches 1,2 --repetitions 1 --out " + out);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(count(r.err, "--repetitions is deprecated: use --reps"), 1) << r.err;
  EXPECT_EQ(count(r.err, "--batches is deprecated: use --batch"), 1) << r.err;
  EXPECT_THAT(test::slurp(out), HasSubstr("\"batches\": [\n    1,\n    2\n  ]"));
  // The new names, silent; the old ones left out of --help.
  const test::Result now = parbench("profile --device-kind cpu --image 8 --width 0.125 --warmup 0 --threads 1 "
                                    "--reps 1 --batch 2 --out " + out);
  ASSERT_EQ(now.code, 0) << now.err;
  EXPECT_THAT(now.err, Not(HasSubstr("deprecated")));
  const test::Result help = parbench("profile --help");
  EXPECT_THAT(help.out, HasSubstr("--reps N"));
  EXPECT_THAT(help.out, Not(HasSubstr("--repetitions")));
  EXPECT_THAT(help.out, Not(HasSubstr("--batches")));
  // An old key in a config file warns likewise.
  const std::string cfg = file("p.toml", "repetitions = 1\n");
  const test::Result c = parbench("profile --device-kind cpu --image 8 --width 0.125 --warmup 0 --threads 1 "
                                  "--config " + cfg + " --out " + out);
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_EQ(count(c.err, "--repetitions (in " + cfg + ") is deprecated: use --reps"), 1) << c.err;
}

TEST_F(FlagFiles, ImageAndWidthSizeGreatNetOnlyWithOneDefault) {
  for (const std::string& cmd : {std::string("train"), std::string("run --out ") + path("r")})
    for (const char* flag : {"image 8", "width 0.5"}) {
      const test::Result r = parbench(cmd + " --device-kind cpu --workload linear --" + flag);
      EXPECT_EQ(r.code, 2) << cmd << " " << flag;
      EXPECT_THAT(r.err, HasSubstr("--" + std::string(flag).substr(0, 5) + " sizes great_net, resnet and unet only; workload 'linear'"));
    }
  const std::string net = (test::source_dir() / "tests/fixtures/conv_odd/net.json").string();
  const test::Result json = parbench("replay --device-kind cpu --workload " + net + " --width 2 --out " + path("o"));
  EXPECT_EQ(json.code, 2);
  EXPECT_THAT(json.err, HasSubstr("--width sizes great_net, resnet and unet only"));
  EXPECT_FALSE(std::filesystem::exists(path("o")));
  // The default great_net: run names it, train builds it (96 x 96 on CPU, width 0.5: 32 channels first).
  const test::Result list = parbench("run --device-kind cpu --strategies regular --devices 1 --benchmark_list_tests");
  EXPECT_EQ(list.code, 0) << list.err;
  EXPECT_THAT(list.out, HasSubstr("great_net/image:96/width:0.5/"));
  for (const char* help : {"train", "replay", "run", "profile"})
    EXPECT_THAT(help_line(help, "image"), HasSubstr("(default: 512 on GPU, 96 on CPU)")) << help;
}

TEST_F(FlagFiles, RunHelpListsTheRegisteredStrategies) {
  const std::string line = help_line("run", "strategies");
  ASSERT_FALSE(line.empty());
  for (const std::string& name : strategy_names()) EXPECT_THAT(line, HasSubstr(name)) << line;
  for (const std::string& name : strategy_names()) EXPECT_THAT(help_line("train", "strategy"), HasSubstr(name));
}

TEST_F(FlagFiles, OutSaysWhetherItIsAFolderAPrefixOrAFile) {
  const std::map<std::string, std::string> what = {
      {"run", "a folder"},   {"replay", "a folder"},  {"ab", "a folder"},        {"compare", "a file"},
      {"profile", "a file"}, {"calibrate", "a file"}, {"project", "a prefix"}, {"report", "a prefix"},
      {"net", "a file"}};
  for (const auto& [command, kind] : what) EXPECT_THAT(help_line(command, "out"), HasSubstr(kind)) << command;
}

}  // namespace
}  // namespace pb
