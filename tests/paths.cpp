// The one test file compiled with this build's paths (build/generated/parbench_paths.h).
#include "tests/paths.h"

#include "parbench_paths.h"

namespace pb::test {

const char* built_binary() { return PARBENCH_BINARY; }
const char* built_source_dir() { return PARBENCH_SOURCE_DIR; }

}  // namespace pb::test
