// The CPU's model name, for `devices` and the run context.
#pragma once

#include <string>

namespace pb {

// /proc/cpuinfo's first "model name", or "unknown" where there is none.
std::string cpu_model_name();

}  // namespace pb
