// quantize_rows_fp8 (see fp8.hpp for the rule): one thread block per row; pass 1 reduces max |x|
// over the row (block_max), pass 2 re-reads the row, rounds each element by the hardware's
// cvt.rn.satfinite.e4m3 (through cuda_fp8.h) and writes the codes.
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <string>

#include "formats/common.hpp"
#include "kernels/cuda_common.cuh"
#include "kernels/fp8.hpp"
#include "kernels/launch.cuh"

namespace rz::gpu {
namespace {

template <Fp8Source T>
__device__ __forceinline__ float load_elem(const void* src, size_t i) {
  if constexpr (T == Fp8Source::f32) {
    return static_cast<const float*>(src)[i];
  } else if constexpr (T == Fp8Source::f16) {
    return f16_bits_to_f32(static_cast<const uint16_t*>(src)[i]);
  } else {
    return bf16_bits_to_f32(static_cast<const uint16_t*>(src)[i]);
  }
}

// grid (rows), block kThreads.
constexpr int kThreads = 256;

template <Fp8Source T>
__global__ void __launch_bounds__(kThreads)
    quantize_rows_fp8_kernel(const void* __restrict__ src, uint8_t* __restrict__ q,
                             float* __restrict__ scale, int64_t cols) {
  grid_dependency_sync();
  const size_t row0 = static_cast<size_t>(blockIdx.x) * static_cast<size_t>(cols);
  float amax = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += kThreads)
    amax = fmaxf(amax, fabsf(load_elem<T>(src, row0 + c)));
  amax = block_max(amax);
  const bool usable = amax > 0.0f && amax <= 3.402823466e38f;  // not 0, inf or NaN
  const float inv = usable ? __fdiv_rn(kFp8E4M3Max, amax) : 1.0f;
  const float s = usable ? __fdiv_rn(amax, kFp8E4M3Max) : 1.0f;
  if (threadIdx.x == 0) scale[blockIdx.x] = s;
  for (int64_t c = threadIdx.x; c < cols; c += kThreads) {
    const float v = __fmul_rn(load_elem<T>(src, row0 + c), inv);
    q[row0 + c] = static_cast<uint8_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
  }
}

template <Fp8Source T>
void launch(const void* src, uint8_t* q, float* scale, int64_t rows, int64_t cols,
            cudaStream_t stream) {
  launch_kernel(quantize_rows_fp8_kernel<T>, static_cast<unsigned>(rows), kThreads, 0, stream, src,
                q, scale, cols);
}

// grid (ceil(rows / kThreads), n)
__global__ void __launch_bounds__(kThreads)
    apply_fp8_scales_kernel(float* __restrict__ y, const float* __restrict__ w_scale,
                            const float* __restrict__ x_scale, int64_t rows, int64_t ldy) {
  grid_dependency_sync();
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (r >= rows) return;
  float& v = y[static_cast<int64_t>(blockIdx.y) * ldy + r];
  v = __fmul_rn(v, __fmul_rn(w_scale[r], x_scale[blockIdx.y]));
}

}  // namespace

void apply_fp8_scales(float* y, const float* w_scale, const float* x_scale, int64_t rows, int64_t n,
                      int64_t ldy, cudaStream_t stream) {
  if (rows < 1 || n < 0 || ldy < rows || n > 65535 || rows > (int64_t{1} << 40))
    throw Error("apply_fp8_scales: bad shape [" + std::to_string(n) + ", " + std::to_string(rows) +
                "] ldy " + std::to_string(ldy));
  if (n == 0) return;
  if (!y || !w_scale || !x_scale) throw Error("apply_fp8_scales: null pointer");
  const auto blocks = static_cast<unsigned>((rows + kThreads - 1) / kThreads);
  launch_kernel(apply_fp8_scales_kernel, dim3(blocks, static_cast<unsigned>(n)), kThreads, 0,
                stream, y, w_scale, x_scale, rows, ldy);
  RZ_CUDA_CHECK_LAUNCH("apply_fp8_scales_kernel");
}

void quantize_rows_fp8(const void* src, Fp8Source type, uint8_t* q, float* scale, int64_t rows,
                       int64_t cols, cudaStream_t stream) {
  if (rows < 0 || cols < 1 || rows > (int64_t{1} << 31) - 1)
    throw Error("quantize_rows_fp8: bad shape [" + std::to_string(rows) + ", " +
                std::to_string(cols) + "]");
  if (rows == 0) return;
  if (!src || !q || !scale) throw Error("quantize_rows_fp8: null pointer");
  switch (type) {
    case Fp8Source::f32: launch<Fp8Source::f32>(src, q, scale, rows, cols, stream); break;
    case Fp8Source::f16: launch<Fp8Source::f16>(src, q, scale, rows, cols, stream); break;
    case Fp8Source::bf16: launch<Fp8Source::bf16>(src, q, scale, rows, cols, stream); break;
  }
  RZ_CUDA_CHECK_LAUNCH("quantize_rows_fp8_kernel");
}

}  // namespace rz::gpu
