// choose_matmul_path (gpu/matmul_path.hpp): the measured rule, checked on the shapes it was
// measured on. No GPU needed.
#include <gtest/gtest.h>

#include "gpu/matmul_path.hpp"

namespace rz::gpu {
namespace {

using P = MatmulPath;

TEST(MatmulPath, FollowsTheMeasuredRule) {
  const GgmlType q4k = GgmlType::Q4_K;
  // qwen2.5-1.5b attn_q (1.3 MB): gemv to 8 tokens, qmm to 64, then cuBLAS
  EXPECT_EQ(choose_matmul_path(q4k, 1536, 1536, 1, true), P::gemv);
  EXPECT_EQ(choose_matmul_path(q4k, 1536, 1536, 8, true), P::gemv);
  EXPECT_EQ(choose_matmul_path(q4k, 1536, 1536, 9, true), P::qmm);
  EXPECT_EQ(choose_matmul_path(q4k, 1536, 1536, 64, true), P::qmm);
  EXPECT_EQ(choose_matmul_path(q4k, 1536, 1536, 65, true), P::gemm);
  // ffn_gate (7.7 MB): qmm from 3 tokens to 64
  EXPECT_EQ(choose_matmul_path(q4k, 8960, 1536, 2, true), P::gemv);
  EXPECT_EQ(choose_matmul_path(q4k, 8960, 1536, 3, true), P::qmm);
  EXPECT_EQ(choose_matmul_path(q4k, 8960, 1536, 64, true), P::qmm);
  EXPECT_EQ(choose_matmul_path(q4k, 8960, 1536, 65, true), P::gemm);
  // the output matrix (131 MB): qmm from the first token; Q6_K (191 MB) from the third
  EXPECT_EQ(choose_matmul_path(q4k, 151936, 1536, 1, true), P::qmm);
  EXPECT_EQ(choose_matmul_path(GgmlType::Q6_K, 151936, 1536, 2, true), P::gemv);
  EXPECT_EQ(choose_matmul_path(GgmlType::Q6_K, 151936, 1536, 3, true), P::qmm);
  EXPECT_EQ(choose_matmul_path(GgmlType::Q6_K, 151936, 1536, 128, true), P::qmm);
  EXPECT_EQ(choose_matmul_path(q4k, 151936, 1536, 129, true), P::gemm);
  // qmm off: gemv to 16 tokens, then cuBLAS
  EXPECT_EQ(choose_matmul_path(q4k, 151936, 1536, 1, false), P::gemv);
  EXPECT_EQ(choose_matmul_path(q4k, 8960, 1536, 16, false), P::gemv);
  EXPECT_EQ(choose_matmul_path(q4k, 8960, 1536, 17, false), P::gemm);
  // no qmm kernel: 896 columns (no multiple of 256), F16, F32
  EXPECT_EQ(choose_matmul_path(GgmlType::Q8_0, 4864, 896, 32, true), P::gemm);
  EXPECT_EQ(choose_matmul_path(GgmlType::Q8_0, 4864, 896, 4, true), P::gemv);
  EXPECT_EQ(choose_matmul_path(GgmlType::F16, 8960, 1536, 8, true), P::gemv);
  EXPECT_EQ(choose_matmul_path(GgmlType::F16, 8960, 1536, 9, true), P::gemm);
  EXPECT_EQ(choose_matmul_path(GgmlType::F16, 8960, 1536, 9, false), P::gemm);
  EXPECT_EQ(choose_matmul_path(GgmlType::BF16, 8960, 1536, 16, true), P::gemv);
  EXPECT_EQ(choose_matmul_path(GgmlType::F32, 8960, 1536, 1, true), P::gemm);
}

}  // namespace
}  // namespace rz::gpu
