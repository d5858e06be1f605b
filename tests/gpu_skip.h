// Skips a GPU test, with the reason, where there is no GPU or no CUDA build.
//
// The rule: every test that needs a GPU has "Gpu" in its name (suite or test), so the GPU check
// (scripts/gpu_check.sh) selects them all with the one filter *Gpu*; a test that calls
// PB_REQUIRE_GPU() without it fails TestRules.EveryTestThatSkipsWithoutADeviceIsSelected.
#pragma once

#include <gtest/gtest.h>

#include "engine/device.h"

#ifdef PARBENCH_HAVE_CUDA
#define PB_REQUIRE_GPU()                                                   \
  do {                                                                     \
    if (::pb::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device"; \
  } while (0)
#else
#define PB_REQUIRE_GPU() GTEST_SKIP() << "built without CUDA"
#endif
