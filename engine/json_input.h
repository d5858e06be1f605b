// JSON from users' files, parsed with limits: bounded nesting (a deeply nested value cannot
// exhaust the stack when it is printed or freed), no duplicate keys, numbers that fit a double.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace pb {

constexpr int kMaxJsonDepth = 64;

// Throws pb::UsageError "<source>: malformed JSON: ..." naming the problem and where it is.
nlohmann::json parse_json_input(const std::string& text, const std::string& source);

}  // namespace pb
