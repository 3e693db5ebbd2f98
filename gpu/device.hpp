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

// Free and total memory of device `index` as the driver reports them (cudaMemGetInfo: every
// process's allocations and the CUDA contexts count as used). False when the runtime cannot say
// (no such device, no driver); the calling thread's current device is left as it was.
bool device_memory(int index, size_t& free_bytes, size_t& total_bytes);

}  // namespace rz::gpu
