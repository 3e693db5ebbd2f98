// Device name, memory in use and the launch switch for rz bench (see bench_device.hpp).
#include "apps/bench/bench_device.hpp"

#include <sys/resource.h>

#include <fstream>

#if RZ_HAVE_CUDA
#include "gpu/device.hpp"
#include "kernels/launch.hpp"
#endif

namespace rz::bench {
namespace {

std::string cpu_model_name() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const auto b = line.find_first_not_of(" \t", colon + 1);
    if (b != std::string::npos) return line.substr(b);
  }
  return "CPU";
}

}  // namespace

std::string device_name(const std::string& device, int gpu) {
  if (device == "cpu") return cpu_model_name();
#if RZ_HAVE_CUDA
  for (const auto& d : gpu::list_devices())
    if (d.index == gpu) return d.name;
#else
  (void)gpu;
#endif
  return "CUDA device " + std::to_string(gpu);
}

uint64_t memory_in_use(const std::string& device, int gpu) {
  if (device == "cpu") {
    rusage u{};
    if (getrusage(RUSAGE_SELF, &u) != 0) return 0;
    return static_cast<uint64_t>(u.ru_maxrss) * 1024;  // kilobytes on Linux
  }
#if RZ_HAVE_CUDA
  size_t free_bytes = 0, total_bytes = 0;
  if (gpu::device_memory(gpu, free_bytes, total_bytes) && total_bytes >= free_bytes)
    return total_bytes - free_bytes;
#else
  (void)gpu;
#endif
  return 0;
}

const char* memory_kind(const std::string& device) {
  return device == "cpu" ? "peak RSS" : "device memory in use";
}

void set_programmatic_launch(bool on) {
#if RZ_HAVE_CUDA
  gpu::set_programmatic_launch(on);
#else
  (void)on;
#endif
}

}  // namespace rz::bench
