// Token-embedding gather (see embedding.hpp). One thread per output element: it finds its block
// in the token's row, decodes its own quant (byte loads only: GGUF blocks are packed and
// unaligned) and scales it with the same separately rounded fp32 operations as
// quants/quants_legacy.cpp / quants_k.cpp / quants_fp.cpp (kernels/quant_decode.cuh's
// decode_exact; fp16 through cuda_common.cuh's exact f16_bits_to_f32), so the result equals
// dequantize_row bit for bit.
#include "kernels/embedding.hpp"
#include "kernels/launch.cuh"

#include <cuda_runtime.h>

#include <cmath>
#include <string>

#include "kernels/cuda_common.cuh"
#include "kernels/quant_decode.cuh"

namespace rz::gpu {
namespace {

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
  __device__ static float at(const uint8_t* b, int) { return f16_bits_to_f32(load_u16_le(b)); }
};

struct DqBF16 {
  static constexpr int kBlock = 1, kBytes = 2;
  __device__ static float at(const uint8_t* b, int) { return bf16_bits_to_f32(load_u16_le(b)); }
};

// The quantized types: element j of the block, by quant::X::decode_exact
// (kernels/quant_decode.cuh).
template <class Q>
struct DqQuant {
  static constexpr int kBlock = Q::kElems, kBytes = Q::kBytes;
  __device__ static float at(const uint8_t* b, int j) {
    float v[1];
    Q::template decode_exact<1>(b, j, v);
    return v[0];
  }
};

constexpr int kThreads = 256;

// grid (n_tokens, ceil(n_embd / kThreads)); thread -> element j of token blockIdx.x's row
template <class D>
__global__ void embedding_gather_kernel(const uint8_t* __restrict__ table, int64_t n_vocab,
                                        int n_embd, size_t row_bytes,
                                        const int32_t* __restrict__ ids, float* __restrict__ out,
                                        float scale) {
  grid_dependency_sync();
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
    if (scale != 0.0f) v = __fmul_rn(v, scale);
  }
  out[static_cast<size_t>(t) * n_embd + j] = v;
}

template <class D>
void launch(const void* table, int64_t n_vocab, int n_embd, const int32_t* ids, int n_tokens,
            float* out, float scale, cudaStream_t stream) {
  const size_t row_bytes = static_cast<size_t>(n_embd / D::kBlock) * D::kBytes;
  const dim3 grid(static_cast<unsigned>(n_tokens),
                  static_cast<unsigned>((n_embd + kThreads - 1) / kThreads));
  launch_kernel(embedding_gather_kernel<D>, grid, kThreads, 0, stream,
                static_cast<const uint8_t*>(table), n_vocab, n_embd, row_bytes, ids, out, scale);
  RZ_CUDA_CHECK_LAUNCH("embedding_gather_kernel");
}

using Launcher = void (*)(const void*, int64_t, int, const int32_t*, int, float*, float,
                          cudaStream_t);

// The one dispatch on the storage type.
Launcher launcher_for(GgmlType type) {
  switch (type) {
    case GgmlType::F32: return launch<DqF32>;
    case GgmlType::F16: return launch<DqF16>;
    case GgmlType::BF16: return launch<DqBF16>;
    case GgmlType::Q8_0: return launch<DqQuant<quant::Q8_0>>;
    case GgmlType::Q4_0: return launch<DqQuant<quant::Q4_0>>;
    case GgmlType::Q4_1: return launch<DqQuant<quant::Q4_1>>;
    case GgmlType::Q4_K: return launch<DqQuant<quant::Q4K>>;
    case GgmlType::Q6_K: return launch<DqQuant<quant::Q6K>>;
    case GgmlType::Q5_0: return launch<DqQuant<quant::Q5_0>>;
    case GgmlType::Q5_1: return launch<DqQuant<quant::Q5_1>>;
    case GgmlType::Q2_K: return launch<DqQuant<quant::Q2K>>;
    case GgmlType::Q3_K: return launch<DqQuant<quant::Q3K>>;
    case GgmlType::Q5_K: return launch<DqQuant<quant::Q5K>>;
    case GgmlType::IQ4_NL: return launch<DqQuant<quant::IQ4NL>>;
    case GgmlType::IQ4_XS: return launch<DqQuant<quant::IQ4XS>>;
    default: return nullptr;
  }
}

std::string type_label(GgmlType t) {
  const auto& tr = type_traits(t);
  return tr.name.empty() ? "type " + std::to_string(static_cast<uint32_t>(t))
                         : std::string(tr.name);
}

}  // namespace

bool embedding_type_supported(GgmlType type) { return launcher_for(type) != nullptr; }

void embedding_gather(GgmlType type, const void* table, int64_t n_vocab, int n_embd,
                      const int32_t* ids, int n_tokens, float* out, cudaStream_t stream,
                      float scale) {
  const Launcher l = launcher_for(type);
  if (!l) throw Error("embedding_gather: no GPU gather for " + type_label(type));
  const int bs = type_traits(type).block_size;
  if (n_embd <= 0 || n_embd % bs != 0)
    throw Error("embedding_gather: n_embd " + std::to_string(n_embd) +
                " is not a positive whole number of " + type_label(type) + " blocks");
  if (n_vocab <= 0 || n_tokens < 0)
    throw Error("embedding_gather: bad sizes (n_vocab " + std::to_string(n_vocab) + ", n_tokens " +
                std::to_string(n_tokens) + ")");
  if (n_tokens == 0) return;
  if (!table || !ids || !out) throw Error("embedding_gather: null pointer");
  if (!(scale >= 0.0f) || !std::isfinite(scale))
    throw Error("embedding_gather: scale must be finite and >= 0");
  l(table, n_vocab, n_embd, ids, n_tokens, out, scale, stream);
}

}  // namespace rz::gpu
