// Internal to the quants component: the per-type row kernels that quants.cpp dispatches to.
// Every kernel takes a whole number of blocks (n is a multiple of the block size).
//
// Bit-exactness: the reference (gguf.quants, numpy) rounds every float32 operation separately.
// The quant*.cpp files therefore turn off floating-point contraction (a*b+c must not become
// an FMA, which the project's -mfma would otherwise allow) with the pragma below.
#pragma once
#include <cstdint>

#include "quants/quant_blocks.hpp"

#if defined(__clang__)
#define RZ_QUANTS_NO_FP_CONTRACT _Pragma("clang fp contract(off)")
#elif defined(__GNUC__)
#define RZ_QUANTS_NO_FP_CONTRACT _Pragma("GCC optimize(\"fp-contract=off\")")
#else
#define RZ_QUANTS_NO_FP_CONTRACT
#endif

namespace rz::quants {

// Plain types (quants_fp.cpp).
void dequantize_f32(const void* src, float* dst, int64_t n);
void dequantize_f16(const void* src, float* dst, int64_t n);
void dequantize_bf16(const void* src, float* dst, int64_t n);
void quantize_f32(const float* src, void* dst, int64_t n);
void quantize_f16(const float* src, void* dst, int64_t n);
void quantize_bf16(const float* src, void* dst, int64_t n);

// 32-element blocks (quants_legacy.cpp).
void dequantize_q4_0(const void* src, float* dst, int64_t n);
void dequantize_q4_1(const void* src, float* dst, int64_t n);
void dequantize_q5_0(const void* src, float* dst, int64_t n);
void dequantize_q5_1(const void* src, float* dst, int64_t n);
void dequantize_q8_0(const void* src, float* dst, int64_t n);
void quantize_q4_0(const float* src, void* dst, int64_t n);
void quantize_q4_1(const float* src, void* dst, int64_t n);
void quantize_q5_0(const float* src, void* dst, int64_t n);
void quantize_q5_1(const float* src, void* dst, int64_t n);
void quantize_q8_0(const float* src, void* dst, int64_t n);

// 256-element super-blocks (quants_k.cpp, quants_k_quantize.cpp).
void dequantize_q2_k(const void* src, float* dst, int64_t n);
void dequantize_q3_k(const void* src, float* dst, int64_t n);
void dequantize_q4_k(const void* src, float* dst, int64_t n);
void dequantize_q5_k(const void* src, float* dst, int64_t n);
void dequantize_q6_k(const void* src, float* dst, int64_t n);
void quantize_q4_k(const float* src, void* dst, int64_t n);
void quantize_q5_k(const float* src, void* dst, int64_t n);

// Non-linear 4-bit formats (quants_iq.cpp).
void dequantize_iq4_nl(const void* src, float* dst, int64_t n);
void dequantize_iq4_xs(const void* src, float* dst, int64_t n);

// rz's own plain quantizers for the types without a reference one (quants_simple_quantize.cpp).
void quantize_q2_k(const float* src, void* dst, int64_t n);
void quantize_q3_k(const float* src, void* dst, int64_t n);
void quantize_iq4_nl(const float* src, void* dst, int64_t n);
void quantize_iq4_xs(const float* src, void* dst, int64_t n);
void quantize_q6_k(const float* src, void* dst, int64_t n);

}  // namespace rz::quants
