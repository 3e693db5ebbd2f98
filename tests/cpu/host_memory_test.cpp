// Tests of cpu/host_memory.cpp: /proc/meminfo's available memory plus free swap.
#include "cpu/host_memory.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>

namespace rz {
namespace {

TEST(HostMemory, MeminfoAvailableAddsFreeSwap) {
  const char* text =
      "MemTotal:       24000000 kB\nMemFree:         1000 kB\nMemAvailable:   20000000 kB\n"
      "SwapTotal:       2000 kB\nSwapFree:        1500 kB\n";
  EXPECT_EQ(meminfo_available(text), std::optional<uint64_t>((20000000ull + 1500) * 1024));
  EXPECT_EQ(meminfo_available("MemAvailable: 10 kB\n"), std::optional<uint64_t>(10240));
  EXPECT_EQ(meminfo_available("MemTotal: 10 kB\nMemAvailablex: 5 kB\n"), std::nullopt);
  EXPECT_EQ(meminfo_available(""), std::nullopt);
  const auto here = host_memory_available();  // Linux: /proc/meminfo is there
  ASSERT_TRUE(here.has_value());
  EXPECT_GT(*here, 0u);
}

}  // namespace
}  // namespace rz
