// How much host memory an allocation may still take: what the CPU executor checks its KV cache
// against before allocating it, so that a context too large for the machine is a clear error
// instead of std::bad_alloc or, with overcommit, the OOM killer once the cache fills.
#pragma once
#include <cstdint>
#include <optional>
#include <string_view>

namespace rz {

// MemAvailable + SwapFree of a /proc/meminfo text, in bytes; nullopt when it lacks MemAvailable.
std::optional<uint64_t> meminfo_available(std::string_view meminfo);

// The smaller of /proc/meminfo's available memory and the cgroup v2 limit's room (memory.max -
// memory.current, where a limit is set); nullopt when neither can be read.
std::optional<uint64_t> host_memory_available();

}  // namespace rz
