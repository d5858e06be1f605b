// parse_json_input: nlohmann's parser with a callback that tracks depth and each object's keys.
#include "engine/json_input.h"

#include <set>
#include <vector>

#include "engine/check.h"

namespace pb {

nlohmann::json parse_json_input(const std::string& text, const std::string& source) {
  using nlohmann::json;
  // One entry per open container: whether it is an object, and the keys it has so far.
  std::vector<std::pair<bool, std::set<std::string>>> open;
  std::string path;  // the key just read, for the duplicate-key message
  auto callback = [&](int depth, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (depth >= kMaxJsonDepth)
          throw UsageError(fmt::format("{}: malformed JSON: nested deeper than {} levels", source, kMaxJsonDepth));
        open.push_back({event == json::parse_event_t::object_start, {}});
        break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        if (!open.empty()) open.pop_back();
        break;
      case json::parse_event_t::key:
        if (!open.empty() && open.back().first) {
          const std::string key = parsed.get<std::string>();
          if (!open.back().second.insert(key).second)
            throw UsageError(fmt::format("{}: malformed JSON: key \"{}\" appears twice in one object", source, key));
        }
        break;
      case json::parse_event_t::value:
        break;
    }
    return true;
  };
  try {
    return json::parse(text, callback);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for a number like 1e999
    throw UsageError(fmt::format("{}: malformed JSON: {}", source, e.what()));
  }
}

}  // namespace pb
