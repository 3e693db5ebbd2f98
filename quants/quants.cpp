// Dispatch of dequantize_row / quantize_row on the GGML type: one table of row kernels per type,
// the only place in the quants component that looks at the type number.
#include "quants/quants.hpp"

#include <string>

#include "formats/common.hpp"
#include "quants/quants_impl.hpp"

namespace rz {
namespace {

using DequantizeFn = void (*)(const void*, float*, int64_t);
using QuantizeFn = void (*)(const float*, void*, int64_t);

struct RowKernels {
  DequantizeFn dequantize = nullptr;
  QuantizeFn quantize = nullptr;  // null: rz has no quantizer for this type
};

RowKernels kernels_for(GgmlType t) {
  using namespace quants;
  switch (t) {
    case GgmlType::F32: return {dequantize_f32, quantize_f32};
    case GgmlType::F16: return {dequantize_f16, quantize_f16};
    case GgmlType::BF16: return {dequantize_bf16, quantize_bf16};
    case GgmlType::Q4_0: return {dequantize_q4_0, quantize_q4_0};
    case GgmlType::Q4_1: return {dequantize_q4_1, quantize_q4_1};
    case GgmlType::Q5_0: return {dequantize_q5_0, quantize_q5_0};
    case GgmlType::Q5_1: return {dequantize_q5_1, quantize_q5_1};
    case GgmlType::Q8_0: return {dequantize_q8_0, quantize_q8_0};
    case GgmlType::Q2_K: return {dequantize_q2_k, quantize_q2_k};
    case GgmlType::Q3_K: return {dequantize_q3_k, quantize_q3_k};
    case GgmlType::Q4_K: return {dequantize_q4_k, quantize_q4_k};
    case GgmlType::Q5_K: return {dequantize_q5_k, quantize_q5_k};
    case GgmlType::Q6_K: return {dequantize_q6_k, quantize_q6_k};
    case GgmlType::IQ4_NL: return {dequantize_iq4_nl, quantize_iq4_nl};
    case GgmlType::IQ4_XS: return {dequantize_iq4_xs, quantize_iq4_xs};
    default: return {};
  }
}

std::string type_label(GgmlType t) {
  const auto& tr = type_traits(t);
  if (!tr.name.empty()) return std::string(tr.name);
  return "type " + std::to_string(static_cast<uint32_t>(t));
}

void check_length(GgmlType t, int64_t n, const char* what) {
  const int bs = type_traits(t).block_size;
  if (n < 0 || bs <= 0 || n % bs != 0) {
    throw Error(std::string(what) + ": row of " + std::to_string(n) +
                " elements is not a whole number of " + type_label(t) + " blocks");
  }
}

}  // namespace

void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n) {
  const RowKernels k = kernels_for(t);
  if (!k.dequantize) throw Error("dequantize: no dequantizer for " + type_label(t));
  check_length(t, n, "dequantize");
  k.dequantize(src, dst, n);
}

bool can_quantize(GgmlType t) { return kernels_for(t).quantize != nullptr; }

void quantize_row(GgmlType t, const float* src, void* dst, int64_t n) {
  const RowKernels k = kernels_for(t);
  if (!k.quantize) throw Error("quantize: no quantizer for " + type_label(t));
  check_length(t, n, "quantize");
  k.quantize(src, dst, n);
}

}  // namespace rz
