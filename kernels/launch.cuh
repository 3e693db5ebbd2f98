// How every kernel in kernels/ is launched: with programmatic dependent launch (PDL, sm_90),
// so that a kernel's thread blocks are scheduled while the kernel before it in the stream is
// still finishing, instead of after it has drained and the launch has gone round the front end
// again. A decode step is hundreds of small kernels in a row (kernels/GEMV.md, docs/gpu.md), and
// that gap was a large part of each.
//
// The rule that keeps it correct: every kernel's first statement is grid_dependency_sync() (or
// grid_dependency_wait() alone, below),
// which waits until the previous kernel in the stream has completed and its writes are visible
// (so no kernel reads anything before its producer is done, and since every kernel waits, the
// chain is ordered transitively), and then lets the next kernel begin launching. Without PDL
// (a plain launch, an older GPU, or set_programmatic_launch(false)) the wait returns at once.
// Stream capture keeps the programmatic edges in CUDA graphs.
#pragma once
#include <cuda_runtime.h>

#include <utility>

#include "kernels/launch.hpp"  // the switch: set_programmatic_launch / programmatic_launch

namespace rz::gpu {

// Waits until the previous kernel in the stream has completed and its writes are visible.
__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// The wait, then lets the next kernel in the stream begin launching (its blocks become resident
// and wait in their own grid_dependency_wait while this one runs). Compute-bound kernels whose
// blocks fill the device take grid_dependency_wait alone (the next kernel then launches as their
// blocks exit): with the early launch, qmm-heavy decode steps on llama3.1-8b ran 9-17 % slower
// on the H200 (B = 4 and 16), while the memory-bound kernels gained.
__device__ __forceinline__ void grid_dependency_sync() {
  grid_dependency_wait();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// kernel<<<grid, block, smem, stream>>>(args...), with the programmatic-serialization attribute
// while programmatic_launch() is on, in thread-block clusters of cluster_x blocks along x when
// cluster_x > 1 (sm_90; grid.x a multiple of it; device_supports_clusters()). Launch errors are
// left for RZ_CUDA_CHECK_LAUNCH (cudaGetLastError), as after <<<>>>.
template <typename... Params, typename... Args>
inline void launch_kernel_clusters(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                                   cudaStream_t stream, unsigned cluster_x, Args&&... args) {
  cudaLaunchAttribute attr[2];
  unsigned n = 0;
  if (programmatic_launch()) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n].val.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  if (cluster_x > 1) {
    attr[n].id = cudaLaunchAttributeClusterDimension;
    attr[n].val.clusterDim.x = cluster_x;
    attr[n].val.clusterDim.y = 1;
    attr[n].val.clusterDim.z = 1;
    ++n;
  }
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = n;
  (void)cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

template <typename... Params, typename... Args>
inline void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                          cudaStream_t stream, Args&&... args) {
  launch_kernel_clusters(kernel, grid, block, smem, stream, 1u, std::forward<Args>(args)...);
}

}  // namespace rz::gpu
