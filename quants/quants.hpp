// Quantized block formats of GGUF: dequantization of F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0,
// Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS; quantization to F16, BF16, Q8_0, Q4_0,
// Q4_1, Q5_0, Q5_1, Q4_K, Q5_K and Q6_K bit-for-bit as the gguf Python package's reference
// quantizers (gguf.quants; ggml's for the K types) do it, and to Q2_K, Q3_K, IQ4_NL and IQ4_XS
// with rz's own plain quantizers (quants_simple_quantize.cpp: for synthetic models, no reference
// to match).
#pragma once
#include <cstdint>

#include "formats/ggml_types.hpp"
#include "quants/quant_blocks.hpp"

namespace rz {

// n must be a multiple of the type's block size. Throws rz::Error for unsupported types.
void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n);
bool can_quantize(GgmlType t);
void quantize_row(GgmlType t, const float* src, void* dst, int64_t n);

float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);  // round to nearest even, as numpy's astype(float16)
float bf16_to_fp32(uint16_t h);
uint16_t fp32_to_bf16(float f);  // round to nearest even, as gguf.quants does it

}  // namespace rz
