// parbench project end to end: every strategy projected and marked so, the profiler's own output
// read, bad input, and --validate timing stages, tp's layers and side-by-side workers as run does.
#include <map>
#include <set>
#include <sstream>

#include "tests/test_projection_support.h"

namespace pb {
namespace {

using namespace projection_test;

TEST_F(ProjectCli, ProjectsEveryStrategyAndMarksItProjected) {
  const test::Result r = parbench("project --profile " + fixture("uniform.json") + " --machine " + fixture("machine.json") +
                                  " --from-profile-peak 0.5 --devices 1,2,4 --batch 4 --out " + path("p"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("Projected, not measured"), std::string::npos);
  EXPECT_NE(r.out.find("projected on test machine"), std::string::npos);
  EXPECT_NE(r.out.find("Best strategy per device count"), std::string::npos);
  const json doc = json::parse(read_file(path("p.json")));
  EXPECT_TRUE(doc["projected"].get<bool>());
  std::set<std::string> seen;
  for (const json& g : doc["groups"])
    for (const json& row : g["rows"])
      if (row["feasible"].get<bool>()) {
        seen.insert(row["strategy"].get<std::string>());
        const double parts = row["compute_s"].get<double>() + row["exposed_comm_s"].get<double>() + row["idle_s"].get<double>();
        EXPECT_NEAR(parts, row["step_s"].get<double>(), 1e-9 * row["step_s"].get<double>()) << row.dump();
      }
  for (const char* s : {"regular", "dp", "ddp", "mp", "pipeline", "fsdp", "zero2", "tp", "dp2xpp2"}) EXPECT_TRUE(seen.count(s)) << s;
}

// On one device every strategy projects to the same step: no best among them, every row tied, and
// the summary says which are tied; at 4 devices any row marked best is more than 1% ahead of the rest.
TEST_F(ProjectCli, RowsWithinOnePercentOfTheFastestAreTiedNotBest) {
  const test::Result r = parbench("project --profile " + fixture("uniform.json") + " --machine " + fixture("machine.json") +
                                  " --from-profile-peak 0.5 --devices 1,4 --batch 4 --out " + path("t"));
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string md = read_file(path("t.md"));
  EXPECT_NE(md.find("| weak | 4 | 1 | tied: "), std::string::npos) << md;
  EXPECT_NE(md.find("tied: within 1% of the fastest"), std::string::npos) << md;
  std::map<int, std::vector<std::pair<double, std::string>>> by;  // devices -> (samples/s, best cell)
  std::istringstream lines(md);
  for (std::string line; std::getline(lines, line);) {
    std::vector<std::string> cells;
    std::istringstream cs(line);
    for (std::string c; std::getline(cs, c, '|');) cells.push_back(c);
    if (cells.size() != 14 || cells[2].find_first_not_of(" 0123456789") != std::string::npos || cells[2] == " ") continue;
    if (cells[3].find("not possible") != std::string::npos) continue;  // pipeline-interleaved: 8 stages of 4 layers
    by[std::stoi(cells[2])].push_back({std::stod(cells[4]), cells[13]});
  }
  ASSERT_TRUE(by.count(1) && by.count(4)) << md;
  for (const auto& [v, mark] : by[1]) EXPECT_EQ(mark, " tied ") << "one device, " << v << " samples/s";
  for (const auto& [v, mark] : by[4])
    if (mark == " **best** ")
      for (const auto& [w, other] : by[4])
        if (other != " **best** ") {
          EXPECT_LT(w, v * 0.99) << "a best row within 1% of another";
        }
}

// What `parbench profile` writes is what `project` reads: the profiler's own extra fields too.
TEST_F(ProjectCli, ReadsTheProfilersOwnOutput) {
  test::Result r = parbench("profile --workload great_net --image 8 --width 0.125 --batch 1,2 --reps 2 --warmup 1 "
                            "--device-kind cpu --out " + path("prof.json"));
  ASSERT_EQ(r.code, 0) << r.err;
  r = parbench("project --profile " + path("prof.json") + " --machine " + fixture("machine.json") +
               " --from-profile-peak 0.5 --devices 1,2 --batch 2 --out " + path("p"));
  ASSERT_EQ(r.code, 0) << r.err;
  const json doc = json::parse(read_file(path("p.json")));
  std::size_t feasible = 0;
  for (const json& g : doc["groups"])
    for (const json& row : g["rows"]) feasible += row["feasible"].get<bool>() && row["step_s"].get<double>() > 0;
  EXPECT_GT(feasible, 0u);
  // A per-batch workspace list of the wrong length is named.
  json prof = json::parse(read_file(path("prof.json")));
  prof["layers"][0]["workspace_bytes_per_batch"] = json::array({1});
  write_file_atomic(path("bad_prof.json"), prof.dump());
  r = parbench("project --profile " + path("bad_prof.json") + " --machine " + fixture("machine.json"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("layers[0].workspace_bytes_per_batch"), std::string::npos) << r.err;
}

// A net with skips: its profile keeps what each layer reads, and project prices every strategy
// from it -- memory as run's plan counts it, the pipelines' skips on their links.
TEST_F(ProjectCli, ProjectsANetWithSkipsFromItsProfile) {
  const std::string net = test::source_dir().string() + "/tests/fixtures/graph/unet_small/net.json";
  test::Result r = parbench("profile --workload " + net + " --batch 2 --reps 2 --warmup 1 --device-kind cpu --out " +
                            path("unet.json"));
  ASSERT_EQ(r.code, 0) << r.err;
  const json prof = json::parse(read_file(path("unet.json")));
  EXPECT_EQ(prof["layers"][13]["inputs"], json::array({12, 1, -1})) << "the concat of the decoder, enc1 and the input";
  EXPECT_FALSE(prof["layers"][1].contains("inputs")) << "a layer reading the one before it says nothing";
  r = parbench("project --profile " + path("unet.json") + " --machine " + fixture("machine.json") +
               " --from-profile-peak 0.5 --devices 1,2 --batch 2 --strategies regular,ddp,fsdp,zero2,mp,pipeline-zb,tp "
               "--balance 3,14 --out " + path("u"));
  ASSERT_EQ(r.code, 0) << r.err;
  const json doc = json::parse(read_file(path("u.json")));
  std::map<std::string, std::string> refused;
  std::set<std::string> priced;
  for (const json& g : doc["groups"])
    for (const json& row : g["rows"]) {
      const std::string s = row["strategy"].get<std::string>();
      if (row["devices"].get<int>() != 2) continue;
      if (row["feasible"].get<bool>()) priced.insert(s);
      else refused[s] = row.value("reason", "");
      // mp cut after layer 2 (enc1's pooling): enc1 [4,8,8] and the input [2,8,8] cross to the
      // second stage besides the pooled [4,4,4]; each layer's value forward, its gradient back
      // (the input's none), per sample.
      if (s == "mp") {
        EXPECT_DOUBLE_EQ(row["comm_bytes_per_step"].get<double>(),
                         4.0 * row["global_batch"].get<double>() * (2 * (64 + 256) + 128)) << "every skip priced";
      }
    }
  for (const char* s : {"ddp", "fsdp", "zero2", "mp", "pipeline-zb", "tp"}) EXPECT_TRUE(priced.count(s)) << s;
  EXPECT_TRUE(refused.empty()) << refused.begin()->first << ": " << refused.begin()->second;
  // The chunked schedules (four stages on two workers, by FLOPs): priced, their transfers too.
  r = parbench("project --profile " + path("unet.json") + " --machine " + fixture("machine.json") +
               " --from-profile-peak 0.5 --devices 2 --batch 2 --strategies pipeline-interleaved,pipeline-zbv --out " +
               path("c"));
  ASSERT_EQ(r.code, 0) << r.err;
  std::set<std::string> chunked;
  const json c = json::parse(read_file(path("c.json")));
  for (const json& g : c["groups"])
    for (const json& row : g["rows"]) {
      EXPECT_TRUE(row["feasible"].get<bool>()) << row.dump();
      EXPECT_GT(row.value("comm_bytes_per_step", 0.0), 0) << row.dump();
      chunked.insert(row["strategy"].get<std::string>());
    }
  EXPECT_EQ(chunked, (std::set<std::string>{"pipeline-interleaved", "pipeline-zbv"}));
  // An "inputs" naming a later layer is refused, naming the field.
  json bad = prof;
  bad["layers"][3]["inputs"] = json::array({5});
  write_file_atomic(path("bad_unet.json"), bad.dump());
  r = parbench("project --profile " + path("bad_unet.json") + " --machine " + fixture("machine.json"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("layers[3].inputs"), std::string::npos) << r.err;
}

TEST_F(ProjectCli, BadInputExitsTwoNamingIt) {
  json m = fixture_json("machine.json");
  m["overlap"] = "yes";
  write_file_atomic(path("m.json"), m.dump());
  test::Result r = parbench("project --profile " + fixture("uniform.json") + " --machine " + path("m.json"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("m.json: overlap: expected true or false"), std::string::npos) << r.err;
  r = parbench("project --profile " + fixture("uniform.json") + " --machine " + fixture("machine.json") + " --strategies sp");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--strategies"), std::string::npos) << r.err;
  r = parbench("project --profile " + path("missing.json") + " --machine " + fixture("machine.json"));
  EXPECT_EQ(r.code, 2) << r.err;
}

// A pipeline variant by run's name is that variant: the same rows as pipeline with its schedule
// and recompute chosen by flags; a name run does not register is refused.
TEST_F(ProjectCli, TakesPipelineVariantsByRunsName) {
  const std::string common = "project --profile " + fixture("uniform.json") + " --machine " + fixture("machine.json") +
                             " --from-profile-peak 0.5 --devices 2,4 --batch 4 --micro-batches 2,4 --format json";
  auto rows = [&](const std::string& flags, bool keep_recompute_only) {
    const test::Result r = parbench(common + " " + flags);
    EXPECT_EQ(r.code, 0) << flags << ": " << r.err;
    std::vector<json> out;
    if (r.code != 0) return out;
    const json doc = json::parse(r.out);
    for (const json& g : doc["groups"])
      for (const json& row : g["rows"]) {
        const json& o = row["options"];
        const bool recompute = std::find(o.begin(), o.end(), "recompute:1") != o.end();
        if (!keep_recompute_only || recompute) out.push_back(row);
      }
    return out;
  };
  const std::vector<json> named = rows("--strategies pipeline-1f1b", false);
  ASSERT_FALSE(named.empty());
  EXPECT_EQ(named, rows("--strategies pipeline --schedules 1f1b", false));
  for (const json& row : named) EXPECT_NE(row["label"].get<std::string>().find(", 1f1b"), std::string::npos) << row.dump();
  // The name fixes the schedule and recompute: --schedules and --recompute do not widen it.
  EXPECT_EQ(rows("--strategies pipeline-1f1b-recompute --schedules gpipe", false),
            rows("--strategies pipeline --schedules 1f1b --recompute", true));
  EXPECT_EQ(rows("--strategies pipeline-recompute", false), rows("--strategies pipeline --schedules gpipe --recompute", true));
  const test::Result bad = parbench(common + " --strategies pipeline-2f2b");
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("no projection model for 'pipeline-2f2b'"), std::string::npos) << bad.err;
}

TEST_F(ProjectCli, ValidateTimesPipelinesStageByStage) {
  // mp and pipeline run each stage as a Sequential of its own: validate times them so, once per
  // stage count, and keeps that profile with --save-profile.
  const test::Result r = validate_example("--strategies mp,pipeline --devices 2 --threads 1", 1);
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string said = "timing stage by stage (2 stages, 2 worker(s) at once)";
  const std::size_t first = r.err.find(said);
  ASSERT_NE(first, std::string::npos) << r.err;
  EXPECT_EQ(r.err.find(said, first + 1), std::string::npos) << "timed once for both strategies: " << r.err;
  const json v = json::parse(read_file(path("v.json")));
  ASSERT_EQ(v["rows"].size(), 2u) << v.dump();
  for (const json& row : v["rows"]) EXPECT_GT(row["predicted_s"].get<double>(), 0) << row.dump();
  const pj::Profile whole = pj::load_profile(path("prof-threads1-workers2.json"));
  const pj::Profile staged = pj::load_profile(path("prof-stages2-threads1-workers2.json"));
  EXPECT_EQ(staged.context.at("stages").get<int>(), 2);
  ASSERT_EQ(staged.layers.size(), whole.layers.size());
  EXPECT_EQ(staged.batches, whole.batches);
  // The net's first layer computes no input gradient; the second stage's first layer does, as
  // that stage's backward sends it to the first.
  const NetPlan plan = plan_net(load_net_json(example_net()));
  const auto ranges = split_stages(plan, 2, {}, "mp");
  ASSERT_EQ(ranges.size(), 2u);
  for (std::size_t b = 0; b < staged.batches.size(); ++b) {
    EXPECT_EQ(staged.layers[0].backward_data_s[b], 0.0);
    EXPECT_GT(staged.layers[static_cast<std::size_t>(ranges[1].first)].backward_data_s[b], 0.0);
    for (const pj::LayerProfile& l : staged.layers) EXPECT_GE(l.forward_s[b], 0.0);
  }
}

TEST_F(ProjectCli, ValidateTimesTpsOwnReluApartFromTheConvolution) {
  // tp runs every ReLU on its own, where the whole net's Sequential may run it inside the
  // convolution before it (oneDNN fuses the two) and time it as nothing: tp's layer-by-layer
  // profile gives each ReLU that feeds a split layer its own time; fsdp's keeps the whole net's.
  // Two workers: on one, tp and fsdp run the whole net as one Sequential (their plans say so), and
  // are timed as such.
  const test::Result r = validate_example("--strategies tp,fsdp --devices 2", 3);
  ASSERT_EQ(r.code, 0) << r.err;
  const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency() / 2));
  const pj::Profile whole = pj::load_profile(path(fmt::format("prof-threads{}-workers2.json", threads)));
  const pj::Profile tp = pj::load_profile(path(fmt::format("prof-tp2-threads{}-workers2.json", threads)));
  const pj::Profile fsdp = pj::load_profile(path(fmt::format("prof-layers1-threads{}-workers2.json", threads)));
  EXPECT_TRUE(tp.context.at("tp_relu_and_copies").get<bool>());
  EXPECT_FALSE(fsdp.context.at("tp_relu_and_copies").get<bool>());
  ASSERT_EQ(tp.layers.size(), whole.layers.size());
  int fed = 0;
  for (std::size_t i = 0; i + 1 < tp.layers.size(); ++i) {
    if (tp.layers[i].type != "relu") continue;
    for (std::size_t b = 0; b < tp.batches.size(); ++b) {
      EXPECT_EQ(fsdp.layers[i].forward_s[b], whole.layers[i].forward_s[b]) << "layer " << i;
      const std::string next = tp.layers[i + 1].type;
      if (next == "conv2d" || next == "linear") {
        EXPECT_GT(tp.layers[i].forward_s[b], 0.0) << "layer " << i;
        ++fed;
      } else {
        EXPECT_EQ(tp.layers[i].forward_s[b], whole.layers[i].forward_s[b]) << "layer " << i;  // before the flatten
      }
    }
  }
  EXPECT_EQ(fed, 3 * static_cast<int>(tp.batches.size()));  // the ReLUs before conv 2, conv 3 and the last linear
}

TEST_F(ProjectCli, ValidateTimesAtMostAsManyWorkersSideBySideAsCores) {
  // Four one-thread workers: timed side by side by as many as the cores run at once (the
  // simulator shares the cores beyond); two workers, by two where there are two cores.
  test::Result r = parbench("run --workload linear --strategies ddp --devices 2,4 --batch 2 --iterations 3 --warmup 1 --out " +
                            path("run"));
  ASSERT_EQ(r.code, 0) << r.err;
  r = parbench("project --validate " + path("run/results.json") + " --machine " +
               (test::source_dir() / "machines/this_cpu.json").string() +
               " --reps 1 --profile-rounds 1 --out " + path("v") + " --save-profile " + path("prof"));
  ASSERT_EQ(r.code, 0) << r.err;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (const int n : {2, 4}) {
    const int t = std::max(1, cores / n), k = std::min(n, std::max(1, cores / t));  // run's threads per worker
    EXPECT_TRUE(std::filesystem::exists(path(fmt::format("prof-threads{}-workers{}.json", t, k)))) << n << " on " << cores;
    if (k < n) {
      EXPECT_FALSE(std::filesystem::exists(path(fmt::format("prof-threads{}-workers{}.json", t, n)))) << n << " on " << cores;
    }
  }
  const json v = json::parse(read_file(path("v.json")));
  EXPECT_EQ(v["rows"].size(), 2u);
  // The saved profiles predict the run again without timing anything: the same predictions.
  r = parbench("project --validate " + path("run/results.json") + " --machine " +
               (test::source_dir() / "machines/this_cpu.json").string() + " --load-profile " + path("prof") + " --out " + path("again"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err.find("timing"), std::string::npos) << r.err;
  const json again = json::parse(read_file(path("again.json")));
  ASSERT_EQ(again["rows"].size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) EXPECT_EQ(again["rows"][i]["predicted_s"], v["rows"][i]["predicted_s"]) << i;
  const std::string validate = "project --validate " + path("run/results.json") + " --machine " +
                               (test::source_dir() / "machines/this_cpu.json").string();
  r = parbench(validate + " --load-profile " + path("nothing"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--load-profile"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("nothing-threadsT-workersK.json"), std::string::npos) << r.err;
  r = parbench(validate + " --load-profile " + path("prof") + " --profile " + path("prof-threads1-workers2.json"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--profile does not apply"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace pb
