// A JSON object read strictly, for the projection's input files (profile, machine, validation):
// every field typed and checked, unknown fields refused; errors name the file and the field's path.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "engine/check.h"

namespace pb::projection {

class Obj {
 public:
  Obj(const nlohmann::json& j, std::string source, std::string path) : j_(j), source_(std::move(source)), path_(std::move(path)) {
    if (!j_.is_object()) fail(path_.empty() ? "the top level" : path_, "an object");
  }
  [[noreturn]] void fail(const std::string& field, const std::string& expected) const {
    throw UsageError(fmt::format("{}: {}: expected {}", source_, field, expected));
  }
  std::string at_path(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  bool has(const std::string& key) const { return j_.contains(key); }
  const nlohmann::json& raw(const std::string& key) {
    seen_.insert(key);
    if (!j_.contains(key)) fail(at_path(key), "a value (the field is missing)");
    return j_.at(key);
  }
  double number(const std::string& key, double lo = -std::numeric_limits<double>::infinity(), bool positive = false) {
    const nlohmann::json& v = raw(key);
    if (!v.is_number() || !std::isfinite(v.get<double>())) fail(at_path(key), "a finite number");
    const double x = v.get<double>();
    if (positive && !(x > 0)) fail(at_path(key), fmt::format("a number > 0, got {}", x));
    if (x < lo) fail(at_path(key), fmt::format("a number >= {}, got {}", lo, x));
    return x;
  }
  double number_or(const std::string& key, double fallback, double lo = 0) {
    return has(key) ? number(key, lo) : (seen_.insert(key), fallback);
  }
  int64_t integer(const std::string& key, int64_t lo) {
    const nlohmann::json& v = raw(key);
    if (!v.is_number_integer() || v.get<int64_t>() < lo) fail(at_path(key), fmt::format("an integer >= {}", lo));
    return v.get<int64_t>();
  }
  // An integer an int holds (counts, indices): larger ones are bad input, not wrapped.
  int small_integer(const std::string& key, int64_t lo) {
    const int64_t n = integer(key, lo);
    if (n > std::numeric_limits<int>::max()) fail(at_path(key), fmt::format("an integer from {} to {}", lo, std::numeric_limits<int>::max()));
    return static_cast<int>(n);
  }
  std::string str(const std::string& key) {
    const nlohmann::json& v = raw(key);
    if (!v.is_string()) fail(at_path(key), "a string");
    return v.get<std::string>();
  }
  std::string str_or(const std::string& key, const std::string& fallback) { return has(key) ? str(key) : (seen_.insert(key), fallback); }
  bool boolean(const std::string& key) {
    const nlohmann::json& v = raw(key);
    if (!v.is_boolean()) fail(at_path(key), "true or false");
    return v.get<bool>();
  }
  std::vector<double> numbers(const std::string& key, std::size_t size, double lo) {
    const nlohmann::json& v = raw(key);
    if (!v.is_array() || v.size() != size)
      fail(at_path(key), fmt::format("an array of {} number(s), one per entry of \"batches\"", size));
    std::vector<double> out;
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (!v[i].is_number() || !std::isfinite(v[i].get<double>()) || v[i].get<double>() < lo)
        fail(fmt::format("{}[{}]", at_path(key), i), fmt::format("a finite number >= {}", lo));
      out.push_back(v[i].get<double>());
    }
    return out;
  }
  std::vector<int64_t> ints(const std::string& key, int64_t lo) {
    const nlohmann::json& v = raw(key);
    if (!v.is_array()) fail(at_path(key), "an array of integers");
    std::vector<int64_t> out;
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (!v[i].is_number_integer() || v[i].get<int64_t>() < lo)
        fail(fmt::format("{}[{}]", at_path(key), i), fmt::format("an integer >= {}", lo));
      out.push_back(v[i].get<int64_t>());
    }
    return out;
  }
  // Unknown fields are mistakes (a misspelt key would silently keep its default).
  void done() const {
    for (auto it = j_.begin(); it != j_.end(); ++it)
      if (!seen_.count(it.key())) fail(at_path(it.key()), "no such field (unknown)");
  }
  const nlohmann::json& json_value() const { return j_; }
  const std::string& source() const { return source_; }

 private:
  const nlohmann::json& j_;
  std::string source_, path_;
  std::set<std::string> seen_;
};

}  // namespace pb::projection
