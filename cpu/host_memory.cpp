// Host memory left for allocations (see host_memory.hpp).
#include "cpu/host_memory.hpp"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <sstream>
#include <string>

namespace rz {
namespace {

std::string slurp(const char* path) {
  std::ifstream in(path);
  if (!in) return {};
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The number of a "Key:   123 kB" line of /proc/meminfo, in bytes.
std::optional<uint64_t> meminfo_field(std::string_view text, std::string_view key) {
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t end = std::min(text.find('\n', at), text.size());
    std::string_view line = text.substr(at, end - at);
    at = end + 1;
    if (line.size() <= key.size() || line.substr(0, key.size()) != key || line[key.size()] != ':')
      continue;
    line.remove_prefix(key.size() + 1);
    while (!line.empty() && line.front() == ' ') line.remove_prefix(1);
    uint64_t v = 0;
    const auto [p, ec] = std::from_chars(line.data(), line.data() + line.size(), v);
    if (ec != std::errc{}) return std::nullopt;
    const std::string_view unit(p, std::size_t(line.data() + line.size() - p));
    return unit.find("kB") != std::string_view::npos ? v * 1024 : v;
  }
  return std::nullopt;
}

std::optional<uint64_t> number_in(const std::string& text) {
  uint64_t v = 0;
  const auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  return ec == std::errc{} ? std::optional<uint64_t>(v) : std::nullopt;
}

}  // namespace

std::optional<uint64_t> meminfo_available(std::string_view meminfo) {
  const auto avail = meminfo_field(meminfo, "MemAvailable");
  if (!avail) return std::nullopt;
  return *avail + meminfo_field(meminfo, "SwapFree").value_or(0);
}

std::optional<uint64_t> host_memory_available() {
  std::optional<uint64_t> room = meminfo_available(slurp("/proc/meminfo"));
  const auto max = number_in(slurp("/sys/fs/cgroup/memory.max"));  // "max" when unlimited
  const auto current = number_in(slurp("/sys/fs/cgroup/memory.current"));
  if (max && current) {
    const uint64_t cg = *max > *current ? *max - *current : 0;
    room = room ? std::min(*room, cg) : cg;
  }
  return room;
}

}  // namespace rz
