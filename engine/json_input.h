// JSON from users' files, parsed with limits: bounded nesting (a deeply nested value cannot
// exhaust the stack when it is printed or freed), no duplicate keys, numbers that fit a double.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace pb {

constexpr int kMaxJsonDepth = 64;

// Throws pb::UsageError "<source>: malformed JSON: ..." naming the problem and where it is.
nlohmann::json parse_json_input(const std::string& text, const std::string& source);

// Every integer read from a file goes through here: an exact integer (a JSON integer, or a number
// with no fraction such as 1e3) from lo to hi, else pb::UsageError "<what>: expected an integer
// from lo to hi, got <the value>" -- never narrowed, wrapped or rounded.
int64_t json_integer(const nlohmann::json& v, const std::string& what, int64_t lo, int64_t hi);

}  // namespace pb
