// Whole-matrix dequantization to FP16/BF16 (see dequant.hpp). The matrix is one flat run of
// blocks (rows are whole blocks, stored back to back), so the kernel ignores rows: each thread
// makes 8 consecutive outputs (one 16-byte store) from the block that holds them. 8 divides every
// block size, so a group never straddles two blocks. Products and sums use the _rn intrinsics so
// that nvcc cannot fuse them into FMAs: the CPU reference rounds each one separately.
#include "kernels/dequant.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <string>

#include "gpu/cuda_check.hpp"
#include "model/common.hpp"
#include "model/quant_blocks.hpp"

namespace rz::gpu {
namespace {

// ---------------------------------------------------------------- exact conversions

// Little-endian 16-bit load with no alignment requirement (block fields sit at odd offsets).
__device__ __forceinline__ uint16_t ld16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | (p[1] << 8));
}

// fp16 bits -> fp32 exactly as model/quants_fp.cpp: NaN payloads kept (the hardware conversion
// would quiet a signalling NaN), everything else through the exact hardware conversion.
__device__ __forceinline__ float f16_bits_to_f32(uint16_t h) {
  if ((h & 0x7c00u) == 0x7c00u)
    return __uint_as_float((static_cast<uint32_t>(h & 0x8000u) << 16) | 0x7f800000u |
                           (static_cast<uint32_t>(h & 0x3ffu) << 13));
  return __half2float(__ushort_as_half(h));
}

// fp32 -> fp16 bits as fp32_to_fp16: round to nearest even (the hardware's cvt.rn, overflow to
// inf); NaN keeps its top ten payload bits, bumped to 0x7c01 where that would read as inf.
__device__ __forceinline__ uint16_t f32_to_f16_bits(float f) {
  const uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    uint16_t h = static_cast<uint16_t>(0x7c00u + ((u & 0x7fffffu) >> 13));
    if (h == 0x7c00u) ++h;
    return static_cast<uint16_t>(((u >> 16) & 0x8000u) | h);
  }
  return __half_as_ushort(__float2half_rn(f));
}

// fp32 -> bf16 bits as fp32_to_bf16: NaN made quiet (upper half kept, bit 22 set), then round to
// nearest even by integer add (overflow carries into inf).
__device__ __forceinline__ uint16_t f32_to_bf16_bits(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) u = (u & 0xffff0000u) | 0x00400000u;
  return static_cast<uint16_t>((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
}

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

struct LoadQ4K {  // 144-byte blocks: d, dmin, scales[12], qs[128]
  __device__ static void load8(const uint8_t* __restrict__ w, int64_t e, float v[8]) {
    const uint8_t* b = w + (e / QK_K) * sizeof(BlockQ4_K);
    const int p = static_cast<int>(e % QK_K), s = p / 32, l = p % 32;
    const float d = f16_bits_to_f32(ld16(b)), dmin = f16_bits_to_f32(ld16(b + 2));
    const uint8_t* sc = b + 4;
    int scale, mn;
    if (s < 4) {
      scale = sc[s] & 63;
      mn = sc[s + 4] & 63;
    } else {
      scale = (sc[s + 4] & 0x0f) | ((sc[s - 4] >> 6) << 4);
      mn = (sc[s + 4] >> 4) | ((sc[s] >> 6) << 4);
    }
    const float ds = __fmul_rn(d, static_cast<float>(scale));
    const float ms = __fmul_rn(dmin, static_cast<float>(mn));
    const uint8_t* q = b + 16 + 32 * (s / 2) + l;
    const int shift = 4 * (s % 2);
#pragma unroll
    for (int i = 0; i < 8; ++i)
      v[i] = __fsub_rn(__fmul_rn(ds, static_cast<float>((q[i] >> shift) & 0x0f)), ms);
  }
};

struct LoadQ6K {  // 210-byte blocks: ql[128], qh[64], scales[16] (int8), d
  __device__ static void load8(const uint8_t* __restrict__ w, int64_t e, float v[8]) {
    const uint8_t* b = w + (e / QK_K) * sizeof(BlockQ6_K);
    const int p = static_cast<int>(e % QK_K);
    const int c = p / 128, k = (p % 128) / 32, l = p % 32;  // p = 128 c + 32 k + l
    const float d = f16_bits_to_f32(ld16(b + 208));
    const int sidx = 8 * c + 2 * k + (l >= 16 ? 1 : 0);
    const float dl = __fmul_rn(d, static_cast<float>(static_cast<int8_t>(b[192 + sidx])));
    const uint8_t* ql = b + 64 * c + 32 * (k % 2) + l;
    const uint8_t* qh = b + 128 + 32 * c + l;
    const int lshift = 4 * (k / 2), hshift = 2 * k;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int q = (((ql[i] >> lshift) & 0x0f) | (((qh[i] >> hshift) & 3) << 4)) - 32;
      v[i] = __fmul_rn(dl, static_cast<float>(q));
    }
  }
};

struct LoadQ8_0 {  // 34-byte blocks: d, qs[32] (int8)
  __device__ static void load8(const uint8_t* __restrict__ w, int64_t e, float v[8]) {
    const uint8_t* b = w + (e / QK8_0) * sizeof(BlockQ8_0);
    const int j = static_cast<int>(e % QK8_0);
    const float d = f16_bits_to_f32(ld16(b));
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = __fmul_rn(static_cast<float>(static_cast<int8_t>(b[2 + j + i])), d);
  }
};

struct LoadQ4_0 {  // 18-byte blocks: d, qs[16]; element j < 16 low nibble of qs[j], else high of qs[j-16]
  __device__ static void load8(const uint8_t* __restrict__ w, int64_t e, float v[8]) {
    const uint8_t* b = w + (e / QK4_0) * sizeof(BlockQ4_0);
    const int j = static_cast<int>(e % QK4_0);
    const float d = f16_bits_to_f32(ld16(b));
    const uint8_t* q = b + 2 + (j % 16);
    const int shift = j < 16 ? 0 : 4;
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = __fmul_rn(d, static_cast<float>(((q[i] >> shift) & 0x0f) - 8));
  }
};

struct LoadQ4_1 {  // 20-byte blocks: d, m, qs[16]; nibbles as Q4_0, value d * q + m
  __device__ static void load8(const uint8_t* __restrict__ w, int64_t e, float v[8]) {
    const uint8_t* b = w + (e / QK4_1) * sizeof(BlockQ4_1);
    const int j = static_cast<int>(e % QK4_1);
    const float d = f16_bits_to_f32(ld16(b)), m = f16_bits_to_f32(ld16(b + 2));
    const uint8_t* q = b + 4 + (j % 16);
    const int shift = j < 16 ? 0 : 4;
#pragma unroll
    for (int i = 0; i < 8; ++i)
      v[i] = __fadd_rn(__fmul_rn(d, static_cast<float>((q[i] >> shift) & 0x0f)), m);
  }
};

// Plain types: the base pointer is 16-byte aligned and e % 8 == 0, so these vector loads are too.
struct LoadF32 {
  __device__ static void load8(const uint8_t* __restrict__ w, int64_t e, float v[8]) {
    const float4* p = reinterpret_cast<const float4*>(w + e * 4);
    const float4 a = p[0], b = p[1];
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
    v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
  }
};

struct LoadF16 {
  __device__ static void load8(const uint8_t* __restrict__ w, int64_t e, float v[8]) {
    const uint4 r = *reinterpret_cast<const uint4*>(w + e * 2);
    const uint32_t u[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      v[2 * i] = f16_bits_to_f32(static_cast<uint16_t>(u[i] & 0xffffu));
      v[2 * i + 1] = f16_bits_to_f32(static_cast<uint16_t>(u[i] >> 16));
    }
  }
};

struct LoadBF16 {
  __device__ static void load8(const uint8_t* __restrict__ w, int64_t e, float v[8]) {
    const uint4 r = *reinterpret_cast<const uint4*>(w + e * 2);
    const uint32_t u[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      v[2 * i] = __uint_as_float(u[i] << 16);
      v[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
    }
  }
};

// ---------------------------------------------------------------- kernels

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = int64_t{1} << 20;  // grid-stride beyond this

// grid-stride over groups of 8 elements; out: [n_groups * 8] 16-bit, 16-byte aligned
template <class Load, HalfType O>
__global__ void __launch_bounds__(kThreads) dequant_kernel(const uint8_t* __restrict__ w,
                                                           uint4* __restrict__ out, int64_t n_groups) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < n_groups; g += stride) {
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
__global__ void __launch_bounds__(kThreads) convert_kernel(const float* __restrict__ x,
                                                           uint16_t* __restrict__ y, int64_t n) {
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
    dequant_kernel<Load, HalfType::f16><<<grid_for(n_groups), kThreads, 0, stream>>>(wb, o, n_groups);
  } else {
    dequant_kernel<Load, HalfType::bf16><<<grid_for(n_groups), kThreads, 0, stream>>>(wb, o, n_groups);
  }
  RZ_CUDA_CHECK_LAUNCH("dequant_kernel");
}

std::string type_label(GgmlType t) {
  const auto& tr = type_traits(t);
  return tr.name.empty() ? "type " + std::to_string(static_cast<uint32_t>(t)) : std::string(tr.name);
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace

bool dequant_supported(GgmlType type) { return dequant_cols_multiple(type) != 0; }

int dequant_cols_multiple(GgmlType type) {
  switch (type) {
    case GgmlType::Q4_K:
    case GgmlType::Q6_K: return QK_K;
    case GgmlType::Q8_0:
    case GgmlType::Q4_0:
    case GgmlType::Q4_1: return 32;
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
  if (cols % multiple != 0) throw Error(what + ": cols must be a multiple of " + std::to_string(multiple));
  if (rows > 0 && cols > (int64_t{1} << 40) / rows) throw Error(what + ": more than 2^40 elements");
  if (rows == 0) return;
  if (!w || !out) throw Error(what + ": null pointer");
  if (!aligned16(w) || !aligned16(out)) throw Error(what + ": weights and output must be 16-byte aligned");
  const int64_t n_groups = rows * cols / 8;
  switch (type) {
    case GgmlType::Q4_K: launch<LoadQ4K>(w, out, out_type, n_groups, stream); break;
    case GgmlType::Q6_K: launch<LoadQ6K>(w, out, out_type, n_groups, stream); break;
    case GgmlType::Q8_0: launch<LoadQ8_0>(w, out, out_type, n_groups, stream); break;
    case GgmlType::Q4_0: launch<LoadQ4_0>(w, out, out_type, n_groups, stream); break;
    case GgmlType::Q4_1: launch<LoadQ4_1>(w, out, out_type, n_groups, stream); break;
    case GgmlType::F32: launch<LoadF32>(w, out, out_type, n_groups, stream); break;
    case GgmlType::BF16: launch<LoadBF16>(w, out, out_type, n_groups, stream); break;
    case GgmlType::F16:
      if (out_type == HalfType::f16) {  // fp16 -> fp32 -> fp16 is the identity, NaNs included
        RZ_CUDA_CHECK(cudaMemcpyAsync(out, w, static_cast<size_t>(rows * cols) * 2,
                                      cudaMemcpyDeviceToDevice, stream));
      } else {
        launch<LoadF16>(w, out, out_type, n_groups, stream);
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
    convert_kernel<HalfType::f16><<<grid_for(n), kThreads, 0, stream>>>(x, o, n);
  } else {
    convert_kernel<HalfType::bf16><<<grid_for(n), kThreads, 0, stream>>>(x, o, n);
  }
  RZ_CUDA_CHECK_LAUNCH("convert_kernel");
}

}  // namespace rz::gpu
