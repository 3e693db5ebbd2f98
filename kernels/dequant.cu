// Whole-matrix dequantization to FP16/BF16 (see dequant.hpp). The matrix is one flat run of
// blocks (rows are whole blocks, stored back to back), so the kernel ignores rows: each thread
// makes 8 consecutive outputs (one 16-byte store) from the block that holds them. 8 divides every
// block size, so a group never straddles two blocks. The quantized types decode through
// kernels/quant_decode.cuh's decode_exact (separately rounded, as the CPU reference).
#include "kernels/dequant.hpp"
#include "kernels/launch.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <string>

#include "formats/common.hpp"
#include "kernels/cuda_common.cuh"
#include "kernels/quant_decode.cuh"

namespace rz::gpu {
namespace {

template <HalfType O>
__device__ __forceinline__ uint16_t to_half_bits(float f) {
  if constexpr (O == HalfType::f16) {
    return f32_to_f16_bits(f);
  } else {
    return f32_to_bf16_bits(f);
  }
}

// ---------------------------------------------------------------- per-type group loaders
// load8(w, e, v): v[0..7] = dequantized elements e..e+7 of the flat matrix (e % 8 == 0).

// The quantized types: quant::X::decode_exact (kernels/quant_decode.cuh), 8 elements of one block.
template <class Q>
struct LoadQuant {
  __device__ static void load8(const uint8_t* __restrict__ w, int64_t e, float (&v)[8]) {
    const uint8_t* b = w + (e / Q::kElems) * Q::kBytes;
    Q::template decode_exact<8>(b, static_cast<int>(e % Q::kElems), v);
  }
};

// Plain types: the base pointer is 16-byte aligned and e % 8 == 0, so these vector loads are too.
struct LoadF32 {
  __device__ static void load8(const uint8_t* __restrict__ w, int64_t e, float (&v)[8]) {
    const float4* p = reinterpret_cast<const float4*>(w + e * 4);
    const float4 a = p[0], b = p[1];
    v[0] = a.x;
    v[1] = a.y;
    v[2] = a.z;
    v[3] = a.w;
    v[4] = b.x;
    v[5] = b.y;
    v[6] = b.z;
    v[7] = b.w;
  }
};

// F16 / BF16: exact conversions (fp16 NaN payloads kept), two values per 32-bit word.
template <bool kBf16>
struct LoadHalf {
  __device__ static float to_f32(uint32_t h) {
    return kBf16 ? bf16_bits_to_f32(h) : f16_bits_to_f32(static_cast<uint16_t>(h));
  }
  __device__ static void load8(const uint8_t* __restrict__ w, int64_t e, float (&v)[8]) {
    const uint4 r = *reinterpret_cast<const uint4*>(w + e * 2);
    const uint32_t u[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      v[2 * i] = to_f32(u[i] & 0xffffu);
      v[2 * i + 1] = to_f32(u[i] >> 16);
    }
  }
};

// ---------------------------------------------------------------- kernels

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = int64_t{1} << 20;  // grid-stride beyond this

// grid-stride over groups of 8 elements; out: [n_groups * 8] 16-bit, 16-byte aligned
template <class Load, HalfType O>
__global__ void __launch_bounds__(kThreads)
    dequant_kernel(const uint8_t* __restrict__ w, uint4* __restrict__ out, int64_t n_groups) {
  grid_dependency_sync();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < n_groups;
       g += stride) {
    float v[8];
    Load::load8(w, g * 8, v);
    uint32_t p[4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
      p[i] = static_cast<uint32_t>(to_half_bits<O>(v[2 * i])) |
             (static_cast<uint32_t>(to_half_bits<O>(v[2 * i + 1])) << 16);
    out[g] = make_uint4(p[0], p[1], p[2], p[3]);
  }
}

// grid-stride, one element per thread; y: [n] 16-bit
template <HalfType O>
__global__ void __launch_bounds__(kThreads)
    convert_kernel(const float* __restrict__ x, uint16_t* __restrict__ y, int64_t n) {
  grid_dependency_sync();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = to_half_bits<O>(x[i]);
}

unsigned grid_for(int64_t items) {
  const int64_t blocks = (items + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

template <class Load>
void launch(const void* w, void* out, HalfType ot, int64_t n_groups, cudaStream_t stream) {
  const auto* wb = static_cast<const uint8_t*>(w);
  auto* o = static_cast<uint4*>(out);
  if (ot == HalfType::f16) {
    launch_kernel(dequant_kernel<Load, HalfType::f16>, grid_for(n_groups), kThreads, 0, stream, wb,
                  o, n_groups);
  } else {
    launch_kernel(dequant_kernel<Load, HalfType::bf16>, grid_for(n_groups), kThreads, 0, stream, wb,
                  o, n_groups);
  }
  RZ_CUDA_CHECK_LAUNCH("dequant_kernel");
}

std::string type_label(GgmlType t) {
  const auto& tr = type_traits(t);
  return tr.name.empty() ? "type " + std::to_string(static_cast<uint32_t>(t))
                         : std::string(tr.name);
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace

bool dequant_supported(GgmlType type) { return dequant_cols_multiple(type) != 0; }

int dequant_cols_multiple(GgmlType type) {
  switch (type) {
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
    case GgmlType::IQ4_XS:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K: return QK_K;
    case GgmlType::Q8_0:
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
    case GgmlType::Q5_0:
    case GgmlType::IQ4_NL:
    case GgmlType::Q5_1: return 32;
    case GgmlType::F16:
    case GgmlType::BF16:
    case GgmlType::F32: return 8;
    default: return 0;
  }
}

void dequantize_matrix(GgmlType type, const void* w, void* out, HalfType out_type, int64_t rows,
                       int64_t cols, cudaStream_t stream) {
  const std::string what = "dequantize_matrix " + type_label(type) + " [" + std::to_string(rows) +
                           ", " + std::to_string(cols) + "]";
  const int multiple = dequant_cols_multiple(type);
  if (multiple == 0) throw Error(what + ": no GPU dequantizer for this type");
  if (rows < 0 || cols < 1) throw Error(what + ": rows must be >= 0 and cols >= 1");
  if (cols % multiple != 0)
    throw Error(what + ": cols must be a multiple of " + std::to_string(multiple));
  if (rows > 0 && cols > (int64_t{1} << 40) / rows) throw Error(what + ": more than 2^40 elements");
  if (rows == 0) return;
  if (!w || !out) throw Error(what + ": null pointer");
  if (!aligned16(w) || !aligned16(out))
    throw Error(what + ": weights and output must be 16-byte aligned");
  const int64_t n_groups = rows * cols / 8;
  switch (type) {
    case GgmlType::Q4_K: launch<LoadQuant<quant::Q4K>>(w, out, out_type, n_groups, stream); break;
    case GgmlType::Q6_K: launch<LoadQuant<quant::Q6K>>(w, out, out_type, n_groups, stream); break;
    case GgmlType::Q8_0: launch<LoadQuant<quant::Q8_0>>(w, out, out_type, n_groups, stream); break;
    case GgmlType::Q4_0: launch<LoadQuant<quant::Q4_0>>(w, out, out_type, n_groups, stream); break;
    case GgmlType::Q4_1: launch<LoadQuant<quant::Q4_1>>(w, out, out_type, n_groups, stream); break;
    case GgmlType::Q5_0: launch<LoadQuant<quant::Q5_0>>(w, out, out_type, n_groups, stream); break;
    case GgmlType::Q5_1: launch<LoadQuant<quant::Q5_1>>(w, out, out_type, n_groups, stream); break;
    case GgmlType::Q2_K: launch<LoadQuant<quant::Q2K>>(w, out, out_type, n_groups, stream); break;
    case GgmlType::Q3_K: launch<LoadQuant<quant::Q3K>>(w, out, out_type, n_groups, stream); break;
    case GgmlType::Q5_K: launch<LoadQuant<quant::Q5K>>(w, out, out_type, n_groups, stream); break;
    case GgmlType::IQ4_NL:
      launch<LoadQuant<quant::IQ4NL>>(w, out, out_type, n_groups, stream);
      break;
    case GgmlType::IQ4_XS:
      launch<LoadQuant<quant::IQ4XS>>(w, out, out_type, n_groups, stream);
      break;
    case GgmlType::F32: launch<LoadF32>(w, out, out_type, n_groups, stream); break;
    case GgmlType::BF16: launch<LoadHalf<true>>(w, out, out_type, n_groups, stream); break;
    case GgmlType::F16:
      if (out_type == HalfType::f16) {  // fp16 -> fp32 -> fp16 is the identity, NaNs included
        RZ_CUDA_CHECK(cudaMemcpyAsync(out, w, static_cast<size_t>(rows * cols) * 2,
                                      cudaMemcpyDeviceToDevice, stream));
      } else {
        launch<LoadHalf<false>>(w, out, out_type, n_groups, stream);
      }
      break;
    default: throw Error(what + ": no GPU dequantizer for this type");
  }
}

void convert_to_half(const float* x, void* y, HalfType out_type, int64_t n, cudaStream_t stream) {
  if (n < 0) throw Error("convert_to_half: n = " + std::to_string(n) + " < 0");
  if (n == 0) return;
  if (!x || !y) throw Error("convert_to_half: null pointer");
  auto* o = static_cast<uint16_t*>(y);
  if (out_type == HalfType::f16) {
    launch_kernel(convert_kernel<HalfType::f16>, grid_for(n), kThreads, 0, stream, x, o, n);
  } else {
    launch_kernel(convert_kernel<HalfType::bf16>, grid_for(n), kThreads, 0, stream, x, o, n);
  }
  RZ_CUDA_CHECK_LAUNCH("convert_kernel");
}

}  // namespace rz::gpu
