// What the report tests share (tests/test_reports_*.cpp): synthetic Google Benchmark JSON.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/check.h"
#include "reports/compare.h"
#include "reports/gbjson.h"
#include "reports/stats.h"
#include "reports/table.h"

namespace pb::reports::reports_test {

using nlohmann::json;
using ::testing::HasSubstr;

// A GB JSON file written the way Google Benchmark writes one: per benchmark, one "iteration"
// entry per repetition (times in ms), then its aggregates when there are several.
class GbJson {
 public:
  explicit GbJson(std::map<std::string, std::string> ctx = {{"scaling", "weak"},
                                                             {"precision", "fp32"},
                                                             {"device_kind", "cpu"},
                                                             {"strategy_order", "regular,dp,ddp,mp,pipeline"}}) {
    doc_["context"] = {{"date", "2025-01-01T00:00:00+00:00"}, {"num_cpus", 2}, {"library_build_type", "release"}};
    for (const auto& [k, v] : ctx) doc_["context"][k] = v;
    doc_["benchmarks"] = json::array();
  }
  // Google Benchmark's run-setting suffix of the names that follow.
  GbJson& suffix(const std::string& s) {
    suffix_ = s;
    return *this;
  }
  // parbench's per-iteration record for a benchmark (seconds).
  GbJson& iteration_times(const std::string& name, const json& reps) {
    doc_["iteration_times_s"][name] = reps;
    return *this;
  }
  json& doc() { return doc_; }
  GbJson& add(const std::string& name, const std::vector<double>& ms, std::map<std::string, double> counters = {}) {
    const std::string run = name + suffix_;
    for (std::size_t i = 0; i < ms.size(); ++i) {
      json b = {{"name", run},        {"family_index", family_},     {"per_family_instance_index", 0},
                {"run_name", run},    {"run_type", "iteration"},     {"repetitions", ms.size()},
                {"repetition_index", i}, {"threads", 1},             {"iterations", 10},
                {"real_time", ms[i]}, {"cpu_time", ms[i] * 1.01},    {"time_unit", "ms"}};
      for (const auto& [k, v] : counters) b[k] = v;
      doc_["benchmarks"].push_back(b);
    }
    if (ms.size() > 1)
      for (const char* agg : {"mean", "median", "stddev"})
        doc_["benchmarks"].push_back({{"name", run + "_" + agg}, {"run_name", run}, {"run_type", "aggregate"},
                                      {"repetitions", ms.size()}, {"threads", 1}, {"aggregate_name", agg},
                                      {"aggregate_unit", "time"}, {"iterations", ms.size()},
                                      {"real_time", 1.0}, {"cpu_time", 1.0}, {"time_unit", "ms"}});
    ++family_;
    return *this;
  }
  GbJson& error(const std::string& name, const std::string& message) {
    const std::string run = name + suffix_;
    doc_["benchmarks"].push_back({{"name", run}, {"run_name", run}, {"run_type", "iteration"}, {"repetitions", 1},
                                  {"repetition_index", 0}, {"threads", 1}, {"error_occurred", true},
                                  {"error_message", message}, {"iterations", 0}, {"real_time", 0.0},
                                  {"cpu_time", 0.0}, {"time_unit", "ms"}});
    ++family_;
    return *this;
  }
  RunFile file(const std::string& source = "synthetic.json") const { return parse_run_json(doc_.dump(2), source); }

 private:
  json doc_;
  int family_ = 0;
  std::string suffix_ = "/iterations:10/process_time/manual_time";
};

}  // namespace pb::reports::reports_test
