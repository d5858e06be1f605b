// Skips a bf16 test, with the reason, where this CPU or build has no bf16 kernels.
#pragma once

#include <string>

#include <gtest/gtest.h>

#ifdef PARBENCH_HAVE_DNNL
#include "engine/dnnl/dnnl_bf16.h"
#endif

namespace pb::test {

// Why this machine cannot run the bf16 ops; empty where it can.
inline std::string bf16_unavailable() {
#ifdef PARBENCH_HAVE_DNNL
  return dnnl_bf16_refusal(dnnl_effective_isa());
#else
  return "built without oneDNN";
#endif
}

}  // namespace pb::test

#define SKIP_WITHOUT_BF16()                                              \
  do {                                                                   \
    const std::string why_ = ::pb::test::bf16_unavailable();             \
    if (!why_.empty()) GTEST_SKIP() << "no bf16 kernels here: " << why_; \
  } while (0)
