// Token-embedding gather on the GPU: the first op of a forward step. Each token's row of the
// embedding matrix is dequantized straight from its GGUF storage type into an fp32 activation
// row, with exactly the arithmetic of quants/quants.cpp's dequantize_row (bit-identical results).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "formats/ggml_types.hpp"

namespace rz::gpu {

// Storage types the gather kernel reads: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K,
// Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS.
bool embedding_type_supported(GgmlType type);

// out[t, :] = dequantize_row(table row ids[t])   for t in [0, n_tokens)
//   table: device, [n_vocab rows] of row_size(type, n_embd) bytes each (GGUF layout, no padding)
//   ids:   device, [n_tokens] int32
//   out:   device, [n_tokens, n_embd] fp32
// A token id outside [0, n_vocab) cannot be reported from the kernel: its row is filled with NaN
// (callers check ids on the host first; the NaN makes a missed check loud, never an out-of-bounds
// read). Throws rz::Error for an unsupported type, n_embd not a whole number of blocks, or
// negative sizes; n_tokens == 0 launches nothing.
// scale: each element times it (fp32 product, as the CPU executor: gemma's sqrt(n_embd)); 0: none.
void embedding_gather(GgmlType type, const void* table, int64_t n_vocab, int n_embd,
                      const int32_t* ids, int n_tokens, float* out, cudaStream_t stream,
                      float scale = 0.0f);

}  // namespace rz::gpu
