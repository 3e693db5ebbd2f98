// CUDA device discovery: what GPUs this process can use. Works (and reports none) on machines
// without a GPU or driver.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace rz::gpu {

struct DeviceInfo {
  int index = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  size_t total_memory = 0;
  int multiprocessors = 0;
};

// Devices visible to the CUDA runtime. `why_none` (when given) receives the runtime's reason
// when the list is empty ("no CUDA-capable device is detected", "CUDA driver version is
// insufficient", ...).
std::vector<DeviceInfo> list_devices(std::string* why_none = nullptr);

}  // namespace rz::gpu
