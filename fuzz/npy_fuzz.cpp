// libFuzzer target: the .npy parser on arbitrary bytes. Any input must give an array or a
// pb::UsageError; a crash, a sanitizer report or another exception is a bug.
#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/check.h"
#include "engine/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const pb::NpyArray a = pb::parse_npy(std::string(reinterpret_cast<const char*>(data), size), "fuzz.npy");
    size_t n = 1;
    for (int64_t d : a.shape) n *= static_cast<size_t>(d);
    if (n != a.data.size()) __builtin_trap();  // the shape must describe the data
  } catch (const pb::UsageError&) {
  }
  return 0;
}
