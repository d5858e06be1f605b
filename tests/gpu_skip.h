// Skips a GPU test, with the reason, where there is no GPU or no CUDA build.
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
