// Gemm::matmul_fp8 (see gemm.hpp): cuBLASLt's E4M3 GEMM on row-major data, the same mapping as
// gemm.cpp's cublasGemmEx call: W row-major [rows, cols] is column-major A [cols, rows] (lda =
// cols) taken transposed, X row-major [n, cols] is B [cols, n] (ldb = cols), Y row-major
// [n, rows] is D [rows, n] (ldd = ldy). FP8 GEMMs on Hopper require exactly this "TN" form.
//
// Scales: with CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F on A and B, cuBLASLt multiplies
// element (i, j) of A·B by A's scale i (W's row) and B's scale j (the token), so per-row weight
// scales and per-token activation scales cost nothing extra. cuBLASLt's heuristics answer per
// shape whether a kernel exists; a shape without one runs with unit scales and
// apply_fp8_scales after (Fp8Scaling::after), as do all shapes when a test forces it.
// Accumulation: cuBLASLt's default (CUBLASLT_MATMUL_DESC_FAST_ACCUM off) promotes the tensor
// cores' partial sums to fp32 regularly, the accurate mode.
//
// One plan (descriptors and the heuristic's first algorithm) per (rows, cols, n, ldy, mode),
// made on first use; at most kMaxPlans are kept (a server's prompt chunks take many n), past
// that all are dropped and made again as needed.
#include <climits>
#include <string>

#include "formats/common.hpp"
#include "gpu/cuda_check.hpp"
#include "gpu/gemm.hpp"
#include "kernels/fp8.hpp"

namespace rz::gpu {

namespace {

constexpr size_t kMaxPlans = 512;

template <typename T>
void set_attr(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const T& v) {
  RZ_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, a, &v, sizeof(v)));
}

}  // namespace

Gemm::LtPlan* Gemm::fp8_plan(int64_t rows, int64_t cols, int64_t n, int64_t ldy, bool outer,
                             const float* w_scale, const float* x_scale) {
  const Fp8Key key{rows, cols, n, ldy, outer};
  if (auto it = fp8_plans_.find(key); it != fp8_plans_.end()) return it->second.get();
  if (fp8_plans_.size() >= kMaxPlans) fp8_plans_.clear();
  auto p = describe_lt(CUDA_R_8F_E4M3, rows, cols, n, ldy);
  if (outer) {  // the heuristic wants the scale pointers of a vector scale mode set
    const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    set_attr(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, mode);
    set_attr(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, mode);
    set_attr(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(w_scale));
    set_attr(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(x_scale));
  }
  cublasLtMatmulHeuristicResult_t res{};
  cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
  const int found = lt_heuristic(*p, 1, &res, st);
  // NOT_SUPPORTED (or no result): no kernel for this combination; so is INVALID_VALUE for the
  // outer-vector mode (what cuBLASLt answers where the mode does not exist). Anything else is an
  // error.
  if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED &&
      !(outer && st == CUBLAS_STATUS_INVALID_VALUE))
    throw_cublas(st, "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__);
  p->ok = found > 0;
  if (p->ok) p->algo = res.algo;
  return fp8_plans_.emplace(key, std::move(p)).first->second.get();
}

void Gemm::matmul_fp8(const uint8_t* w, const float* w_scale, const uint8_t* x,
                      const float* x_scale, float* y, int64_t rows, int64_t cols, int64_t n_tokens,
                      int64_t ldy) {
  // The message's prefix, built only when a check fails (this runs for every FP8 matmul).
  const auto fail = [&](const char* why) {
    return Error("gemm fp8 [" + std::to_string(n_tokens) + ", " + std::to_string(cols) + "] x [" +
                 std::to_string(rows) + ", " + std::to_string(cols) + "]ᵀ: " + why);
  };
  if (rows < 1 || cols < 1 || n_tokens < 0 || rows > INT_MAX || cols > INT_MAX || n_tokens > 65535)
    throw fail("rows and cols must be in 1..INT_MAX, n_tokens in 0..65535");
  if (cols % 16 != 0 || rows % 16 != 0) throw fail("rows and cols must be multiples of 16");
  if (ldy == 0) ldy = rows;
  if (ldy < rows || ldy > INT_MAX || ldy % 4 != 0)
    throw fail("ldy must be a multiple of 4 in rows..INT_MAX");
  if (n_tokens == 0) return;
  if (!w || !w_scale || !x || !x_scale || !y) throw fail("null pointer");
  for (const void* p :
       {static_cast<const void*>(w), static_cast<const void*>(x), static_cast<const void*>(y)})
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) throw fail("pointers must be 16-byte aligned");
  lt();

  LtPlan* plan = nullptr;
  bool outer = false;
  if (fp8_scaling_ != Fp8Scaling::after) {
    plan = fp8_plan(rows, cols, n_tokens, ldy, true, w_scale, x_scale);
    outer = plan->ok;
    if (!outer && fp8_scaling_ == Fp8Scaling::outer_vector)
      throw fail("cuBLASLt has no FP8 kernel with per-row scales for this shape");
  }
  if (!outer) {
    plan = fp8_plan(rows, cols, n_tokens, ldy, false, nullptr, nullptr);
    if (!plan->ok)
      throw fail(
          "cuBLASLt has no E4M3 GEMM for this shape on this device (FP8 needs compute "
          "capability 8.9 or later)");
  }
  if (outer) {
    set_attr(plan->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(w_scale));
    set_attr(plan->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(x_scale));
  }
  const float alpha = 1.0f, beta = 0.0f;
  RZ_CUBLAS_CHECK(cublasLtMatmul(lt_, plan->op, &alpha, w, plan->a, x, plan->b, &beta, y, plan->d,
                                 y, plan->d, &plan->algo, workspace_.get(), workspace_.bytes(),
                                 stream_));
  if (!outer) apply_fp8_scales(y, w_scale, x_scale, rows, n_tokens, ldy, stream_);
  last_fp8_scaling_ = outer ? Fp8Scaling::outer_vector : Fp8Scaling::after;
}

}  // namespace rz::gpu
