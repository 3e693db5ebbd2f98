// device_sm_count (kernels/cuda_check.hpp).
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

}  // namespace rz::gpu
