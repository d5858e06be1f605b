// The reduce and param dtypes in reports: compare refuses runs that reduce or gather in different
// dtypes (a run without the key reduced in fp32), and table titles name a bf16 one.
#include <gtest/gtest.h>

#include "reports/compare.h"
#include "reports/schema.h"
#include "reports/table.h"

namespace pb::reports {
namespace {

RunFile run(const std::map<std::string, std::string>& context) {
  RunFile f;
  f.source = "run.json";
  f.context = context;
  f.context[schema::context::precision.name] = "bf16";
  return f;
}

TEST(ReportsDtypes, CompareRefusesUnlikeReduceAndParamDtypes) {
  const std::string reduce = schema::context::reduce_dtype.name, param = schema::context::param_dtype.name;
  const RunFile fp32 = run({}), bf16 = run({{reduce, "bf16"}}), gathered = run({{reduce, "bf16"}, {param, "bf16"}});
  EXPECT_TRUE(environment_diffs(fp32, fp32).empty());
  EXPECT_TRUE(environment_diffs(bf16, bf16).empty());
  const std::vector<EnvDiff> d = environment_diffs(fp32, bf16);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].key, reduce);
  EXPECT_EQ(d[0].baseline, "fp32");  // absent: the default before the flag
  EXPECT_EQ(d[0].contender, "bf16");
  const std::vector<EnvDiff> g = environment_diffs(bf16, gathered);
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(g[0].key, param);
}

// pipeline-interleaved's chunks per worker: a run without the key ran 2.
TEST(ReportsDtypes, CompareRefusesUnlikeVirtualStagesAndTitlesNameThem) {
  const std::string v = schema::context::virtual_stages.name;
  const RunFile two = run({}), three = run({{v, "3"}});
  EXPECT_TRUE(environment_diffs(three, three).empty());
  const std::vector<EnvDiff> d = environment_diffs(two, three);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].key, v);
  EXPECT_EQ(d[0].baseline, "2");
  EXPECT_EQ(d[0].contender, "3");
  Group g;
  g.workload = "great_net";
  g.work[v] = "3";
  EXPECT_NE(g.title().find("virtual stages 3"), std::string::npos) << g.title();
}

TEST(ReportsDtypes, TitlesNameBf16ReduceAndParamDtypes) {
  Group g;
  g.workload = "great_net";
  g.scaling = "weak";
  g.batch = 2;
  g.precision = "bf16";
  EXPECT_EQ(g.title().find("reduce"), std::string::npos);
  g.work[schema::context::reduce_dtype.name] = "bf16";
  g.work[schema::context::param_dtype.name] = "bf16";
  EXPECT_NE(g.title().find("bf16, reduce bf16, params bf16"), std::string::npos) << g.title();
}

}  // namespace
}  // namespace pb::reports
