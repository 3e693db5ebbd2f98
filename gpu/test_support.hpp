// For GPU tests: skip with a clear message when no CUDA device is present (the CPU machines and
// CI have none; the GPU machine runs these for real, see scripts/gpu_check.sh).
#pragma once
#include <gtest/gtest.h>

#include <string>

#include "gpu/device.hpp"

#define RZ_REQUIRE_GPU()                                                           \
  do {                                                                             \
    std::string rz_why_;                                                           \
    if (::rz::gpu::list_devices(&rz_why_).empty())                                 \
      GTEST_SKIP() << "no CUDA device (" << rz_why_ << "): GPU test not run here"; \
  } while (0)
