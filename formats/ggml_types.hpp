// GGML tensor element types as numbered in the GGUF format, with their block traits.
// Dispatch on type goes through type_traits(); nothing else switches on raw numbers.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace rz {

enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
};

struct TypeTraits {
  std::string_view name;        // "Q4_K"; "" for numbers no GGML version defines
  int block_size = 0;           // elements per block (1 for plain types); 0 = unknown type
  size_t type_size = 0;         // bytes per block
  bool can_dequantize = false;  // rz has a dequantizer for it
};

// Traits for any 32-bit type number (unknown numbers give block_size 0).
const TypeTraits& type_traits(uint32_t type);
inline const TypeTraits& type_traits(GgmlType t) { return type_traits(static_cast<uint32_t>(t)); }

// Bytes for n elements of type t (n must be a multiple of the block size).
inline size_t row_size(GgmlType t, int64_t n) {
  const auto& tr = type_traits(t);
  return static_cast<size_t>(n / tr.block_size) * tr.type_size;
}

}  // namespace rz
