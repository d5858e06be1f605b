// parse_json_input: a SAX pass for depth and each object's keys, then nlohmann's parser; json_integer.
#include "engine/json_input.h"

#include <cmath>
#include <set>
#include <vector>

#include "engine/check.h"

namespace pb {

namespace {

// The limits, checked by a SAX pass that builds nothing; the document is then parsed without a
// callback. (nlohmann's callback parser rescans an array at the end of each object in it: an
// array of N objects took time N^2.)
class LimitCheck : public nlohmann::json_sax<nlohmann::json> {
 public:
  explicit LimitCheck(const std::string& source) : source_(source) {}
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return open(true); }
  bool start_array(std::size_t) override { return open(false); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }
  bool key(string_t& k) override {
    if (!open_.empty() && !open_.back().second.insert(k).second)
      throw UsageError(fmt::format("{}: malformed JSON: key \"{}\" appears twice in one object", source_, k));
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    throw UsageError(fmt::format("{}: malformed JSON: {}", source_, e.what()));
  }

 private:
  bool open(bool object) {
    if (open_.size() >= static_cast<std::size_t>(kMaxJsonDepth))
      throw UsageError(fmt::format("{}: malformed JSON: nested deeper than {} levels", source_, kMaxJsonDepth));
    open_.push_back({object, {}});
    return true;
  }
  bool close() {
    if (!open_.empty()) open_.pop_back();
    return true;
  }
  const std::string& source_;
  std::vector<std::pair<bool, std::set<std::string>>> open_;  // per open container: object?, its keys
};

}  // namespace

nlohmann::json parse_json_input(const std::string& text, const std::string& source) {
  using nlohmann::json;
  LimitCheck check(source);
  try {
    json::sax_parse(text, &check);
    return json::parse(text);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for a number like 1e999
    throw UsageError(fmt::format("{}: malformed JSON: {}", source, e.what()));
  }
}

int64_t json_integer(const nlohmann::json& v, const std::string& what, int64_t lo, int64_t hi) {
  auto bad = [&] { return UsageError(fmt::format("{}: expected an integer from {} to {}, got {}", what, lo, hi, v.dump())); };
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (hi < 0 || u > static_cast<uint64_t>(hi) || (lo > 0 && u < static_cast<uint64_t>(lo))) throw bad();
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) {
    const int64_t i = v.get<int64_t>();
    if (i < lo || i > hi) throw bad();
    return i;
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    // Within +-2^53 every integer is exact in a double; the range check keeps the cast defined.
    if (!(d >= static_cast<double>(lo) && d <= static_cast<double>(hi)) || d != std::floor(d) || std::fabs(d) > 9007199254740992.0)
      throw bad();
    return static_cast<int64_t>(d);
  }
  throw bad();
}

}  // namespace pb
