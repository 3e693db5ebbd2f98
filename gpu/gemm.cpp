// Gemm (see gemm.hpp): cublasGemmEx on row-major data.
//
// Row-major <-> column-major mapping. cuBLAS reads column-major; a row-major matrix M [a, b]
// with row stride b is, read column-major, Mᵀ [b, a] with leading dimension b. So:
//   W row-major [rows, cols]      = column-major A [cols, rows], lda = cols  (A = Wᵀ)
//   X row-major [n_tokens, cols]  = column-major B [cols, n_tokens], ldb = cols (B = Xᵀ)
//   Y row-major [n_tokens, rows]  = column-major C [rows, n_tokens], ldc = rows (C = Yᵀ)
// and Y = X · Wᵀ  <=>  Yᵀ = W · Xᵀ  <=>  C = Aᵀ · B, i.e.
//   cublasGemmEx(OP_T, OP_N, m = rows, n = n_tokens, k = cols, A = W, lda = cols,
//                B = X, ldb = cols, C = Y, ldc = rows)
// (the "TN" layout: both operands are read along k, contiguous, which cuBLAS handles best).
#include "gpu/gemm.hpp"

#include <climits>
#include <string>

#include "formats/common.hpp"
#include "gpu/cuda_check.hpp"

namespace rz::gpu {
namespace {

void check_shape(const char* fn, const void* w, const void* x, const float* y, int64_t rows,
                 int64_t cols, int64_t n_tokens) {
  const std::string what = std::string(fn) + " [" + std::to_string(n_tokens) + ", " +
                           std::to_string(cols) + "] x [" + std::to_string(rows) + ", " +
                           std::to_string(cols) + "]ᵀ";
  if (rows < 1 || cols < 1 || n_tokens < 0)
    throw Error(what + ": rows and cols must be >= 1, n_tokens >= 0");
  if (rows > INT_MAX || cols > INT_MAX || n_tokens > INT_MAX)
    throw Error(what + ": a dimension exceeds INT_MAX");
  if (n_tokens > 0 && (!w || !x || !y)) throw Error(what + ": null pointer");
}

}  // namespace

Gemm::Gemm(cudaStream_t stream, size_t workspace_bytes) : stream_(stream) {
  RZ_CUBLAS_CHECK(cublasCreate(&handle_));
  try {
    workspace_ = DeviceBuffer<uint8_t>(workspace_bytes);
    // cublasSetStream resets the workspace to cuBLAS' default pool, so the workspace comes after.
    RZ_CUBLAS_CHECK(cublasSetStream(handle_, stream_));
    RZ_CUBLAS_CHECK(cublasSetWorkspace(handle_, workspace_.get(), workspace_.bytes()));
    RZ_CUBLAS_CHECK(cublasSetPointerMode(handle_, CUBLAS_POINTER_MODE_HOST));
    RZ_CUBLAS_CHECK(cublasSetAtomicsMode(handle_, CUBLAS_ATOMICS_NOT_ALLOWED));  // deterministic
  } catch (...) {
    cublasDestroy(handle_);
    throw;
  }
}

Gemm::~Gemm() {
  fp8_plans_.clear();
  x16_plans_.clear();
  if (lt_) cublasLtDestroy(lt_);
  if (handle_) cublasDestroy(handle_);
}

void Gemm::matmul(HalfType type, const void* w, const float* x, float* y, int64_t rows,
                  int64_t cols, int64_t n_tokens) {
  check_shape("gemm", w, x, y, rows, cols, n_tokens);
  if (n_tokens == 0) return;
  const size_t need = static_cast<size_t>(n_tokens * cols);
  if (x16_.size() < need) {
    // Earlier calls queued on the stream may still read the old scratch: let them finish first.
    RZ_CUDA_CHECK(cudaStreamSynchronize(stream_));
    x16_ = DeviceBuffer<uint16_t>();
    x16_ = DeviceBuffer<uint16_t>(need);
  }
  convert_to_half(x, x16_.get(), type, n_tokens * cols, stream_);
  matmul_x16(type, w, x16_.get(), y, rows, cols, n_tokens);
}

std::unique_ptr<Gemm::LtPlan> Gemm::describe_lt(cudaDataType_t in, int64_t rows, int64_t cols,
                                                int64_t n, int64_t ldy) {
  auto p = std::make_unique<LtPlan>();
  RZ_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t t = CUBLAS_OP_T, nt = CUBLAS_OP_N;
  RZ_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t));
  RZ_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &nt, sizeof nt));
  RZ_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->a, in, uint64_t(cols), uint64_t(rows), cols));
  RZ_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->b, in, uint64_t(cols), uint64_t(n), cols));
  RZ_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->d, CUDA_R_32F, uint64_t(rows), uint64_t(n), ldy));
  return p;
}

void Gemm::matmul_f32(const float* w, const float* x, float* y, int64_t rows, int64_t cols,
                      int64_t n_tokens) {
  check_shape("sgemm", w, x, y, rows, cols, n_tokens);
  if (n_tokens == 0) return;
  const float alpha = 1.0f, beta = 0.0f;
  const int m = static_cast<int>(rows), n = static_cast<int>(n_tokens), k = static_cast<int>(cols);
  // The handle's math mode is the default (CUBLAS_DEFAULT_MATH): no TF32 for Sgemm.
  RZ_CUBLAS_CHECK(
      cublasSgemm(handle_, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, w, k, x, k, &beta, y, m));
}

void Gemm::matmul_x16(HalfType type, const void* w, const void* x16, float* y, int64_t rows,
                      int64_t cols, int64_t n_tokens, int64_t ldy) {
  check_shape("gemm", w, x16, y, rows, cols, n_tokens);
  if (ldy != 0 && (ldy < rows || ldy > INT_MAX)) throw Error("gemm: ldy must be in rows..INT_MAX");
  if (n_tokens == 0) return;
  if (!x16_choices_.empty() &&
      matmul_x16_tuned(type, w, x16, y, rows, cols, n_tokens, ldy > 0 ? ldy : rows))
    return;
  RZ_CUBLAS_CHECK(gemm_ex(type, w, x16, y, rows, cols, n_tokens, ldy > 0 ? ldy : rows));
}

cudaDataType_t Gemm::cuda_type(HalfType t) { return t == HalfType::f16 ? CUDA_R_16F : CUDA_R_16BF; }

cublasStatus_t Gemm::gemm_ex(HalfType type, const void* w, const void* x16, float* y, int64_t rows,
                             int64_t cols, int64_t n, int64_t ldy) {
  const float alpha = 1.0f, beta = 0.0f;  // beta = 0: y is not read, so it may hold garbage
  const int m_ = static_cast<int>(rows), n_ = static_cast<int>(n), k_ = static_cast<int>(cols);
  return cublasGemmEx(handle_, CUBLAS_OP_T, CUBLAS_OP_N, m_, n_, k_, &alpha, w, cuda_type(type), k_,
                      x16, cuda_type(type), k_, &beta, y, CUDA_R_32F, static_cast<int>(ldy),
                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

int Gemm::lt_heuristic(const LtPlan& p, int k, cublasLtMatmulHeuristicResult_t* out,
                       cublasStatus_t& st) {
  cublasLtMatmulPreference_t pref = nullptr;
  RZ_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = workspace_.bytes();
  int found = 0;
  st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                            sizeof ws);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulAlgoGetHeuristic(lt(), p.op, p.a, p.b, p.d, p.d, pref, k, out, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  return st == CUBLAS_STATUS_SUCCESS ? found : 0;
}

}  // namespace rz::gpu
