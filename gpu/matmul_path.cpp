// choose_matmul_path (see matmul_path.hpp for the measurements behind the rule).
#include "gpu/matmul_path.hpp"

#include "formats/common.hpp"
#include "kernels/gemv.hpp"
#include "kernels/gemv_q8.hpp"
#include "kernels/qmm.hpp"

namespace rz::gpu {
namespace {

// wide: qmm runs its wide kernel past 64 tokens (qmm_runs_wide), then every matrix without a copy
// takes it to kQmmMaxTokens. It took 1,536-column matrices only to 128 tokens while its grid was
// fixed (two warpgroups a block, the staged kernel's splits): qwen2.5-1.5b's steps at B = 192 /
// 256 ran 4-5 % slower with it than with dequantize + cuBLAS
// (bench/gpu-runs/2026-11-28-h200-qmm-wide.log). With its grid chosen per shape (wide_groups,
// wide_splits) it beats dequantize + cuBLAS on every matrix of qwen2.5-1.5b and llama3.1-8b at
// 65-256 tokens, Q4_K and Q6_K (qwen's QKV [2,048 x 1,536] at 256 tokens 10.4 us against 18.0,
// its gate+up 50.3 against 68.9; bench/gpu-runs/2026-11-29-h200-wide-groups.log); the one loss
// measured is a lone Q6_K [8,960 x 1,536] gate or up at 160-256 tokens (42 against 35-37 us),
// which a model runs only when its gate and up are not one matrix. Without the wide kernel
// (before sm_90, or not built for sm_90a) qmm's staged kernel keeps 64 tokens, and the matrices of
// 32 MB or more 128: measured on an H200 with the wide kernel off (RZ_QMM_WIDE_OFF=1, the only
// device at hand), llama3.1-8b Q4_K_M without copies B = 80 / 96 / 128 +7 / +6 / +5 % against
// dequantize + cuBLAS there (bench/gpu-runs/2026-11-29-h200-staged-128.log; per call at 128 tokens
// gate+up 174 against 235 us, ffn_down 93 against 128); it was the matrices of 64 MB (a
// vocabulary's output) only. Smaller ones keep dequantize + cuBLAS past 64 tokens: qwen2.5-1.5b's
// 7.7 MB gate or up at 128 tokens 33 against 30 us, and its decode at B = 128 ran 9 % slower with
// qmm on its small matrices (an earlier staged kernel). Every matrix to 256 tokens on the staged
// kernel with two row tiles a warp (kernels/QMM.md, attempt 25) was measured too, on the H200 with
// the wide kernel off and without copies: qwen2.5-1.5b B = 128 / 192 / 256 -3 / -3 / -19 % against
// this rule (bench/gpu-runs/2026-11-29-h200-staged-rows2-checks.log), so the cap stays.
bool qmm_wins(double bytes, int n, bool wide) {
  constexpr double kLarge = 32e6;
  if (n <= 64 || wide) return true;
  return bytes >= kLarge && n <= 128;
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
      qmm_wins(bytes, n, use.qmm_wide))
    return MatmulPath::qmm;
  return gemv_supported(type, n) != GemvKernel::none ? MatmulPath::gemv : MatmulPath::gemm;
}

}  // namespace rz::gpu
