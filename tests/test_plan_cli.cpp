// parbench plan: its CSV and JSON (one row / entry per action; the JSON reads back as the same
// plan), the text's buffers and memory per worker, --check on a written file and on a broken one,
// and its flag errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "plan/memory.h"
#include "plan/plan.h"
#include "strategies/plan_gen.h"
#include "tests/cli_fixture.h"
#include "workloads/workload.h"

namespace pb {
namespace {

using ::testing::HasSubstr;

class PlanCli : public test::CliTest {
 protected:
  PlanCli() : CliTest("parbench_plan_cli_") {}
};

constexpr const char* kNet = "--image 8 --width 0.1875 --batch 6";

TEST_F(PlanCli, CsvHasOneRowPerActionAndJsonParses) {
  const test::Result js = parbench(fmt::format("plan --strategy dp2xpp2-1f1b --micro-batches 3 {} --format json", kNet));
  ASSERT_EQ(js.code, 0) << js.err;
  const nlohmann::json j = nlohmann::json::parse(js.out);
  EXPECT_EQ(j.at("strategy"), "dp2xpp2-1f1b");
  EXPECT_EQ(j.at("workers"), 4);
  const Plan p = plan_from_json(js.out, "stdout");
  std::size_t actions = 0;
  for (const auto& list : p.actions) actions += list.size();
  EXPECT_EQ(j.at("actions").size(), actions);
  const test::Result csv = parbench(fmt::format("plan --strategy dp2xpp2-1f1b --micro-batches 3 {} --format csv", kNet));
  ASSERT_EQ(csv.code, 0) << csv.err;
  std::vector<std::string> rows;
  std::istringstream in(csv.out);
  for (std::string line; std::getline(in, line);) rows.push_back(line);
  ASSERT_EQ(rows.size(), actions + 1);  // the header, then one row per action
  EXPECT_EQ(rows[0].rfind("worker,id,kind,lane,", 0), 0u);
  // Every worker's all-reduce of its stage's gradients, over its stage group, with its bytes.
  int all_reduces = 0;
  for (const std::string& r : rows)
    if (r.find(",collective,coll,") != std::string::npos && r.find(",stage ") != std::string::npos &&
        r.find(",all_reduce,") != std::string::npos)
      ++all_reduces;
  EXPECT_EQ(all_reduces, 4);
}

// The text lists each worker's buffers at their sizes and ends with what they add up to per
// worker: plan/memory.h's count of the same plan.
TEST_F(PlanCli, TextSaysWhatEachWorkerKeepsAndItsPeak) {
  const test::Result text = parbench(fmt::format("plan --strategy pipeline-zb --devices 2 --micro-batches 3 {}", kNet));
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr("\n  keeps params "));
  EXPECT_THAT(text.out, HasSubstr(", keep[0] "));  // ZB-H1's kept output gradients on the second stage
  WorkloadOptions wo;
  wo.image = 8, wo.width = 0.1875;
  const NetPlan net = plan_net(resolve_workload("great_net", wo));
  StrategyOptions o;
  o.devices = 2, o.micro_batches = 3;
  const MemoryEstimate m = plan_memory(make_plan("pipeline-zb", net, o, 6), net);
  ASSERT_EQ(m.per_worker.size(), 2u);
  EXPECT_THAT(text.out, HasSubstr(fmt::format("memory per worker (its buffers, and the im2col bound for the library's workspace): "
                                              "worker 0 {}, worker 1 {}\n",
                                              bytes_str(m.per_worker[0]), bytes_str(m.per_worker[1]))));
}

// Under --precision bf16 a pipeline's transfers are bf16 in every form: CSV's dtype column, the
// text, and JSON read back.
TEST_F(PlanCli, Bf16PipelineTransfersInCsvTextAndJson) {
  const std::string args = fmt::format("plan --strategy pipeline --devices 2 --micro-batches 2 {} --precision bf16", kNet);
  const test::Result csv = parbench(args + " --format csv"), text = parbench(args), js = parbench(args + " --format json");
  ASSERT_EQ(csv.code, 0) << csv.err;
  ASSERT_EQ(js.code, 0) << js.err;
  std::istringstream in(csv.out);
  int transfers = 0;
  for (std::string line; std::getline(in, line);)
    if (line.find(",send,") != std::string::npos || line.find(",recv,") != std::string::npos) {
      ++transfers;
      EXPECT_EQ(line.substr(line.size() - 5), ",bf16") << line;
    }
  EXPECT_EQ(transfers, 8);  // per micro-batch: an activation and a gradient, each sent and received
  EXPECT_THAT(text.out, HasSubstr("values bf16 (start)"));
  const Plan p = plan_from_json(js.out, "stdout");
  for (const auto& list : p.actions)
    for (const Action& a : list)
      if (a.kind == ActionKind::Send) {
        EXPECT_EQ(a.dtype, DType::Bf16);
        EXPECT_EQ(a.bytes, 2 * a.count);
      }
}

TEST_F(PlanCli, CheckAcceptsAWrittenPlanAndRefusesABrokenOne) {
  const std::string file = path("plan.json");
  ASSERT_EQ(parbench(fmt::format("plan --strategy mp --devices 2 {} --format json --out {}", kNet, file)).code, 0);
  const test::Result ok = parbench("plan --check " + file + " --format csv");
  EXPECT_EQ(ok.code, 0) << ok.err;
  // Worker 1's first receive made a copy: the send it matched has no receive.
  Plan p = read_plan_file(file);
  auto& list = p.actions[1];
  for (std::size_t i = 0; i < list.size(); ++i)
    if (list[i].kind == ActionKind::Recv) {
      list[i].kind = ActionKind::Copy, list[i].lane = PlanLane::Compute, list[i].async = false;
      break;
    }
  const std::string broken = path("broken.json");
  std::ofstream(broken) << plan_to_json(p);
  const test::Result bad = parbench("plan --check " + broken);
  EXPECT_EQ(bad.code, 1);
  EXPECT_THAT(bad.err, HasSubstr("refused"));
  EXPECT_THAT(bad.err, HasSubstr("worker 0 action"));
  EXPECT_THAT(bad.err, HasSubstr("worker 1 has not started the matching receive"));
}

TEST_F(PlanCli, BadFlagsAreNamed) {
  const test::Result fmt_bad = parbench(fmt::format("plan --strategy ddp --devices 2 {} --format xml", kNet));
  EXPECT_EQ(fmt_bad.code, 2);
  EXPECT_THAT(fmt_bad.err, HasSubstr("--format expects text, csv or json, got 'xml'"));
  const test::Result name = parbench(fmt::format("plan --strategy nope {}", kNet));
  EXPECT_EQ(name.code, 2);
  EXPECT_THAT(name.err, HasSubstr("unknown strategy 'nope'"));
  const test::Result missing = parbench("plan --check " + path("none.json"));
  EXPECT_EQ(missing.code, 2);
  EXPECT_THAT(missing.err, HasSubstr("none.json"));
  const test::Result help = parbench("plan --help");
  EXPECT_EQ(help.code, 0);
  EXPECT_THAT(help.out, HasSubstr("--format"));
}

}  // namespace
}  // namespace pb
