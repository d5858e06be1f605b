// parbench project --validate and --combine end to end against measured runs.
#include "tests/test_projection_support.h"

namespace pb {
namespace {

using namespace projection_test;

TEST_F(ProjectCli, ValidateComparesEveryMeasuredConfiguration) {
  test::Result r = parbench("run --workload linear --strategies regular,dp,ddp,mp,pipeline,tp --devices 1,2 --all-at-one-device --batch 2 --iterations 3 --warmup 1 --out " +
                                path("run"));
  ASSERT_EQ(r.code, 0) << r.err;
  r = parbench("calibrate --ranks 2,4 --sizes 64B,4 --reps 2 --pools 2 --out " + path("cpu.json"));
  ASSERT_EQ(r.code, 0) << r.err;
  const pj::Machine cpu = pj::load_machine(path("cpu.json"), unit_classes());
  for (const char* c : {"all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "send_recv"})
    EXPECT_TRUE(cpu.intra_node.count(c)) << c;
  // Each collective fitted at 2 and at 4 workers alone besides over both, and those times kept to be read
  // off (64 B and 4 KiB, made non-decreasing); send/recv is timed at 2 only.
  for (const char* c : {"all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "send_recv"}) {
    const auto& at = cpu.intra_node.at(c).begin()->second.at_ranks;
    EXPECT_EQ(at.size(), std::string(c) == "send_recv" ? 1u : 2u) << c;
    for (const auto& [n, f] : at) {
      std::vector<pj::Sample> timed;
      for (const json& s : cpu.calibration.at(c))
        if (s.at("ranks").get<int>() == n) timed.push_back({n, s.at("bytes").get<double>(), s.at("seconds").get<double>()});
      ASSERT_EQ(timed.size(), 2u) << c << " x" << n;
      EXPECT_EQ(f.points, pj::monotone_points(timed)) << c << " x" << n;
      ASSERT_EQ(f.points.size(), 2u) << c << " x" << n;
      EXPECT_EQ(f.points[0].first, 64.0);
      EXPECT_EQ(f.points[1].first, 4096.0);
      EXPECT_LE(f.points[0].second, f.points[1].second) << c << " x" << n;
      // Small messages timed with the last worker late as well (not send/recv's pairs).
      EXPECT_EQ(f.late_points.size(), std::string(c) == "send_recv" ? 0u : 2u) << c << " x" << n;
    }
  }
  // Microseconds below, not a scheduler tick: where calibrate found the machine quiet, as it records.
  const double steal = cpu.calibration.value("steal_fraction", 0.0), others = cpu.calibration.value("others_fraction", 0.0);
  const bool quiet = steal <= pb::kStealWarning && others <= pb::kOthersWarning;
  if (!quiet)
    std::cerr << "note: calibrate recorded steal " << steal << " and other processes " << others
              << " of the CPUs' time: its lags are not bounded here\n";
  // The other workers' start after worker 0, per count, within the dispatch that holds it.
  ASSERT_EQ(cpu.worker_start_at_s.size(), 2u);
  for (const auto& [n, lag] : cpu.worker_start_at_s) {
    EXPECT_GT(lag, 0) << n;
    if (quiet) {
      EXPECT_LT(lag, 1e-3) << n;
    }
  }
  EXPECT_TRUE(cpu.intra_node.at("send_recv").at("direct").at_ranks.count(2));
  // How long after its receiver a blocking send's sender goes on.
  EXPECT_GT(cpu.sender_trails_s, 0);
  if (quiet) {
    EXPECT_LT(cpu.sender_trails_s, 1e-3);
  }
  // Where 4 one-thread workers outnumber the cores, their pairs meeting at once were timed too,
  // consecutive and 2 apart, and fitted; on 4 or more cores there is no such layout.
  const bool outnumbered = std::thread::hardware_concurrency() < 4;
  for (const char* c : {"all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "send_recv"}) {
    const auto& groups = cpu.intra_node.at(c).begin()->second.in_groups;
    EXPECT_EQ(groups.size(), outnumbered ? 2u : 0u) << c;
    if (!outnumbered) continue;
    for (const int stride : {1, 2}) {
      ASSERT_TRUE(groups.count({2, 4, stride})) << c << " " << stride;
      EXPECT_GT(groups.at({2, 4, stride}).bus_bytes_per_s, 0) << c;
      EXPECT_EQ(cpu.calibration.at("groups").at(c).at(fmt::format("2 of 4 stride {}", stride)).size(), 2u) << c;  // --sizes 64B,4
      EXPECT_EQ(groups.at({2, 4, stride}).points.size(), 2u) << c;
    }
  }
  // The workers arrived together at every timed call (the default), as recorded; and what share of
  // the machine's time other processes took meanwhile.
  EXPECT_DOUBLE_EQ(cpu.calibration.at("skew_s").get<double>(), 0.0);
  if (std::filesystem::exists("/proc/stat")) {
    const double others = cpu.calibration.at("others_fraction").get<double>();
    EXPECT_GE(others, 0.0);
    EXPECT_LE(others, 1.0);
  }
  // The cost of a plan action: the median of its rounds (ddp at one device against regular), never negative.
  std::vector<double> rounds = cpu.calibration.at("action_overhead_rounds_s").get<std::vector<double>>();
  ASSERT_EQ(rounds.size(), 5u);
  std::sort(rounds.begin(), rounds.end());
  EXPECT_DOUBLE_EQ(cpu.action_overhead_s, std::max(0.0, rounds[2]));
  // The step overhead: the median of the recorded rounds (each the step less its predicted work), never negative.
  rounds = cpu.calibration.at("step_overhead_rounds_s").get<std::vector<double>>();
  ASSERT_EQ(rounds.size(), 5u);
  std::sort(rounds.begin(), rounds.end());
  EXPECT_DOUBLE_EQ(cpu.step_overhead_s, std::max(0.0, rounds[2]));
  // fsdp's and zero2's bookkeeping per unit likewise: the median of their rounds, never negative.
  for (const char* s : {"fsdp", "zero2"}) {
    rounds = cpu.calibration.at("unit_overhead_rounds_s").at(s).get<std::vector<double>>();
    ASSERT_EQ(rounds.size(), 5u) << s;
    std::sort(rounds.begin(), rounds.end());
    ASSERT_TRUE(cpu.unit_overhead_s.count(s)) << s;
    EXPECT_DOUBLE_EQ(cpu.unit_overhead_s.at(s), std::max(0.0, rounds[2])) << s;
  }
  // Each further worker count's overhead makes ddp's predicted step of the MLP meet its measured
  // one, round by round as recorded: their differences' median about 0, or below it where the
  // overhead stopped at 0.
  ASSERT_EQ(cpu.worker_overhead_at_s.size(), 2u);
  for (const int k : {2, 4}) {
    const auto measured = cpu.calibration.at("ddp_step_rounds_s").at(std::to_string(k)).get<std::vector<double>>();
    const auto predicted = cpu.calibration.at("ddp_predicted_rounds_s").at(std::to_string(k)).get<std::vector<double>>();
    ASSERT_EQ(measured.size(), 5u) << k;
    ASSERT_EQ(predicted.size(), 5u) << k;
    std::vector<double> diff;
    for (std::size_t i = 0; i < measured.size(); ++i) diff.push_back(measured[i] - predicted[i]);
    const double med = pb::reports::median(diff), step = pb::reports::median(measured);
    EXPECT_GE(cpu.worker_overhead_at_s.at(k), 0) << k;
    if (cpu.worker_overhead_at_s.at(k) > 0) EXPECT_LT(std::abs(med), 0.05 * step) << k;
    else EXPECT_LE(med, 0.05 * step) << k;
  }
  for (const std::string bad : {"--skew-us -5", "--pools 0", "--sizes 64B,1,64b", "--sizes 4", "--sizes 1,2x", "--sizes 8B,1"}) {
    r = parbench("calibrate " + bad + " --out " + path("never.json"));
    EXPECT_EQ(r.code, 2) << bad;
    EXPECT_NE(r.err.find(bad.substr(0, bad.find(' '))), std::string::npos) << r.err;
    EXPECT_FALSE(std::filesystem::exists(path("never.json")));
  }
  r = parbench("calibrate --sizes 8B,1 --out " + path("never.json"));  // 2 floats: no piece for 4 ranks
  EXPECT_NE(r.err.find("at least one per rank (4 ranks: 16 B or more"), std::string::npos) << r.err;
  r = parbench("project --validate " + path("run/results.json") + " --machine " + path("cpu.json") +
               " --reps 1 --profile-rounds 1 --out " + path("v") + " --save-profile " + path("prof"));
  ASSERT_EQ(r.code, 0) << r.err;
  // Workers timed side by side go at the slowest one's pace, a factor >= 1 per batch; one alone at its own.
  for (const int k : {1, 2}) {
    const pj::Profile p = pj::load_profile(path(fmt::format("prof-threads1-workers{}.json", k)));
    ASSERT_EQ(p.concurrent, k);
    const std::vector<double> f = p.context.at("slowest_worker_factor").get<std::vector<double>>();
    ASSERT_EQ(f.size(), p.batches.size());
    for (double x : f) {
      if (k == 1) EXPECT_DOUBLE_EQ(x, 1.0);
      else EXPECT_GE(x, 1.0);
    }
  }
  const json v = json::parse(read_file(path("v.json")));
  // Every strategy at 1, dp, ddp and tp at 2: mp and pipeline cannot split the one-layer net over 2 workers (the
  // run reports those as errors, and validate leaves them out). tp at 2 is predicted from its timed channel slices.
  ASSERT_EQ(v["rows"].size(), 9u);
  EXPECT_NE(r.err.find("timing layer by layer (2 channel slice(s)"), std::string::npos) << r.err;
  double mean = 0, worst = 0;
  for (const json& row : v["rows"]) {
    const double e = (row["predicted_s"].get<double>() - row["measured_s"].get<double>()) / row["measured_s"].get<double>();
    EXPECT_NEAR(row["error"].get<double>(), e, 1e-12);
    mean += std::abs(e) / v["rows"].size();
    worst = std::max(worst, std::abs(e));
  }
  EXPECT_NEAR(v["mean_abs_error"].get<double>(), mean, 1e-12);
  EXPECT_NEAR(v["worst_abs_error"].get<double>(), worst, 1e-12);
  {
    // The one-device regular, dp, ddp and mp rows: their measured spread, as printed.
    double lo = 1e9, hi = 0;
    for (const json& row : v["rows"]) {
      const std::string n = row["name"];
      for (const char* s : {"linear/regular/devices:1/", "linear/dp/devices:1/", "linear/ddp/devices:1/", "linear/mp/devices:1/"})
        if (n.find(s) == 0) lo = std::min(lo, row["measured_s"].get<double>()), hi = std::max(hi, row["measured_s"].get<double>());
    }
    EXPECT_NEAR(v["one_device_spread"].get<double>(), hi / lo - 1, 1e-9);
    if (hi > lo) {
      EXPECT_NE(r.out.find("Repeatability: regular, dp, ddp and mp on one device"), std::string::npos) << r.out;
    }
  }
  // Rows of the dp x pp hybrid are matched by their run names (dp<D>xpp<P>): ddp's rows renamed
  // to dp2xpp2 on 4 devices, predicted from a 4-layer profile.
  {
    std::string text = read_file(path("run/results.json"));
    for (std::size_t at; (at = text.find("linear/ddp/devices:2/")) != std::string::npos;)
      text.replace(at, 21, "linear/dp2xpp2/devices:4/");
    write_file_atomic(path("hybrid.json"), text);
    r = parbench("project --validate " + path("hybrid.json") + " --machine " + path("cpu.json") + " --profile " +
                 fixture("uniform.json") + " --out " + path("h"));
    ASSERT_EQ(r.code, 0) << r.err;
    const json h = json::parse(read_file(path("h.json")));
    int hybrid_rows = 0;
    for (const json& row : h["rows"])
      if (row["name"].get<std::string>().find("/dp2xpp2/devices:4/") != std::string::npos) {
        ++hybrid_rows;
        EXPECT_GT(row["predicted_s"].get<double>(), 0);
      }
    EXPECT_EQ(hybrid_rows, 1) << h.dump();
  }
  // ddp's first bucket as the run recorded it (context first_bucket_mb): a first bucket of one
  // layer (592 B) puts two all-reduces on the critical path where the default 1 MiB put one.
  {
    json run = json::parse(read_file(path("run/results.json")));
    auto ddp_predicted = [&](const std::string& first_mb) {
      run["context"]["first_bucket_mb"] = first_mb;
      write_file_atomic(path("first_in.json"), run.dump());
      const test::Result q = parbench("project --validate " + path("first_in.json") + " --machine " + path("cpu.json") +
                                      " --profile " + fixture("uniform.json") + " --out " + path("first_out"));
      EXPECT_EQ(q.code, 0) << q.err;
      const json out = json::parse(read_file(path("first_out.json")));
      for (const json& row : out["rows"])
        if (row["name"].get<std::string>().find("linear/ddp/devices:2/") == 0) return row["predicted_s"].get<double>();
      ADD_FAILURE() << "no ddp row";
      return 0.0;
    };
    EXPECT_GT(ddp_predicted("0.0005"), ddp_predicted("1"));
    run["context"]["balance"] = "1,x";  // read too: bad input naming the key
    write_file_atomic(path("bad_balance.json"), run.dump());
    r = parbench("project --validate " + path("bad_balance.json") + " --machine " + path("cpu.json") + " --profile " +
                 fixture("uniform.json"));
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.err.find("context \"balance\""), std::string::npos) << r.err;
  }
  // A count in the run's context that an int cannot hold, or not whole: bad input naming the key.
  for (const char* bad : {"1e300", "2.5"}) {
    json run = json::parse(read_file(path("run/results.json")));
    run["context"]["world_size"] = bad;
    write_file_atomic(path("bad_world.json"), run.dump());
    r = parbench("project --validate " + path("bad_world.json") + " --machine " + path("cpu.json") + " --profile " +
                 fixture("uniform.json") + " --out " + path("never"));
    EXPECT_EQ(r.code, 2) << bad;
    EXPECT_NE(r.err.find("context \"world_size\" is \"" + std::string(bad) + "\", expected a whole number"), std::string::npos) << r.err;
    EXPECT_FALSE(std::filesystem::exists(path("never.json")));
  }
  // --anchor: every prediction x (regular on one device: measured / predicted), that row left out.
  {
    const std::string common = "project --validate " + path("run/results.json") + " --machine " + path("cpu.json") +
                               " --profile " + fixture("uniform.json");
    ASSERT_EQ(parbench(common + " --out " + path("plain")).code, 0);
    r = parbench(common + " --anchor --out " + path("anchored"));
    ASSERT_EQ(r.code, 0) << r.err;
    const json plain = json::parse(read_file(path("plain.json"))), anchored = json::parse(read_file(path("anchored.json")));
    std::map<std::string, double> predicted;
    double scale = 0;
    for (const json& row : plain["rows"]) {
      predicted[row["name"]] = row["predicted_s"];
      if (row["name"].get<std::string>().find("linear/regular/devices:1/") == 0)
        scale = row["measured_s"].get<double>() / row["predicted_s"].get<double>();
    }
    ASSERT_GT(scale, 0);
    EXPECT_NEAR(anchored["anchor_scale"].get<double>(), scale, 1e-9 * scale);
    ASSERT_EQ(anchored["rows"].size(), plain["rows"].size() - 1);
    for (const json& row : anchored["rows"]) {
      EXPECT_EQ(row["name"].get<std::string>().find("linear/regular/devices:1/"), std::string::npos);
      EXPECT_NEAR(row["predicted_s"].get<double>(), predicted.at(row["name"]) * scale, 1e-9 * predicted.at(row["name"]));
    }
    EXPECT_NE(read_file(path("anchored.md")).find("| anchor |"), std::string::npos);
    // Nothing to anchor to: bad input naming the flag.
    std::string text = read_file(path("run/results.json"));
    for (std::size_t at; (at = text.find("linear/regular/")) != std::string::npos;) text.replace(at, 15, "linear/fsdp/");
    write_file_atomic(path("no_regular.json"), text);
    r = parbench("project --validate " + path("no_regular.json") + " --machine " + path("cpu.json") + " --profile " +
                 fixture("uniform.json") + " --anchor");
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.err.find("--anchor"), std::string::npos) << r.err;
  }
  // Every row carries the run's timed iterations; their median is the measured time.
  for (const json& row : v["rows"]) {
    std::vector<double> t = row["measured_times_s"].get<std::vector<double>>();
    ASSERT_EQ(t.size(), 3u) << row.dump();  // 3 iterations, 1 repetition
    EXPECT_NEAR(reports::median(t), row["measured_s"].get<double>(), 1e-12);
  }
  // --combine pools validations as pairs: measured = the median of the rounds' measured times,
  // predicted = that x the median of the rounds' predicted / measured; a configuration in one
  // round only is pooled from that one.
  {
    json other = v;  // a second round: the same rows, but the one below
    const std::string once = other["rows"][0]["name"];  // in one round only
    other["rows"].erase(other["rows"].begin());
    for (json& row : other["rows"]) {  // measured 1.5x slower, predicted 1.2x
      for (json& t : row["measured_times_s"]) t = t.get<double>() * 1.5;
      row["measured_s"] = row["measured_s"].get<double>() * 1.5;
      row["predicted_s"] = row["predicted_s"].get<double>() * 1.2;
    }
    write_file_atomic(path("other.json"), other.dump());
    r = parbench("project --combine " + path("v.json") + "," + path("other.json") + " --out " + path("pooled"));
    ASSERT_EQ(r.code, 0) << r.err;
    const json pooled = json::parse(read_file(path("pooled.json")));
    EXPECT_EQ(pooled["rounds"].get<int>(), 2);
    std::map<std::string, std::vector<const json*>> by_name;
    for (const json* f : std::initializer_list<const json*>{&v, &other})
      for (const json& row : (*f)["rows"]) by_name[row["name"]].push_back(&row);
    ASSERT_EQ(pooled["rows"].size(), by_name.size());
    double mean = 0;
    for (const json& row : pooled["rows"]) {
      std::vector<double> measured, ratio;
      for (const json* src : by_name.at(row["name"])) {
        measured.push_back((*src)["measured_s"]);
        ratio.push_back((*src)["predicted_s"].get<double>() / (*src)["measured_s"].get<double>());
      }
      const double m = reports::median(measured);
      EXPECT_NEAR(row["measured_s"].get<double>(), m, 1e-12 * m) << row.dump();
      EXPECT_NEAR(row["predicted_s"].get<double>(), m * reports::median(ratio), 1e-12 * m) << row.dump();
      if (measured.size() == 2) {  // (1 + 1.2 / 1.5) / 2 of the first round's ratio, at 1.25x its measured time
        EXPECT_NEAR(row["error"].get<double>() + 1, 0.9 * ratio[0], 1e-9) << row.dump();
        EXPECT_NEAR(row["measured_s"].get<double>(), 1.25 * measured[0], 1e-12 * m) << row.dump();
      }
      const double e = row["predicted_s"].get<double>() / row["measured_s"].get<double>() - 1;
      EXPECT_NEAR(row["error"].get<double>(), e, 1e-12);
      mean += std::abs(e) / pooled["rows"].size();
    }
    EXPECT_NEAR(pooled["mean_abs_error"].get<double>(), mean, 1e-12);
    EXPECT_NE(r.out.find("Not in every round"), std::string::npos) << r.out;
    ASSERT_EQ(by_name.at(once).size(), 1u);
    EXPECT_NE(r.out.find(once + " (1 of 2)"), std::string::npos) << r.out;
    // Bad input: one file, a flag that does not apply, a row without its prediction.
    r = parbench("project --combine " + path("v.json"));
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.err.find("--combine"), std::string::npos) << r.err;
    r = parbench("project --combine " + path("v.json") + "," + path("other.json") + " --machine " + path("cpu.json"));
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.err.find("--machine"), std::string::npos) << r.err;
    other["rows"][0].erase("predicted_s");
    write_file_atomic(path("broken.json"), other.dump());
    r = parbench("project --combine " + path("v.json") + "," + path("broken.json") + " --out " + path("never"));
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.err.find("broken.json: rows[0].predicted_s"), std::string::npos) << r.err;
    EXPECT_FALSE(std::filesystem::exists(path("never.json")));
  }
  // A run whose context cannot be read is bad input naming the key.
  json run = json::parse(read_file(path("run/results.json")));
  run["context"]["bucket_mb"] = "lots";
  write_file_atomic(path("bad.json"), run.dump());
  r = parbench("project --validate " + path("bad.json") + " --machine " + path("cpu.json"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("\"bucket_mb\" is \"lots\""), std::string::npos) << r.err;
}

// A run with --trace: each configuration's traced step against its prediction, action by action
// (each span carries its plan action's id), per kind and the actions furthest off.
TEST_F(ProjectCli, ValidateComparesTracedStepsActionByAction) {
  test::Result r = parbench("run --workload " + example_net() + " --strategies ddp,pipeline-1f1b --devices 2 --batch 2 "
                            "--iterations 2 --warmup 1 --trace --out " + path("run"));
  ASSERT_EQ(r.code, 0) << r.err;
  write_cpu_profile(path("p.json"), resolve_workload(example_net(), WorkloadOptions{}));
  const std::string cmd = "project --validate " + path("run/results.json") + " --machine " +
                          (test::source_dir() / "machines/this_cpu.json").string() + " --profile " + path("p.json");
  r = parbench(cmd + " --out " + path("v"));
  ASSERT_EQ(r.code, 0) << r.err;
  const json v = json::parse(read_file(path("v.json")));
  ASSERT_TRUE(v.contains("per_action")) << v.dump();
  ASSERT_EQ(v["per_action"].size(), 2u);
  for (const json& e : v["per_action"]) {
    for (const char* kind : {"forward", "backward (weights + data)", "optimizer"}) {
      ASSERT_TRUE(e["kinds"].contains(kind)) << e.dump();
      EXPECT_GT(e["kinds"][kind]["measured_s"].get<double>(), 0) << kind;
      EXPECT_GT(e["kinds"][kind]["predicted_s"].get<double>(), 0) << kind;
    }
    ASSERT_FALSE(e["worst"].empty());
    EXPECT_EQ(e["worst"][0]["action"].get<std::string>().rfind("worker ", 0), 0u) << e.dump();
  }
  EXPECT_NE(r.out.find("### Per action: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Furthest off:"), std::string::npos);
  // Without the traces: no per-action part.
  for (const auto& entry : std::filesystem::directory_iterator(path("run")))
    if (entry.path().filename().string().rfind("trace-", 0) == 0) std::filesystem::remove(entry.path());
  r = parbench(cmd + " --out " + path("w"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_FALSE(json::parse(read_file(path("w.json"))).contains("per_action"));
  EXPECT_EQ(r.out.find("Per action"), std::string::npos);
}

}  // namespace
}  // namespace pb
