// Token-embedding gather (see embedding.hpp). One thread per output element: it finds its block
// in the token's row, decodes its own quant (byte loads only: GGUF blocks are packed and
// unaligned) and scales it with the same separately rounded fp32 operations as
// model/quants_legacy.cpp / quants_k.cpp / quants_fp.cpp (__fmul_rn etc. keep nvcc from fusing
// them into FMAs), so the result equals dequantize_row bit for bit.
#include "kernels/embedding.hpp"

#include <cuda_runtime.h>

#include <string>

#include "gpu/cuda_check.hpp"
#include "model/quant_blocks.hpp"

namespace rz::gpu {
namespace {

__device__ __forceinline__ uint16_t load_u16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | (p[1] << 8));
}

// Exact fp16 -> fp32 on the bits (NaN payloads kept), as quants_fp.cpp's half_to_float_bits.
__device__ __forceinline__ float half_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  } else {
    // zero or subnormal: man * 2^-24 is exact in fp32
    const float v = __fmul_rn(static_cast<float>(man), 5.9604644775390625e-8f);
    bits = sign | __float_as_uint(v);
  }
  return __uint_as_float(bits);
}

__device__ __forceinline__ float bf16_bits_to_float(uint16_t h) {
  return __uint_as_float(static_cast<uint32_t>(h) << 16);
}

// One traits struct per storage type: elements per block, bytes per block, and the value of
// element j (0 <= j < kBlock) of the block at b.
struct DqF32 {
  static constexpr int kBlock = 1, kBytes = 4;
  __device__ static float at(const uint8_t* b, int) {
    const uint32_t u = static_cast<uint32_t>(b[0]) | static_cast<uint32_t>(b[1]) << 8 |
                       static_cast<uint32_t>(b[2]) << 16 | static_cast<uint32_t>(b[3]) << 24;
    return __uint_as_float(u);
  }
};

struct DqF16 {
  static constexpr int kBlock = 1, kBytes = 2;
  __device__ static float at(const uint8_t* b, int) { return half_bits_to_float(load_u16(b)); }
};

struct DqBF16 {
  static constexpr int kBlock = 1, kBytes = 2;
  __device__ static float at(const uint8_t* b, int) { return bf16_bits_to_float(load_u16(b)); }
};

// BlockQ8_0 { d; qs[32] }: qs[j] * d
struct DqQ8_0 {
  static constexpr int kBlock = QK8_0, kBytes = sizeof(BlockQ8_0);
  __device__ static float at(const uint8_t* b, int j) {
    const float d = half_bits_to_float(load_u16(b));
    const int8_t q = static_cast<int8_t>(b[2 + j]);
    return __fmul_rn(static_cast<float>(q), d);
  }
};

// BlockQ4_0 { d; qs[16] }: element j < 16 is the low nibble of qs[j], j >= 16 the high nibble of
// qs[j - 16]; d * (q - 8)
struct DqQ4_0 {
  static constexpr int kBlock = QK4_0, kBytes = sizeof(BlockQ4_0);
  __device__ static float at(const uint8_t* b, int j) {
    const float d = half_bits_to_float(load_u16(b));
    const uint8_t byte = b[2 + (j & 15)];
    const int q = j < 16 ? (byte & 0x0f) : (byte >> 4);
    return __fmul_rn(d, static_cast<float>(q - 8));
  }
};

// BlockQ4_1 { d, m; qs[16] }: nibbles as Q4_0; d * q + m
struct DqQ4_1 {
  static constexpr int kBlock = QK4_1, kBytes = sizeof(BlockQ4_1);
  __device__ static float at(const uint8_t* b, int j) {
    const float d = half_bits_to_float(load_u16(b));
    const float m = half_bits_to_float(load_u16(b + 2));
    const uint8_t byte = b[4 + (j & 15)];
    const int q = j < 16 ? (byte & 0x0f) : (byte >> 4);
    return __fadd_rn(__fmul_rn(d, static_cast<float>(q)), m);
  }
};

// BlockQ4_K { d, dmin; scales[12]; qs[128] }: sub-block s = j / 32 has a 6-bit scale and min
// (packing in quants_k.cpp's unpack_scale_min_k4); the quant is the low (s even) or high (s odd)
// nibble of qs[32 (s / 2) + j % 32]; (d * sc) * q - (dmin * mn)
struct DqQ4_K {
  static constexpr int kBlock = QK_K, kBytes = sizeof(BlockQ4_K);
  __device__ static float at(const uint8_t* b, int j) {
    const float d = half_bits_to_float(load_u16(b));
    const float dmin = half_bits_to_float(load_u16(b + 2));
    const uint8_t* sc = b + 4;
    const uint8_t* qs = b + 4 + K_SCALE_SIZE;
    const int s = j / 32, l = j % 32;
    int scale, min;
    if (s < 4) {
      scale = sc[s] & 63;
      min = sc[s + 4] & 63;
    } else {
      scale = (sc[s + 4] & 0x0f) | ((sc[s - 4] >> 6) << 4);
      min = (sc[s + 4] >> 4) | ((sc[s] >> 6) << 4);
    }
    const int q = (qs[32 * (s / 2) + l] >> (4 * (s % 2))) & 0x0f;
    const float ds = __fmul_rn(d, static_cast<float>(scale));
    const float ms = __fmul_rn(dmin, static_cast<float>(min));
    return __fsub_rn(__fmul_rn(ds, static_cast<float>(q)), ms);
  }
};

// BlockQ6_K { ql[128]; qh[64]; scales[16]; d }: element j = 128 c + 32 k + l has its low 4 bits
// in nibble k / 2 of ql[64 c + 32 (k % 2) + l], its high 2 bits at shift 2 k of qh[32 c + l];
// (d * scales[j / 16]) * (q - 32)
struct DqQ6_K {
  static constexpr int kBlock = QK_K, kBytes = sizeof(BlockQ6_K);
  __device__ static float at(const uint8_t* b, int j) {
    const uint8_t* ql = b;
    const uint8_t* qh = b + QK_K / 2;
    const int8_t* scales = reinterpret_cast<const int8_t*>(b + QK_K / 2 + QK_K / 4);
    const float d = half_bits_to_float(load_u16(b + QK_K / 2 + QK_K / 4 + QK_K / 16));
    const int c = j / 128, k = (j % 128) / 32, l = j % 32;
    const int lo = (ql[64 * c + 32 * (k % 2) + l] >> (4 * (k / 2))) & 0x0f;
    const int hi = (qh[32 * c + l] >> (2 * k)) & 3;
    const float dl = __fmul_rn(d, static_cast<float>(scales[j / 16]));
    return __fmul_rn(dl, static_cast<float>((lo | hi << 4) - 32));
  }
};

static_assert(QK_K / 2 + QK_K / 4 + QK_K / 16 + 2 == sizeof(BlockQ6_K));
static_assert(4 + K_SCALE_SIZE + QK_K / 2 == sizeof(BlockQ4_K));

constexpr int kThreads = 256;

// grid (n_tokens, ceil(n_embd / kThreads)); thread -> element j of token blockIdx.x's row
template <class D>
__global__ void embedding_gather_kernel(const uint8_t* __restrict__ table, int64_t n_vocab,
                                        int n_embd, size_t row_bytes,
                                        const int32_t* __restrict__ ids,
                                        float* __restrict__ out) {
  const int t = blockIdx.x;
  const int j = blockIdx.y * blockDim.x + threadIdx.x;
  if (j >= n_embd) return;
  const int32_t id = ids[t];
  float v;
  if (id < 0 || id >= n_vocab) {
    v = __uint_as_float(0x7fc00000u);  // NaN: see embedding.hpp
  } else {
    const uint8_t* row = table + static_cast<size_t>(id) * row_bytes;
    v = D::at(row + static_cast<size_t>(j / D::kBlock) * D::kBytes, j % D::kBlock);
  }
  out[static_cast<size_t>(t) * n_embd + j] = v;
}

template <class D>
void launch(const void* table, int64_t n_vocab, int n_embd, const int32_t* ids, int n_tokens,
            float* out, cudaStream_t stream) {
  const size_t row_bytes = static_cast<size_t>(n_embd / D::kBlock) * D::kBytes;
  const dim3 grid(static_cast<unsigned>(n_tokens), static_cast<unsigned>((n_embd + kThreads - 1) / kThreads));
  embedding_gather_kernel<D><<<grid, kThreads, 0, stream>>>(static_cast<const uint8_t*>(table),
                                                            n_vocab, n_embd, row_bytes, ids, out);
  RZ_CUDA_CHECK_LAUNCH("embedding_gather_kernel");
}

using Launcher = void (*)(const void*, int64_t, int, const int32_t*, int, float*, cudaStream_t);

// The one dispatch on the storage type.
Launcher launcher_for(GgmlType type) {
  switch (type) {
    case GgmlType::F32: return launch<DqF32>;
    case GgmlType::F16: return launch<DqF16>;
    case GgmlType::BF16: return launch<DqBF16>;
    case GgmlType::Q8_0: return launch<DqQ8_0>;
    case GgmlType::Q4_0: return launch<DqQ4_0>;
    case GgmlType::Q4_1: return launch<DqQ4_1>;
    case GgmlType::Q4_K: return launch<DqQ4_K>;
    case GgmlType::Q6_K: return launch<DqQ6_K>;
    default: return nullptr;
  }
}

std::string type_label(GgmlType t) {
  const auto& tr = type_traits(t);
  return tr.name.empty() ? "type " + std::to_string(static_cast<uint32_t>(t)) : std::string(tr.name);
}

}  // namespace

bool embedding_type_supported(GgmlType type) { return launcher_for(type) != nullptr; }

void embedding_gather(GgmlType type, const void* table, int64_t n_vocab, int n_embd,
                      const int32_t* ids, int n_tokens, float* out, cudaStream_t stream) {
  const Launcher l = launcher_for(type);
  if (!l) throw Error("embedding_gather: no GPU gather for " + type_label(type));
  const int bs = type_traits(type).block_size;
  if (n_embd <= 0 || n_embd % bs != 0)
    throw Error("embedding_gather: n_embd " + std::to_string(n_embd) + " is not a positive whole number of " +
                type_label(type) + " blocks");
  if (n_vocab <= 0 || n_tokens < 0)
    throw Error("embedding_gather: bad sizes (n_vocab " + std::to_string(n_vocab) + ", n_tokens " +
                std::to_string(n_tokens) + ")");
  if (n_tokens == 0) return;
  if (!table || !ids || !out) throw Error("embedding_gather: null pointer");
  l(table, n_vocab, n_embd, ids, n_tokens, out, stream);
}

}  // namespace rz::gpu
