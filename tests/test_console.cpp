// The run's console line per configuration (reports/console.h) and a row's identity in the CSV
// and JSON (reports/schema.h figure::benchmark, workload_params, run): rows of two runs that
// differ only in the workload's parameters stay apart.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "reports/console.h"
#include "reports/gbjson.h"
#include "reports/schema.h"
#include "reports/table.h"

namespace pb::reports {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

// One repetition per benchmark, as `parbench run` writes it by default.
RunFile record(const std::string& source, const std::string& workload_params,
               const std::vector<std::pair<std::string, double>>& benches, const std::map<std::string, double>& counters) {
  json doc;
  doc["context"] = {{"scaling", "weak"}, {"precision", "fp32"}, {"device_kind", "cpu"}, {"workload_params", workload_params}};
  doc["benchmarks"] = json::array();
  int family = 0;
  for (const auto& [name, ms] : benches) {
    json j = {{"name", name + "/iterations:10/process_time/manual_time"}, {"family_index", family++},
              {"per_family_instance_index", 0}, {"run_name", name + "/iterations:10/process_time/manual_time"},
              {"run_type", "iteration"}, {"repetitions", 1}, {"repetition_index", 0}, {"threads", 1},
              {"iterations", 10}, {"real_time", ms}, {"cpu_time", ms}, {"time_unit", "ms"}};
    for (const auto& [k, v] : counters) j[k] = v;
    doc["benchmarks"].push_back(j);
  }
  return parse_run_json(doc.dump(), source);
}

// RFC 4180 cells of one line: quoted cells may hold commas and doubled quotes.
std::vector<std::string> csv_cells(const std::string& line) {
  std::vector<std::string> out(1);
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char ch = line[i];
    if (quoted && ch == '"' && i + 1 < line.size() && line[i + 1] == '"') out.back() += '"', ++i;
    else if (ch == '"') quoted = !quoted;
    else if (ch == ',' && !quoted) out.emplace_back();
    else out.back() += ch;
  }
  return out;
}

TEST(ReportIdentity, TwoRunsDifferingOnlyInImageGiveDistinguishableRows) {
  // The issue: report run1/results.json run8/results.json --format csv gave the same key columns.
  const std::map<std::string, double> c = {{"global_batch", 1}};
  const RunFile a = record("run1/results.json", "image 16, width 0.5", {{"great_net/image:16/width:0.5/regular/devices:1/batch:1", 4}}, c);
  const RunFile b = record("run8/results.json", "image 8, width 0.5", {{"great_net/image:8/width:0.5/regular/devices:1/batch:1", 2}}, c);
  const Report rep = build_report({a, b});
  const std::string csv = report_csv(rep);
  std::vector<std::string> lines;
  std::stringstream ss(csv);
  for (std::string l; std::getline(ss, l);) lines.push_back(l);
  ASSERT_EQ(lines.size(), 3u) << csv;
  const std::vector<std::string> head = csv_cells(lines[0]);
  auto col = [&](const char* name) {
    const auto it = std::find(head.begin(), head.end(), name);
    EXPECT_NE(it, head.end()) << "no column " << name << " in " << lines[0];
    return static_cast<std::size_t>(it - head.begin());
  };
  const std::size_t bench = col(schema::figure::benchmark.name), params = col(schema::figure::workload_params.name),
                    run = col(schema::figure::run.name);
  std::vector<std::string> r1 = csv_cells(lines[1]), r2 = csv_cells(lines[2]);
  ASSERT_EQ(r1.size(), head.size());
  ASSERT_EQ(r2.size(), head.size());
  EXPECT_EQ(r1[bench], "great_net/image:16/width:0.5/regular/devices:1/batch:1");
  EXPECT_EQ(r2[bench], "great_net/image:8/width:0.5/regular/devices:1/batch:1");
  EXPECT_EQ(r1[params], "image 16, width 0.5");
  EXPECT_EQ(r2[params], "image 8, width 0.5");
  EXPECT_EQ(r1[run], "run1/results.json");
  EXPECT_EQ(r2[run], "run8/results.json");

  const json js = json::parse(report_json(rep));
  ASSERT_EQ(js["groups"].size(), 2u);
  EXPECT_EQ(js["groups"][0]["rows"][0][schema::figure::benchmark.name], "great_net/image:16/width:0.5/regular/devices:1/batch:1");
  EXPECT_EQ(js["groups"][0]["rows"][0][schema::figure::workload_params.name], "image 16, width 0.5");
  EXPECT_EQ(js["groups"][0]["rows"][0][schema::figure::run.name], json::array({"run1/results.json"}));
  EXPECT_EQ(js["groups"][1]["rows"][0][schema::figure::run.name], json::array({"run8/results.json"}));
}

TEST(ReportIdentity, ARowPooledFromTwoRunsNamesBoth) {
  const std::map<std::string, double> c = {{"global_batch", 1}};
  const RunFile a = record("a/results.json", "", {{"linear/regular/devices:1/batch:1", 1}}, c);
  const RunFile b = record("b/results.json", "", {{"linear/regular/devices:1/batch:1", 3}}, c);
  const Report rep = build_report({a, b});
  ASSERT_EQ(rep.groups.size(), 1u);
  ASSERT_EQ(rep.groups[0].rows.size(), 1u);
  EXPECT_EQ(rep.groups[0].rows[0].runs, (std::vector<std::string>{"a/results.json", "b/results.json"}));
  EXPECT_THAT(report_csv(rep), HasSubstr(",linear/regular/devices:1/batch:1,,a/results.json;b/results.json\n"));
}

TEST(Console, OneShortLinePerConfigurationWithTheTablesNumbers) {
  const std::map<std::string, double> c = {{"global_batch", 8},        {"device_peak_bytes", 412.5 * schema::kMiB},
                                           {"compute_share", 0.8125}, {"transfer_share", 0.0625},
                                           {"idle_share", 0.125},     {"iter_cv", 0.0123}};
  const RunFile f = record("r/results.json", "image 96, width 0.5",
                           {{"great_net/image:96/width:0.5/pipeline-1f1b-recompute/devices:2/batch:4", 12.34}}, c);
  const Report rep = build_report({f});
  const Row& r = rep.groups.at(0).rows.at(0);
  const std::string line = console_line(r);
  EXPECT_LE(line.size(), 100u) << line;
  EXPECT_EQ(line.rfind("pipeline-1f1b-recompute ", 0), 0u);  // the longest strategy name fits its column
  EXPECT_THAT(line, HasSubstr(" 2 "));
  EXPECT_THAT(line, HasSubstr("12.3 ms"));
  EXPECT_THAT(line, HasSubstr("1.2%*"));                     // one repetition: the CV over its iterations
  EXPECT_THAT(line, HasSubstr(num(8 / 12.34e-3)));           // samples/s = 8 / median
  EXPECT_THAT(line, HasSubstr("412"));                       // peak MiB/device
  EXPECT_THAT(line, HasSubstr("81.2%"));
  EXPECT_THAT(line, HasSubstr("6.2%"));
  EXPECT_THAT(line, HasSubstr("12.5%"));
  EXPECT_THAT(line, Not(HasSubstr("great_net")));            // the workload is the run's, not the line's
  for (const std::string& h : console_header()) EXPECT_LE(h.size(), 100u) << h;
  EXPECT_LE(console_columns().size(), 100u);
  EXPECT_EQ(console_columns().rfind("strategy ", 0), 0u);
  EXPECT_THAT(console_header().front(), HasSubstr("median"));
}

TEST(Console, MicrosecondStepsGetTheirUnitAndErrorsTheirMessage) {
  const RunFile f = record("r.json", "", {{"linear/regular/devices:1/batch:1", 0.0021}}, {{"global_batch", 1}});
  const std::string line = console_line(build_report({f}).groups.at(0).rows.at(0));
  EXPECT_THAT(line, HasSubstr("2.10 us"));
  EXPECT_THAT(line, Not(HasSubstr("0.00")));
  Row bad;
  bad.strategy = "mp";
  bad.devices = 2;
  bad.error = true;
  bad.error_message = "model has 1 layer, cannot split into 2 stages";
  EXPECT_THAT(console_line(bad), HasSubstr("error: model has 1 layer"));
}

}  // namespace
}  // namespace pb::reports
