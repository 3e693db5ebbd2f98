// choose_matmul_path (gpu/matmul_path.hpp): the measured rule, checked on the shapes it was
// measured on. No GPU needed.
#include <gtest/gtest.h>

#include "gpu/matmul_path.hpp"

namespace rz::gpu {
namespace {

using P = MatmulPath;
constexpr MatmulChoices kFp32{.qmm = true, .int8 = false};  // the rule before gemv_q8
constexpr MatmulChoices kNoQmm{.qmm = false, .int8 = false};

TEST(MatmulPath, FollowsTheMeasuredRule) {
  const GgmlType q4k = GgmlType::Q4_K;
  // qwen2.5-1.5b attn_q (1.3 MB): qmm (direct to 8 tokens, staged to 64), then cuBLAS
  EXPECT_EQ(choose_matmul_path(q4k, 1536, 1536, 1, kFp32), P::qmm);
  EXPECT_EQ(choose_matmul_path(q4k, 1536, 1536, 8, kFp32), P::qmm);
  EXPECT_EQ(choose_matmul_path(q4k, 1536, 1536, 9, kFp32), P::qmm);
  EXPECT_EQ(choose_matmul_path(q4k, 1536, 1536, 64, kFp32), P::qmm);
  EXPECT_EQ(choose_matmul_path(q4k, 1536, 1536, 65, kFp32), P::gemm);
  // ffn_gate (7.7 MB): qmm to 64, Q6_K too (its direct kernel stages its chunks)
  EXPECT_EQ(choose_matmul_path(q4k, 8960, 1536, 2, kFp32), P::qmm);
  EXPECT_EQ(choose_matmul_path(GgmlType::Q6_K, 8960, 1536, 1, kFp32), P::qmm);
  EXPECT_EQ(choose_matmul_path(GgmlType::Q6_K, 8960, 1536, 3, kFp32), P::qmm);
  EXPECT_EQ(choose_matmul_path(GgmlType::Q8_0, 8960, 1536, 1, kFp32), P::qmm);
  EXPECT_EQ(choose_matmul_path(q4k, 8960, 1536, 64, kFp32), P::qmm);
  EXPECT_EQ(choose_matmul_path(q4k, 8960, 1536, 65, kFp32), P::gemm);
  // the output matrix (131 MB; Q6_K 191 MB): qmm from the first token
  EXPECT_EQ(choose_matmul_path(q4k, 151936, 1536, 1, kFp32), P::qmm);
  EXPECT_EQ(choose_matmul_path(GgmlType::Q6_K, 151936, 1536, 1, kFp32), P::qmm);
  EXPECT_EQ(choose_matmul_path(GgmlType::Q6_K, 151936, 1536, 2, kFp32), P::qmm);
  EXPECT_EQ(choose_matmul_path(GgmlType::Q6_K, 151936, 1536, 3, kFp32), P::qmm);
  EXPECT_EQ(choose_matmul_path(GgmlType::Q6_K, 151936, 1536, 128, kFp32), P::qmm);
  EXPECT_EQ(choose_matmul_path(q4k, 151936, 1536, 129, kFp32), P::gemm);
  // without the wide kernel, matrices of 32 MB or more take qmm to 128 tokens: llama3.1-8b's
  // Q4_K gate+up (66 MB) and ffn_down (33 MB), not its attn_q/o (9.4 MB)
  EXPECT_EQ(choose_matmul_path(q4k, 28672, 4096, 128, kFp32), P::qmm);
  EXPECT_EQ(choose_matmul_path(q4k, 4096, 14336, 128, kFp32), P::qmm);
  EXPECT_EQ(choose_matmul_path(q4k, 4096, 14336, 129, kFp32), P::gemm);
  EXPECT_EQ(choose_matmul_path(q4k, 4096, 4096, 65, kFp32), P::gemm);
  // with qmm's wide kernel (sm_90) every matrix without a copy takes qmm to 256 tokens
  const MatmulChoices wide{.qmm = true, .qmm_wide = true};
  for (int64_t rows : {1536, 8960, 151936}) {
    EXPECT_EQ(choose_matmul_path(q4k, rows, 1536, 65, wide), P::qmm) << rows;
    EXPECT_EQ(choose_matmul_path(q4k, rows, 1536, 128, wide), P::qmm) << rows;
    EXPECT_EQ(choose_matmul_path(q4k, rows, 1536, 129, wide), P::qmm) << rows;
    EXPECT_EQ(choose_matmul_path(GgmlType::Q6_K, rows, 1536, 256, wide), P::qmm) << rows;
    EXPECT_EQ(choose_matmul_path(q4k, rows, 1536, 257, wide), P::gemm) << rows;
    EXPECT_EQ(choose_matmul_path(GgmlType::Q6_K, rows, 4096, 256, wide), P::qmm) << rows;
    EXPECT_EQ(choose_matmul_path(q4k, rows, 4096, 257, wide), P::gemm) << rows;
    EXPECT_EQ(
        choose_matmul_path(q4k, rows, 1536, 65, {.qmm = true, .f16_copy = true, .qmm_wide = true}),
        P::gemm)
        << rows;  // the copy first
  }
  EXPECT_EQ(choose_matmul_path(q4k, 8960, 1536, 65, {.qmm = false, .qmm_wide = true}), P::gemm);
  // qmm off: gemv to 16 tokens, then cuBLAS
  EXPECT_EQ(choose_matmul_path(q4k, 151936, 1536, 1, kNoQmm), P::gemv);
  EXPECT_EQ(choose_matmul_path(q4k, 8960, 1536, 16, kNoQmm), P::gemv);
  EXPECT_EQ(choose_matmul_path(q4k, 8960, 1536, 17, kNoQmm), P::gemm);
  // no qmm kernel: 896 columns (no multiple of 256), F16, F32
  EXPECT_EQ(choose_matmul_path(GgmlType::Q8_0, 4864, 896, 32, kFp32), P::gemm);
  EXPECT_EQ(choose_matmul_path(GgmlType::Q8_0, 4864, 896, 4, kFp32), P::gemv);
  EXPECT_EQ(kF16GemmFromTokens, 2);  // F16: gemv for one token, cuBLAS from two
  EXPECT_EQ(choose_matmul_path(GgmlType::F16, 8960, 1536, 1, kFp32), P::gemv);
  EXPECT_EQ(choose_matmul_path(GgmlType::F16, 8960, 1536, 2, kFp32), P::gemm);
  EXPECT_EQ(choose_matmul_path(GgmlType::F16, 8960, 1536, 8, kNoQmm), P::gemm);
  EXPECT_EQ(choose_matmul_path(GgmlType::F16, 151936, 1536, 1, kNoQmm), P::gemv);
  // BF16: on its fp16 copy from two tokens too, else gemv to 16
  EXPECT_EQ(choose_matmul_path(GgmlType::BF16, 8960, 1536, 1, {.f16_copy = true}), P::gemv);
  EXPECT_EQ(choose_matmul_path(GgmlType::BF16, 8960, 1536, 2, {.f16_copy = true}), P::gemm);
  EXPECT_EQ(choose_matmul_path(GgmlType::BF16, 8960, 1536, 2, kFp32), P::gemv);
  EXPECT_EQ(choose_matmul_path(GgmlType::BF16, 8960, 1536, 16, kFp32), P::gemv);
  EXPECT_EQ(choose_matmul_path(GgmlType::F32, 8960, 1536, 1, kFp32), P::gemm);
}

TEST(MatmulPath, Fp16CopiesTakeCublasFromSeventeenTokens) {
  EXPECT_EQ(MatmulChoices{}.f16_copy, false);
  const MatmulChoices copy{.qmm = true, .f16_copy = true};
  for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q8_0, GgmlType::BF16}) {
    EXPECT_EQ(choose_matmul_path(t, 1536, 1536, kCopyGemmFromTokens, copy), P::gemm);
    EXPECT_EQ(choose_matmul_path(t, 151936, 1536, 64, copy), P::gemm);
    EXPECT_EQ(choose_matmul_path(t, 8960, 1536, 1, copy),
              choose_matmul_path(t, 8960, 1536, 1, kFp32));  // decode: unchanged
    if (t != GgmlType::BF16) {  // (BF16 takes its copy from kF16GemmFromTokens)
      EXPECT_EQ(choose_matmul_path(t, 8960, 1536, kCopyGemmFromTokens - 1, copy),
                choose_matmul_path(t, 8960, 1536, kCopyGemmFromTokens - 1, kFp32));
    }
  }
  EXPECT_EQ(choose_matmul_path(GgmlType::Q4_K, 1536, 1536, 16, copy), P::qmm);
  EXPECT_EQ(choose_matmul_path(GgmlType::Q4_K, 1536, 1536, 32, kFp32), P::qmm);  // no copy
}

TEST(MatmulPath, Int8ActivationsTakeOneAndTwoTokensAndSmallMatricesToFour) {
  EXPECT_EQ(MatmulChoices{}.int8, false);  // opt-in, as GpuExecutorOptions::int8_activations
  const MatmulChoices all{.qmm = true, .int8 = true};
  for (GgmlType t :
       {GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1}) {
    // the vocabulary matrix too (qmm held it from the first token before)
    EXPECT_EQ(choose_matmul_path(t, 151936, 1536, 1, all), P::gemv_q8);
    EXPECT_EQ(choose_matmul_path(t, 151936, 1536, 2, all), P::gemv_q8);
    EXPECT_EQ(choose_matmul_path(t, 151936, 1536, 3, all), P::qmm);
    EXPECT_EQ(choose_matmul_path(t, 1536, 1536, 4, all), P::gemv_q8);  // < 4 MB
    EXPECT_EQ(choose_matmul_path(t, 1536, 1536, 5, all), P::qmm);
    EXPECT_EQ(choose_matmul_path(t, 8960, 1536, 3, all), P::qmm);
  }
  // no int8 kernel for the float types
  EXPECT_EQ(choose_matmul_path(GgmlType::F16, 1536, 1536, 1, all), P::gemv);
  EXPECT_EQ(choose_matmul_path(GgmlType::BF16, 1536, 1536, 1, all), P::gemv);
  EXPECT_EQ(choose_matmul_path(GgmlType::F32, 1536, 1536, 1, all), P::gemm);
  // int8 off: the fp32-activation rule
  EXPECT_EQ(choose_matmul_path(GgmlType::Q4_K, 1536, 1536, 1, kFp32), P::qmm);
  EXPECT_EQ(choose_matmul_path(GgmlType::Q6_K, 1536, 1536, 1, kFp32), P::qmm);
}

}  // namespace
}  // namespace rz::gpu
