// libFuzzer target: the strict --config reader's line scanner. Any input must pass or give a
// pb::UsageError naming a line.
#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/check.h"
#include "engine/config_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    pb::check_config_text(std::string(reinterpret_cast<const char*>(data), size), "fuzz.toml");
  } catch (const pb::UsageError& e) {
    if (std::string(e.what()).rfind("fuzz.toml:", 0) != 0) __builtin_trap();  // every error names file:line
  }
  return 0;
}
