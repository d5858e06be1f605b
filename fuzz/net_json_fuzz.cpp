// libFuzzer target: the net description parser (JSON, then the shape plan) on arbitrary text.
// Any input must give a net or a pb::UsageError.
#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/check.h"
#include "workloads/workload.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    pb::parse_net_json(std::string(reinterpret_cast<const char*>(data), size), "fuzz.json");
  } catch (const pb::UsageError&) {
  }
  return 0;
}
