// Random quantized weight matrices for the GPU matmul tests (gemv, qmm): rows of different
// magnitude with an occasional offset row, quantized by quants/quants.hpp's quantize_row and
// dequantized back by dequantize_row (the values the kernels must reproduce).
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include "formats/common.hpp"
#include "quants/quants.hpp"

namespace rz::gpu::test_util {

struct HostWeights {
  std::vector<uint8_t> bytes;  // [rows, row_size(type, cols)]
  std::vector<float> values;   // [rows, cols] dequantize_row of each row
};

inline HostWeights make_weights(GgmlType t, int64_t rows, int64_t cols, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> scale(0.05f, 3.0f);
  HostWeights w;
  const size_t rb = row_size(t, cols);
  w.bytes.resize(rb * rows);
  w.values.resize(static_cast<size_t>(rows * cols));
  std::vector<float> src(cols);
  for (int64_t r = 0; r < rows; ++r) {
    const float s = scale(rng);
    const float off = (r % 5 == 3) ? 0.7f * s : 0.0f;
    for (auto& v : src) v = s * nd(rng) + off;
    quantize_row(t, src.data(), w.bytes.data() + rb * r, cols);
    dequantize_row(t, w.bytes.data() + rb * r, w.values.data() + r * cols, cols);
  }
  return w;
}

}  // namespace rz::gpu::test_util
