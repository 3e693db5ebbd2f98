// A read-only view of one weight tensor inside a mapped model file.
#pragma once
#include <array>
#include <cstdint>
#include <string>

#include "formats/ggml_types.hpp"

namespace rz {

// Dimensions follow GGUF order: ne[0] is the innermost (contiguous) dimension, so a matrix of
// `rows` rows of `cols` elements has ne = {cols, rows}. A safetensors tensor of shape [rows, cols]
// is presented the same way.
struct TensorView {
  std::string name;
  GgmlType type = GgmlType::F32;
  int n_dims = 0;
  std::array<int64_t, 4> ne{1, 1, 1, 1};
  const uint8_t* data = nullptr;  // points into the mapped file
  size_t nbytes = 0;

  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  int64_t cols() const { return ne[0]; }
  int64_t rows() const { return ne[1] * ne[2] * ne[3]; }
  size_t row_bytes() const { return row_size(type, ne[0]); }
  const uint8_t* row(int64_t r) const { return data + static_cast<size_t>(r) * row_bytes(); }
};

}  // namespace rz
