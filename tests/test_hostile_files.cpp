// Hostile files and names: plan files, config files, results files and workload names written by
// hand or damaged. Each case ends in exit 2 and one line naming the file, field or flag, before
// any work starts; none runs, crashes or reports a wrong result.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "engine/check.h"
#include "engine/config_file.h"
#include "engine/fsutil.h"
#include "engine/json_input.h"
#include "plan/check.h"
#include "plan/plan.h"
#include "reports/gbjson.h"
#include "tests/test_projection_support.h"

namespace pb {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;
using namespace projection_test;

std::string plan_fixture() { return (test::source_dir() / "tests/fixtures/plans/onefoneb_2stages.json").string(); }

// The fixture plan edited by `edit`, read back as p.json: refused, naming p.json and `part`.
void expect_plan_refused(const std::function<void(nlohmann::json&)>& edit, const std::string& part) {
  nlohmann::json j = nlohmann::json::parse(read_file(plan_fixture()));
  edit(j);
  try {
    plan_from_json(j.dump(), "p.json");
    ADD_FAILURE() << "accepted: " << part;
  } catch (const UsageError& e) {
    EXPECT_THAT(e.what(), HasSubstr(part));
    EXPECT_THAT(e.what(), HasSubstr("p.json"));
  }
}

class HostileFiles : public ProjectCli {
 protected:
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path(name)) << text;
    return path(name);
  }
  // The fixture plan as JSON with `edit` applied.
  std::string plan_with(const std::string& name, const std::function<void(json&)>& edit) const {
    json j = json::parse(read_file(plan_fixture()));
    edit(j);
    return write(name, j.dump());
  }
  void expect_refused(const test::Result& r, const std::vector<std::string>& parts) const {
    EXPECT_EQ(r.code, 2) << r.err;
    for (const std::string& p : parts) EXPECT_THAT(r.err, HasSubstr(p));
  }
};

// --- 1. a plan runs only on the workload and dtypes it was made for ----------------------------

TEST_F(HostileFiles, PlanOfAnotherWidthOrWithoutIdentityIsRefusedBeforeRunning) {
  test::Result r = parbench("plan --strategy pipeline-1f1b --devices 2 --batch 4 --workload great_net --image 32 "
                            "--width 0.125 --format json --out " + path("narrow.json"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(read_file(path("narrow.json")), HasSubstr("\"identity\""));
  r = parbench("run --plan " + path("narrow.json") + " --workload great_net --image 32 --width 0.25 --iterations 1 "
               "--warmup 0 --out " + path("run"));
  expect_refused(r, {"--plan " + path("narrow.json"), "made for params"});
  EXPECT_FALSE(fs::exists(path("run")));
  r = parbench("run --plan " + path("narrow.json") + " --workload great_net --image 32 --width 0.125 --precision bf16 "
               "--iterations 1 --warmup 0 --out " + path("run"));
  expect_refused(r, {"made for precision fp32, this run has precision bf16"});
  // The same net edited (a ReLU moved: as many layers and parameters): its shapes differ.
  json moved = json::parse(read_file(example_net()));
  std::swap(moved["layers"][1], moved["layers"][2]);
  write_file_atomic(path("moved.json"), moved.dump());
  r = parbench("plan --strategy ddp --devices 2 --batch 4 --workload " + example_net() + " --format json --out " +
               path("ddp.json"));
  ASSERT_EQ(r.code, 0) << r.err;
  r = parbench("run --plan " + path("ddp.json") + " --workload " + path("moved.json") + " --out " + path("run"));
  expect_refused(r, {"--plan " + path("ddp.json"), "made for shapes", "a layer's type, shapes or parameters differ"});
  EXPECT_FALSE(fs::exists(path("run")));
  // project --plan checks it against the profile's layers.
  write_cpu_profile(path("moved-profile.json"), resolve_workload(path("moved.json"), {}));
  r = parbench("project --plan " + path("ddp.json") + " --profile " + path("moved-profile.json") + " --machine " +
               write_cpu_machine(path("cpu.json")));
  expect_refused(r, {"made for shapes"});
  write_cpu_profile(path("profile.json"), resolve_workload(example_net(), {}));
  r = parbench("project --plan " + path("ddp.json") + " --profile " + path("profile.json") + " --machine " +
               path("cpu.json"));
  EXPECT_EQ(r.code, 0) << r.err;
  // A plan without an identity: refused, saying how to make one.
  const std::string bare = plan_with("bare.json", [](json& j) { j.erase("identity"); });
  r = parbench("run --plan " + bare + " --workload " + example_net() + " --out " + path("run"));
  expect_refused(r, {"has no 'identity'", "parbench plan --format json"});
  EXPECT_FALSE(fs::exists(path("run")));
}

// A plan computes what its strategy computes at its workers, batch and micro-batches: its batch
// edited, another strategy's name, a worker added -- refused before running or pricing.
TEST_F(HostileFiles, APlanThatComputesAnotherStepIsRefusedByRunAndProject) {
  write_cpu_profile(path("profile.json"), resolve_workload(example_net(), {}));
  const std::string project = " --profile " + path("profile.json") + " --machine " + write_cpu_machine(path("cpu.json"));
  const std::string run = " --workload " + example_net() + " --iterations 1 --warmup 0 --out " + path("run");
  const std::string batch = plan_with("batch.json", [](json& j) { j["batch"] = 8; });
  expect_refused(parbench("run --plan " + batch + run), {"forward of 2 sample(s)", "at batch 8", "(4 sample(s) there)"});
  EXPECT_FALSE(fs::exists(path("run")));
  expect_refused(parbench("project --plan " + batch + project), {"batch.json", "at batch 8"});
  const std::string wider = plan_with("wider.json", [](json& j) {
    j["workers"] = 3;
    j["replica"] = json::array({0, 0, 0});
  });
  expect_refused(parbench("project --plan " + wider + project), {"wider.json", "pipeline-1f1b"});  // was SIGSEGV
  for (const std::string other : {"pipeline-interleaved", "fsdp", "mp", "nope"}) {
    const std::string relabeled = plan_with(other + ".json", [&](json& j) { j["strategy"] = other; });
    const test::Result r = parbench("project --plan " + relabeled + project);
    expect_refused(r, {other + ".json", other});
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  EXPECT_EQ(parbench("project --plan " + plan_fixture() + project).code, 0);
}

// --- 2. numbers in a plan are exact integers in range, never narrowed --------------------------

TEST_F(HostileFiles, PlanNumbersAreRangeCheckedNotWrapped) {
  const auto refused = expect_plan_refused;
  refused([](json& j) { j["workers"] = 4294967298ull; }, "field 'workers': expected an integer from 1 to 65536");
  refused([](json& j) { j["micro_batches"] = 1e12; }, "field 'micro_batches'");
  refused([](json& j) { j["batch"] = 2.5; }, "field 'batch'");
  refused([](json& j) { j["batch"] = -4; }, "field 'batch'");
  refused([](json& j) { j["buffers"][0]["bytes"] = -3120; }, "buffer 0: field 'bytes'");
  refused([](json& j) { j["buffers"][0]["bytes"] = 0.5; }, "buffer 0: field 'bytes'");
  refused([](json& j) { j["actions"][0]["samples"] = 1.5; }, "field 'samples'");
  refused([](json& j) { j["actions"][0]["reads"] = json::array({4294967296ull}); }, "field 'reads' entry 0");
  // Through the CLI: the file and field named, never a flag that was not given.
  const std::string file = plan_with("mb.json", [](json& j) { j["micro_batches"] = 1e12; });
  const test::Result r = parbench("plan --check " + file);
  expect_refused(r, {file, "'micro_batches'"});
  EXPECT_THAT(r.err, Not(HasSubstr("--micro-batches")));
}

// A buffer is its role, index and chunk: interpreters bind it by them, so a plan says each once,
// with a role they know; a plan from before roles is told how to get one.
TEST_F(HostileFiles, PlanBuffersAreTypedAndEachSaidOnce) {
  auto refused = [](const std::function<void(json&)>& edit, const std::string& part) {
    expect_plan_refused(edit, "p.json: buffer 1: ");
    expect_plan_refused(edit, part);
  };
  refused([](json& j) { j["buffers"][1]["role"] = "scratchpad"; }, "unknown buffer role 'scratchpad': expected one of x, in,");
  refused([](json& j) { j["buffers"][1]["index"] = 0; }, "worker 0's x[0] again (buffer 0)");
  refused([](json& j) { j["buffers"][1]["index"] = -2; }, "field 'index'");
  refused([](json& j) { j["buffers"][1].erase("role"); }, "missing field 'role'");
  refused([](json& j) { j["buffers"][1].erase("role"), j["buffers"][1]["name"] = "x[1]"; },
          "has a 'name' and no 'role'");
  // The same buffer on another chunk is another buffer; written back, a plan reads the same.
  json j = json::parse(read_file(plan_fixture()));
  j["buffers"][1]["index"] = 0, j["buffers"][1]["chunk"] = 1;
  const Plan p = plan_from_json(j.dump(), "p.json");
  EXPECT_EQ(buffer_label(p.buffers[1]), "c1/x[0]");
  const Plan back = plan_from_json(plan_to_json(p), "back.json");
  ASSERT_EQ(back.buffers.size(), p.buffers.size());
  for (std::size_t b = 0; b < p.buffers.size(); ++b) {
    EXPECT_TRUE(same_buffer(back.buffers[b], p.buffers[b])) << buffer_label(p.buffers[b]);
    EXPECT_EQ(back.buffers[b].bytes, p.buffers[b].bytes);
  }
}

TEST_F(HostileFiles, SendAndReceiveMustAgreeOnDtypeBytesAndFitTheirBuffers) {
  const Plan good = read_plan_file(plan_fixture());
  ASSERT_TRUE(validate_plan(good).empty()) << issues_text(validate_plan(good));
  int w = -1, id = -1;
  for (int k = 0; k < good.workers && w < 0; ++k)
    for (const Action& a : good.actions[k])
      if (a.kind == ActionKind::Recv && !a.writes.empty()) {
        w = k, id = a.id;
        break;
      }
  ASSERT_GE(w, 0);
  Plan p = good;
  p.actions[w][id].dtype = DType::Bf16;  // its send stays fp32
  EXPECT_THAT(issues_text(validate_plan(p)), HasSubstr("dtype"));
  p = good;
  p.actions[w][id].bytes = 12345;  // the send's bytes are another figure
  EXPECT_THAT(issues_text(validate_plan(p)), HasSubstr("bytes against"));
  p = good;
  p.buffers[p.actions[w][id].writes[0]].bytes = 4;  // smaller than the message
  EXPECT_THAT(issues_text(validate_plan(p)), HasSubstr("holds 4"));
}

// --- 3. project --plan refuses what it cannot price --------------------------------------------

TEST_F(HostileFiles, ProjectPlanWithoutMicroBatchesOrActionsIsRefusedNotCrashed) {
  write_file_atomic(path("p.json"), pj::profile_json(profile_of(plan_net(resolve_workload(example_net(), {})))).dump());
  const std::string m = " --machine " + fixture("machine.json") + " --profile " + path("p.json");
  test::Result r = parbench("project --plan " + plan_with("zero.json", [](json& j) { j["micro_batches"] = 0; }) + m);
  expect_refused(r, {"zero.json", "'micro_batches'"});
  r = parbench("project --plan " + plan_with("empty.json", [](json& j) {
                 j["actions"] = json::array();
               }) + m);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.code, -1) << "ended by a signal";
  EXPECT_THAT(r.err, HasSubstr("empty.json"));
  r = parbench("project --plan " + plan_fixture() + m);
  EXPECT_EQ(r.code, 0) << r.err;
}

// --- 4. files are read with a limit for their kind, named --------------------------------------

TEST_F(HostileFiles, EndlessFilesAreRefusedNamingTheFileAndItsLimit) {
  expect_refused(parbench("plan --check /dev/zero"), {"/dev/zero: larger than 64 MiB, the most a plan file may hold"});
  expect_refused(parbench("report /dev/zero"), {"/dev/zero: larger than", "results file"});
  expect_refused(parbench("run --config /dev/zero --out " + path("run")), {"/dev/zero: larger than 1 MiB", "config file"});
  EXPECT_FALSE(fs::exists(path("run")));
  // A valid plan padded with unused buffers: checked in time linear in its size, and it runs (the
  // pipeline indexed the file's buffers by its own plan's list).
  const std::string padded = plan_with("padded.json", [](json& j) {
    for (int i = 0; i < 200000; ++i) j["buffers"].push_back({{"worker", i % 2}, {"role", "gathered"}, {"index", i}, {"bytes", 4}});
  });
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(parbench("plan --check " + padded).code, 0);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 60.0);
  const test::Result ran = parbench("run --plan " + padded + " --workload " + example_net() +
                                    " --iterations 1 --warmup 0 --out " + path("padded-run"));
  EXPECT_EQ(ran.code, 0) << ran.err;
  EXPECT_THROW(read_file("/dev/zero", 1000, "test"), UsageError);
  write_file_atomic(path("exact"), std::string(1000, 'x'));
  EXPECT_EQ(read_file(path("exact"), 1000, "test").size(), 1000u);
  EXPECT_THROW(read_file(path("exact"), 999, "test"), UsageError);
}

// --- 5. config files are read strictly ---------------------------------------------------------

TEST_F(HostileFiles, ConfigSyntaxErrorsAndRepeatedKeysAreRefusedWithTheirLine) {
  const std::string run = " --out " + path("run") + " --iterations 1 --warmup 0 --strategies regular --workload linear";
  expect_refused(parbench("run --config " + write("open.toml", "# sweep\ndevices = [1, 2\n") + run),
                 {"open.toml:2: unterminated list"});
  expect_refused(parbench("run --config " + write("twice.toml", "batch = 2\nbatch = 4\n") + run),
                 {"twice.toml:2: key 'batch' given twice (first on line 1)"});
  expect_refused(parbench("run --config " + write("junk.toml", "batch = 2\nthis is not toml\n") + run),
                 {"junk.toml:2: expected `name = value`"});
  expect_refused(parbench("run --config " + write("str.toml", "precision = \"fp32\n") + run), {"str.toml:1: unterminated string"});
  // One flag twice under its old and new spellings.
  expect_refused(parbench("run --config " + write("alias.toml", "reps = 2\nrepetitions = 3\n") + run),
                 {"alias.toml: keys 'reps' and 'repetitions' both set --reps"});
  // A list, or words apart, for a flag of one value (CLI11 joined them into "2,3").
  expect_refused(parbench("run --config " + write("list.toml", "warmup = [2, 3]\n") + run),
                 {"list.toml: key 'warmup' takes one value (N), got 2: 2, 3"});
  expect_refused(parbench("run --config " + write("words.toml", "all-at-one-device = yes please\n") + run),
                 {"words.toml: key 'all-at-one-device' takes one value (true or false)"});
  EXPECT_FALSE(fs::exists(path("run")));
  // What the reader accepts: comments, sections, lists over lines, INI spellings.
  EXPECT_NO_THROW(check_config_text("# c\ndevices = [1,\n  2]  # two\n; ini\n[run]\nbatch = 4\nname = 'a#b'\n", "ok.toml"));
}

// --- 6. names are checked before any work ------------------------------------------------------

TEST_F(HostileFiles, WorkloadNamesThatCannotNameABenchmarkAreRefusedFirst) {
  json net = json::parse(read_file(example_net()));
  for (const std::string& name : {std::string("bad/name"), std::string(300, 'x'), std::string("a b"), std::string(".."),
                                  std::string("-x"), std::string("great_net"), std::string("unet")}) {
    net["name"] = name;
    write_file_atomic(path("net.json"), net.dump());
    const test::Result r = parbench("run --workload " + path("net.json") + " --strategies regular --devices 1 "
                                    "--iterations 1 --warmup 0 --out " + path("run"));
    expect_refused(r, {path("net.json") + ": field \"name\""});
    EXPECT_THAT(r.err, ::testing::AnyOf(HasSubstr("cannot name a workload"), HasSubstr("a built-in net's name")));
    EXPECT_FALSE(fs::exists(path("run"))) << name;
  }
}

// --- 7. flag combinations refused at parse time ------------------------------------------------

TEST_F(HostileFiles, VirtualStagesAndHybridFactorsAreRangeCheckedAtOnce) {
  expect_refused(parbench("run --virtual-stages 0 --workload linear --strategies regular --out " + path("run")),
                 {"--virtual-stages", "from 2"});
  EXPECT_FALSE(fs::exists(path("run")));
  expect_refused(parbench("run --virtual-stages 1 --workload linear --strategies regular --out " + path("run")),
                 {"--virtual-stages", "from 2"});
  EXPECT_FALSE(fs::exists(path("run")));
  expect_refused(parbench("plan --strategy dp65536xtp65536 --workload linear --batch 4"), {"dp65536xtp65536", "more than the 65536"});
  expect_refused(parbench("plan --strategy hsdp4294967297x1 --workload linear --batch 4"), {"hsdp4294967297x1", "more than the 65536"});
  expect_refused(parbench("plan --strategy dp2xpp99999999999999 --workload linear --batch 4"), {"more than the 65536"});
  // The same product from --dp and --pp (or --tp): it wrapped an int.
  expect_refused(parbench("run --dp 65536 --pp 65536 --workload linear --out " + path("run")),
                 {"--dp 65536 x --pp 65536 = 4294967296 devices, more than the 65536"});
  expect_refused(parbench("train --dp 65536 --tp 65536 --workload linear"), {"--dp 65536 x --tp 65536"});
  EXPECT_FALSE(fs::exists(path("run")));
}

TEST_F(HostileFiles, ProjectBlamesMicroBatchesThatAreNoMultipleOfThePipelineWorkers) {
  const std::string m = " --profile " + fixture("uniform.json") + " --machine " + write_cpu_machine(path("cpu.json")) +
                        " --strategies pipeline-interleaved --batch 16 --scaling strong";
  test::Result r = parbench("project" + m + " --devices 4 --micro-batches 3,6");
  expect_refused(r, {"--micro-batches 3,6:", "a multiple of the device count (--devices 4)"});
  EXPECT_THAT(r.err, Not(HasSubstr("samples of a replica")));
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_TRUE(r.out.empty());
  // A multiple above the batch: then the samples are at fault.
  expect_refused(parbench("project" + m + " --devices 4 --micro-batches 32"), {"above the samples of a replica"});
  r = parbench("project" + m + " --devices 4 --micro-batches 3,8");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("pipeline-interleaved (M=8)"));
}

TEST_F(HostileFiles, RunRefusesANamedStrategyItsFlagsCannotRunBeforeRunning) {
  const std::string run = " --workload great_net --image 16 --width 0.125 --batch 4 --iterations 1 --warmup 0 --out " +
                          path("run");
  test::Result r = parbench("run --strategies pipeline-interleaved --devices 2 --micro-batches 3" + run);
  expect_refused(r, {"--devices 2, global batch 8", "--micro-batches must be a multiple of the 2 pipeline workers"});
  EXPECT_FALSE(fs::exists(path("run")));
  r = parbench("run --strategies ddp,pipeline-interleaved --devices 2 --virtual-stages 99" + run);
  expect_refused(r, {"pipeline-interleaved"});
  EXPECT_FALSE(fs::exists(path("run")));
  r = parbench("run --strategies pipeline --devices 2 --balance 1,2" + run);
  expect_refused(r, {"--devices 2", "--balance"});
  EXPECT_FALSE(fs::exists(path("run")));
  // More stages than the net has layers is no flag's fault: a failed row, the sweep goes on
  // (Harness.InvalidSplitIsAnErrorEntry).
}

// --- 8. compare and report trust no copy -------------------------------------------------------

TEST_F(HostileFiles, RepeatedBenchmarkEntriesAndHtmlWithoutContextAreRefused) {
  const std::string results = (test::source_dir() / "tests/fixtures/charts_run/results.json").string();
  json doc = json::parse(read_file(results));
  json twice = doc;
  for (const json& b : doc["benchmarks"]) twice["benchmarks"].push_back(b);
  const std::string dup = write("dup.json", twice.dump());
  expect_refused(parbench("report " + dup), {"dup.json", "given twice"});
  expect_refused(parbench("compare " + results + " " + dup), {"dup.json", "given twice"});
  // The copies numbered as further repetitions, or their iteration times doubled: as many
  // repetitions as each benchmark says it ran, no more.
  json renumbered = twice;
  for (std::size_t i = doc["benchmarks"].size(); i < renumbered["benchmarks"].size(); ++i)
    renumbered["benchmarks"][i]["repetition_index"] = 1;
  expect_refused(parbench("report " + write("renumbered.json", renumbered.dump())), {"renumbered.json", "repetition_index 1 of 1"});
  json more = doc;
  for (auto& [name, reps] : more["iteration_times_s"].items()) reps.push_back(reps[0]);
  expect_refused(parbench("compare " + results + " " + write("more.json", more.dump())),
                 {"more.json", "2 repetitions of iteration times, but the benchmark ran 1"});
  // A folder of past runs holding one run twice is refused; the contender's run there (a copy, not
  // its path) is left out, as it is by its path.
  fs::create_directories(path("history/a"));
  fs::create_directories(path("history/b"));
  json earlier = doc;
  earlier["context"]["date"] = "2020-01-01T00:00:00+00:00";
  write("history/a/results.json", earlier.dump());
  write("history/b/results.json", earlier.dump());
  expect_refused(parbench("compare " + path("history") + " " + results), {"hold the same run"});
  fs::remove_all(path("history/b"));
  write("history/copy.json", doc.dump());
  const test::Result two = parbench("compare " + path("history") + " " + results);
  EXPECT_NE(two.code, 2) << two.err;
  EXPECT_THAT(two.out, Not(HasSubstr("copy.json")));
  EXPECT_THAT(two.out, Not(HasSubstr("more run(s)")));  // one baseline run: history/a's
  json bare = doc;
  bare.erase("context");
  const std::string nocontext = write("nocontext.json", bare.dump());
  const test::Result r = parbench("report " + nocontext + " --html " + path("page.html"));
  expect_refused(r, {"nocontext.json has no \"context\""});
  EXPECT_TRUE(r.out.empty()) << "printed before refusing";
}

}  // namespace
}  // namespace pb
