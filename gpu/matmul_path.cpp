// choose_matmul_path (see matmul_path.hpp for the measurements behind the rule).
#include "gpu/matmul_path.hpp"

#include "formats/common.hpp"
#include "kernels/gemv.hpp"
#include "kernels/gemv_q8.hpp"
#include "kernels/qmm.hpp"

namespace rz::gpu {
namespace {

// wide: qmm runs its wide kernel past 64 tokens (qmm_runs_wide). It takes every matrix to 128
// tokens, and past that those of at least 4,096 columns and the huge ones: with 1,536 columns (6
// chunks a block) qwen2.5-1.5b's steps at B = 192 / 256 ran 4-5 % slower with it than with
// dequantize + cuBLAS, while llama3.1-8b's gained 24-29 %
// (bench/gpu-runs/2026-11-28-h200-qmm-wide.log).
bool qmm_wins(double bytes, int64_t cols, int n, bool wide) {
  constexpr double kHuge = 64e6;
  if (n <= 64) return true;
  if (wide) return n <= 128 || cols >= 4096 || bytes >= kHuge;
  return bytes >= kHuge && n <= 128;
}

}  // namespace

MatmulPath choose_matmul_path(GgmlType type, int64_t rows, int64_t cols, int n, MatmulChoices use) {
  if (type == GgmlType::F32) return MatmulPath::gemm;
  const double bytes = double(row_size(type, cols)) * double(rows);
  if (use.int8 && gemv_q8_supported(type, n) && (n <= 2 || bytes < 4e6)) return MatmulPath::gemv_q8;
  // F16 goes to cuBLAS as it is (no dequantization) from kF16GemmFromTokens tokens, and BF16 on its
  // fp16 copy where it has one.
  if ((type == GgmlType::F16 || (type == GgmlType::BF16 && use.f16_copy)) &&
      n >= kF16GemmFromTokens)
    return MatmulPath::gemm;
  if (use.f16_copy && n >= kCopyGemmFromTokens) return MatmulPath::gemm;
  if (use.qmm && qmm_supported(type, cols) && n >= 1 && n <= kQmmMaxTokens &&
      qmm_wins(bytes, cols, n, use.qmm_wide))
    return MatmulPath::qmm;
  return gemv_supported(type, n) != GemvKernel::none ? MatmulPath::gemv : MatmulPath::gemm;
}

}  // namespace rz::gpu
