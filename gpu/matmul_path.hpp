// Which kernel multiplies a weight matrix by n activation rows in the CUDA executor: the one
// place that chooses between gemv (kernels/gemv.hpp), qmm (kernels/qmm.hpp) and dequantize +
// cuBLAS (gpu/gemm.hpp). The rule is read off QmmBench.DISABLED_Compare and the decode bench on
// an H200 (kernels/QMM.md): up to 8 tokens (to 16 on matrices up to 16 MiB, 4 MiB for Q6_K /
// Q2_K: qmm_runs_direct) qmm runs its direct kernel (weights straight into registers, no block-wide
// staging), which beat gemv on every measured Q4_K shape from the first token (llama3.1-8b
// ffn_down 15.6 vs 27.3 us at n = 1, 16.8 vs 40.5 at n = 4) and every type from the third; Q6_K
// from the first token too since its direct kernel stages each warp's chunks (llama3.1-8b
// ffn_down 27.5 vs gemv's 36.2 us at n = 1, output 222 vs 224). qmm's staged kernel takes the rest
// of 9-64 tokens; beyond that cuBLAS's fp16 GEMM amortizes the dequantization (the bench showed qmm
// ahead on small matrices up to 128 tokens, but decode at batch 128 ran 9 % slower with it). Large
// matrices (>= 32 MB: llama3.1-8b's gate+up and ffn_down, a vocabulary's output rows) take qmm up
// to 128 tokens (372 us vs cuBLAS's 484 for qwen2.5-1.5b's Q4_K output at n = 128; llama3.1-8b's
// decode without copies and without the wide kernel +5-7 % at B = 80-128). Where qmm has its wide
// kernel (wgmma, sm_90: kernels/QMM.md, "The wide kernel" and "The wide kernel's grid"), matrices
// without an fp16 copy take qmm to 256 tokens (llama8b gate+up Q4_K at 128 / 256 tokens 81 / 159 us
// against dequantize + cuBLAS's 235 / 249; without the copies llama3.1-8b's decode at B = 128 8,000
// -> 13,000 tokens/s; qwen2.5-1.5b's QKV at 256 tokens 10.4 against 18.0 us since the kernel's grid
// is chosen per shape); inside qmm its integer form takes 33-64 tokens of
// the matrices of 32 MB and more (kernels/qmm_wide.hpp). F16 matrices go to cuBLAS as they are from
// 2 tokens (kF16GemmFromTokens), BF16 ones on their fp16 copy. With int8 activations on (opt-in),
// gemv_q8 (kernels/gemv_q8.hpp) takes every matrix of its types at 1-2 tokens, and matrices under 4
// MB to 4 tokens. A quantized matrix with an fp16 copy (the default where the copies fit,
// GpuExecutorOptions::fp16_copies) goes to cuBLAS on the copy from 17 tokens.
#pragma once
#include <cstddef>
#include <cstdint>

#include "formats/ggml_types.hpp"

namespace rz::gpu {

enum class MatmulPath : uint8_t { gemv, gemv_q8, qmm, gemm };

// Most tokens a pass may send to qmm (the executor sizes qmm's buffers for this many).
constexpr int kQmmMaxTokens = 256;

struct MatmulChoices {
  bool qmm = true;    // false leaves qmm out (GpuExecutorOptions::qmm)
  bool int8 = false;  // true lets gemv_q8 in (GpuExecutorOptions::int8_activations)
  // The matrix has an fp16 copy (GpuExecutorOptions::fp16_copies): from kCopyGemmFromTokens
  // tokens cuBLAS on the copy takes the place of qmm, there being no dequantization to pay for.
  bool f16_copy = false;
  // qmm runs its wide kernel on this device (qmm_runs_wide: sm_90): then matrices without an fp16
  // copy take qmm past 64 tokens, to kQmmMaxTokens.
  bool qmm_wide = false;
};

// Measured on the H200 (bench/gpu-runs/2026-11-24-h200-copy-gemm-threshold.log, rz bench, Q4_K_M):
// with the copies from 17 tokens, qwen2.5-1.5b B = 32 / 64 9,481 / 13,049 -> 12,527 / 21,957
// tokens/s and llama3.1-8b 4,269 / 5,262 -> 4,692 / 7,504; from 9, qwen B = 9-16 gained 12 % but
// llama3.1-8b lost 3 % (qmm reads a quarter of the bytes), so 17 for all. Rechecked after qmm's
// staged kernel took the integer form
// (bench/gpu-runs/2026-11-28-h200-copy-gemm-threshold-recheck.log): qmm to 24 tokens made
// llama3.1-8b's B = 24 step 5.53 -> 6.86 ms, qwen2.5-1.5b's 2.07 -> 2.53.
constexpr int kCopyGemmFromTokens = 17;

// F16 matrices take cuBLAS on the matrix as it is from this many tokens, and BF16 matrices on
// their fp16 copy where they have one; one token takes gemv (fp32 activations, the CUDA cores). It
// was 9: past 8 tokens gemv is FMA-bound (F16 at 16 tokens 1.2 TB/s against 2.7 at 8,
// kernels/GEMV.md). From 2 (H200, qwen2.5-1.5b F16, rz bench, prompt 128 + 128 generated, two
// alternating rounds, bench/gpu-runs/2026-11-28-h200-f16-cublas-from-2.log): B = 2 1,150 / 1,135 ->
// 1,147 / 1,166 tokens/s, B = 3 1,334 -> 1,693 / 1,728, B = 4 1,833 -> 2,112 / 2,153, B = 6 1,944
// -> 3,176 / 3,206, B = 8 2,734 -> 4,148 / 4,238; a B = 4 step (PDL off, own times) spent 617 + 484
// us in gemv on gate+up and ffn_down, 496 + 267 (+ 43 of split-K reduction) in cuBLAS. BF16 with
// its fp16 copy had gemv to 16 tokens; from 2 on the copy (qwen2.5-1.5b BF16,
// bench/gpu-runs/2026-11-28-h200-bf16-copy-from-2.log): B = 4 1,810 / 1,810 -> 2,277 / 2,324, B = 8
// 2,724 / 2,718 -> 4,237 / 4,251, B = 16 3,045 / 3,030 -> 7,616 / 7,746 tokens/s, B = 2 level.
// (Without a copy BF16 keeps gemv to 16 tokens: cuBLAS would need the matrix converted each call.)
// One token stays on gemv: cuBLAS from 1 made qwen2.5-1.5b F16's tg128 659 -> 589 tokens/s (the
// F16 log, call 12).
constexpr int kF16GemmFromTokens = 2;

// The path for a [rows, cols] matrix of `type` times n tokens. F32 matrices always take gemm
// (the executor's fp32 GEMM).
MatmulPath choose_matmul_path(GgmlType type, int64_t rows, int64_t cols, int n,
                              MatmulChoices use = {});

}  // namespace rz::gpu
