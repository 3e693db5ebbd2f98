// choose_matmul_path (see matmul_path.hpp for the measurements behind the rule).
#include "gpu/matmul_path.hpp"

#include "formats/common.hpp"
#include "kernels/gemv.hpp"
#include "kernels/gemv_q8.hpp"
#include "kernels/qmm.hpp"

namespace rz::gpu {
namespace {

bool qmm_wins(double bytes, int n) {
  constexpr double kHuge = 64e6;
  return n <= 64 || bytes >= kHuge;  // huge: up to kQmmMaxTokens
}

}  // namespace

MatmulPath choose_matmul_path(GgmlType type, int64_t rows, int64_t cols, int n, MatmulChoices use) {
  if (type == GgmlType::F32) return MatmulPath::gemm;
  const double bytes = double(row_size(type, cols)) * double(rows);
  if (use.int8 && gemv_q8_supported(type, n) && (n <= 2 || bytes < 4e6)) return MatmulPath::gemv_q8;
  // F16 goes to cuBLAS as it is (no dequantization): past 8 tokens gemv is FMA-bound (F16 at 16
  // tokens: 1.2 TB/s vs 2.7 at 8, kernels/GEMV.md) and qwen's F16 decode at B = 16 ran at 0.84x
  // llama.cpp through it.
  if (type == GgmlType::F16 && n > 8) return MatmulPath::gemm;
  if (use.f16_copy && n >= kCopyGemmFromTokens) return MatmulPath::gemm;
  if (use.qmm && qmm_supported(type, cols) && n >= 1 && n <= kQmmMaxTokens && qmm_wins(bytes, n))
    return MatmulPath::qmm;
  return gemv_supported(type, n) != GemvKernel::none ? MatmulPath::gemv : MatmulPath::gemm;
}

}  // namespace rz::gpu
