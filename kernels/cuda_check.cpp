// device_sm_count, device_supports_clusters (kernels/cuda_check.hpp).
#include "kernels/cuda_check.hpp"

namespace rz::gpu {

int device_sm_count() {
  static const int n = [] {
    int dev = 0, count = 0;
    RZ_CUDA_CHECK(cudaGetDevice(&dev));
    RZ_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, dev));
    return count;
  }();
  return n;
}

bool device_supports_clusters() {
  static const bool yes = [] {
    int dev = 0, v = 0;
    RZ_CUDA_CHECK(cudaGetDevice(&dev));
    RZ_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrClusterLaunch, dev));
    return v != 0;
  }();
  return yes;
}

}  // namespace rz::gpu
