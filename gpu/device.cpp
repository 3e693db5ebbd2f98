// CUDA device discovery (see device.hpp).
#include "gpu/device.hpp"

#include <cuda_runtime_api.h>

namespace rz::gpu {

std::vector<DeviceInfo> list_devices(std::string* why_none) {
  std::vector<DeviceInfo> out;
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    if (why_none) *why_none = cudaGetErrorString(err);
    cudaGetLastError();  // clear the sticky error so later calls start clean
    return out;
  }
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    out.push_back({i, p.name, p.major, p.minor, p.totalGlobalMem, p.multiProcessorCount});
  }
  if (out.empty() && why_none) *why_none = "no CUDA device found";
  return out;
}

bool device_memory(int index, size_t& free_bytes, size_t& total_bytes) {
  int current = 0;
  if (cudaGetDevice(&current) != cudaSuccess || cudaSetDevice(index) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  const bool ok = cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess;
  if (!ok) cudaGetLastError();
  cudaSetDevice(current);
  return ok;
}

}  // namespace rz::gpu
