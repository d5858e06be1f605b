// docs/reports.md against reports/schema.h: every counter and context key the program writes is
// documented with the same unit and compare rule, and the docs name no key the schema lacks.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "reports/schema.h"
#include "tests/paths.h"

namespace pb::reports::schema {
namespace {

struct DocRow {
  std::string unit, meaning, match;
};

// The rows "| `key` | unit | meaning [| match] |" of the table under the heading that starts
// with `heading`, up to the next heading.
std::map<std::string, DocRow> doc_table(const std::string& heading) {
  std::ifstream in(test::source_dir() / "docs/reports.md");
  EXPECT_TRUE(in.good()) << "cannot read docs/reports.md";
  std::map<std::string, DocRow> rows;
  std::string line;
  bool inside = false;
  while (std::getline(in, line)) {
    if (line.rfind("#", 0) == 0) {
      inside = line.rfind(heading, 0) == 0;
      continue;
    }
    if (!inside || line.rfind("| `", 0) != 0) continue;
    std::vector<std::string> cells;
    std::stringstream ss(line.substr(1));
    std::string cell;
    while (std::getline(ss, cell, '|')) {
      cell.erase(0, cell.find_first_not_of(' '));
      cell.erase(cell.find_last_not_of(' ') + 1);
      cells.push_back(cell);
    }
    if (cells.size() < 3) continue;
    const std::string key = cells[0].substr(1, cells[0].size() - 2);  // strip the backquotes
    EXPECT_EQ(rows.count(key), 0u) << heading << ": " << key << " documented twice";
    rows[key] = {cells[1], cells[2], cells.size() > 3 ? cells[3] : ""};
  }
  return rows;
}

const char* match_text(Match m) {
  switch (m) {
    case Match::No: return "no";
    case Match::Always: return "yes";
    case Match::Cpu: return "CPU runs";
    case Match::Gpu: return "CUDA runs";
  }
  return "?";
}

TEST(Schema, CountersAreDocumented) {
  const auto doc = doc_table("### Counters");
  std::set<std::string> names;
  for (const Key& k : kCounters) {
    names.insert(k.name);
    auto it = doc.find(k.name);
    ASSERT_NE(it, doc.end()) << "counter " << k.name << " missing from docs/reports.md";
    EXPECT_EQ(it->second.unit, k.unit) << k.name;
    EXPECT_EQ(it->second.meaning, k.meaning) << k.name;
  }
  for (const auto& [name, row] : doc) EXPECT_TRUE(names.count(name)) << "docs/reports.md documents unknown counter " << name;
  EXPECT_EQ(names.size(), std::size(kCounters)) << "a counter is defined twice";
}

TEST(Schema, ContextKeysAreDocumentedWithTheirCompareRule) {
  const auto doc = doc_table("### Context");
  std::set<std::string> names;
  for (const Key& k : kContext) {
    names.insert(k.name);
    auto it = doc.find(k.name);
    ASSERT_NE(it, doc.end()) << "context key " << k.name << " missing from docs/reports.md";
    EXPECT_EQ(it->second.unit, k.unit) << k.name;
    EXPECT_EQ(it->second.meaning, k.meaning) << k.name;
    EXPECT_EQ(it->second.match, match_text(k.match)) << k.name;
  }
  for (const auto& [name, row] : doc) EXPECT_TRUE(names.count(name)) << "docs/reports.md documents unknown key " << name;
  EXPECT_EQ(names.size(), std::size(kContext)) << "a context key is defined twice";
}

TEST(Schema, IterationTimesFieldIsDocumented) {
  std::ifstream in(test::source_dir() / "docs/reports.md");
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_THAT(ss.str(), ::testing::HasSubstr(std::string("`") + iteration_times.name + "`"));
}

}  // namespace
}  // namespace pb::reports::schema
