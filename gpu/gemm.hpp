// Dense GEMM for prefill and large batches: Y = X · Wᵀ through cuBLAS, with 16-bit operands
// (FP16 or BF16, e.g. weights dequantized by kernels/dequant.hpp) and FP32 output and
// accumulation (CUBLAS_COMPUTE_32F); and with FP8 (E4M3) operands through cuBLASLt
// (gemm_fp8.cpp). One Gemm owns a cuBLAS and a cuBLASLt handle bound to one stream, their
// workspace and a scratch buffer for converting fp32 activations; it is not thread-safe (one
// owner, the executor's stream).
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cublasLt.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

#include "gpu/device_buffer.hpp"
#include "kernels/dequant.hpp"

namespace rz::gpu {

class Gemm {
 public:
  static constexpr size_t kDefaultWorkspaceBytes = size_t{32} << 20;  // cuBLAS' advice for Hopper

  // Creates the handle on the current device and binds it to `stream` (all work is queued there).
  explicit Gemm(cudaStream_t stream, size_t workspace_bytes = kDefaultWorkspaceBytes);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  cudaStream_t stream() const { return stream_; }

  // Y = X · Wᵀ, asynchronous on stream():
  //   w: device [rows, cols] of `type`, row-major (row stride cols)
  //   x: device [n_tokens, cols] fp32, row-major; rounded to `type` (nearest even) into this
  //      object's scratch first (grown on demand: growing synchronizes the stream)
  //   y: device [n_tokens, rows] fp32, row-major; fully overwritten (never read)
  // Throws rz::Error for rows or cols < 1, n_tokens < 0, any dimension > INT_MAX or null
  // pointers; n_tokens == 0 does nothing. cuBLAS / CUDA failures as rz::gpu::CudaError.
  void matmul(HalfType type, const void* w, const float* x, float* y, int64_t rows, int64_t cols,
              int64_t n_tokens);

  // The same with x already in `type`: device [n_tokens, cols] 16-bit, row-major.
  // Y = X · Wᵀ with fp32 weights and activations, FP32 math (cublasSgemm, no TF32): for models
  // whose weights are stored in F32, so that they run at full precision.
  void matmul_f32(const float* w, const float* x, float* y, int64_t rows, int64_t cols,
                  int64_t n_tokens);
  // ldy: floats between consecutive tokens' rows of y (0: rows), so that a slice of W's rows can
  // write its columns of a wider Y.
  void matmul_x16(HalfType type, const void* w, const void* x16, float* y, int64_t rows,
                  int64_t cols, int64_t n_tokens, int64_t ldy = 0);

  // FP8 rows times FP8 activation rows (both as kernels/fp8.hpp rounds them), on stream():
  //   y[t, r] = w_scale[r] * x_scale[t] * sum_c e4m3(W[r, c]) * e4m3(X[t, c])
  //   w: device [rows, cols] E4M3 codes; w_scale [rows]; x: device [n_tokens, cols] E4M3 codes;
  //   x_scale [n_tokens]; y: device [n_tokens, rows] fp32 (row stride ldy, 0: rows), overwritten.
  // cuBLASLt's E4M3 GEMM with fp32 accumulation and output (the "TN" layout FP8 requires), the
  // scales applied by its outer-vector scale mode (one per row of W, one per token), or, where
  // cuBLASLt offers no such kernel for the shape, with unit scales and kernels/fp8.hpp's
  // apply_fp8_scales after. rows and cols must be multiples of 16, ldy of 4, the pointers
  // 16-byte aligned.
  // Throws rz::Error for bad shapes, or when cuBLASLt has no FP8 kernel at all (before Ada/Hopper).
  void matmul_fp8(const uint8_t* w, const float* w_scale, const uint8_t* x, const float* x_scale,
                  float* y, int64_t rows, int64_t cols, int64_t n_tokens, int64_t ldy = 0);

  // Chooses matmul_x16's kernel by measurement for a [rows, cols] matrix of `type` (y's row
  // stride ldy, 0: rows) at n_lo..n_hi tokens (gemm_tuned.cpp): per token bucket (x16_bucket),
  // the fastest of cuBLASLt's heuristic candidates and cublasGemmEx's own choice, each timed at
  // the bucket's top token count on these pointers: w the matrix, x16 [n_hi, cols] and y
  // [n_hi, ldy] scratch (y is overwritten). Later matmul_x16 calls of that shape whose token
  // count falls in a tuned bucket run the chosen kernel; other calls keep cublasGemmEx. Runs the
  // stream's queued work first and synchronizes it (not while a graph is being captured). A
  // bucket already measured in this process on this device (by any Gemm) is not measured again:
  // every Gemm of a process takes the same choice. Returns the buckets tuned and how many of
  // them run a cuBLASLt kernel.
  struct TuneCount {
    int buckets = 0, lt = 0;
  };
  TuneCount tune_x16(HalfType type, const void* w, const void* x16, float* y, int64_t rows,
                     int64_t cols, int64_t n_lo, int64_t n_hi, int64_t ldy = 0);
  // The top of n's token bucket: n rounded up to 8 up to 64 tokens, to 16 up to 128, to 32 up to
  // 256, to 64 beyond (the CUDA executor pads decode graphs to the same steps).
  static int64_t x16_bucket(int64_t n);

  // A tuned choice, and its key: (type, rows, cols, ldy, bucket top); plans key the exact n.
  struct X16Choice {
    bool lt = false;  // false: cublasGemmEx's own choice was the fastest
    cublasLtMatmulAlgo_t algo{};
  };
  using X16Key = std::tuple<HalfType, int64_t, int64_t, int64_t, int64_t>;

  // How matmul_fp8 applies the scales; `automatic` tries outer_vector first, per shape.
  enum class Fp8Scaling : uint8_t { automatic, outer_vector, after };
  void set_fp8_scaling(Fp8Scaling s) { fp8_scaling_ = s; }  // tests force one
  // The way the last matmul_fp8 call applied its scales (automatic before any call).
  Fp8Scaling last_fp8_scaling() const { return last_fp8_scaling_; }

 private:
  // One shape's cuBLASLt descriptors and algorithm (matmul_fp8's plans, gemm_fp8.cpp; the tuned
  // matmul_x16's, gemm_tuned.cpp).
  struct LtPlan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo{};
    bool ok = false;  // an algorithm runs this shape (found by the heuristic, or checked)
    LtPlan() = default;
    LtPlan(const LtPlan&) = delete;
    LtPlan& operator=(const LtPlan&) = delete;
    ~LtPlan() {
      if (d) cublasLtMatrixLayoutDestroy(d);
      if (b) cublasLtMatrixLayoutDestroy(b);
      if (a) cublasLtMatrixLayoutDestroy(a);
      if (op) cublasLtMatmulDescDestroy(op);
    }
  };
  using Fp8Key = std::tuple<int64_t, int64_t, int64_t, int64_t, bool>;  // rows, cols, n, ldy, outer
  // The plan for the shape (made on first use; null when cuBLASLt has no kernel for it).
  // outer: the scale pointers go into the descriptor before the heuristic (which checks them).
  LtPlan* fp8_plan(int64_t rows, int64_t cols, int64_t n, int64_t ldy, bool outer,
                   const float* w_scale, const float* x_scale);

  // matmul_x16 through cuBLASLt (gemm_tuned.cpp): the tuned choice per (type, rows, cols, ldy,
  // bucket top), and a plan (descriptors, the algorithm checked for that n) per exact n.
  // Runs y = x16 · wᵀ through the tuned cuBLASLt kernel when one was chosen for this call's
  // shape and bucket and accepts its n; false leaves the call to cublasGemmEx.
  bool matmul_x16_tuned(HalfType type, const void* w, const void* x16, float* y, int64_t rows,
                        int64_t cols, int64_t n, int64_t ldy);
  LtPlan* x16_plan(HalfType type, int64_t rows, int64_t cols, int64_t n, int64_t ldy,
                   const cublasLtMatmulAlgo_t& algo);
  cublasLtHandle_t lt();  // created on first use
  // cublasGemmEx with its own kernel choice: y [n, ldy] = x16 [n, cols] · w [rows, cols]ᵀ
  // (shapes checked by the caller); its status, for matmul_x16 to check and tune_x16 to time.
  cublasStatus_t gemm_ex(HalfType type, const void* w, const void* x16, float* y, int64_t rows,
                         int64_t cols, int64_t n, int64_t ldy);
  // cuBLASLt's first `k` heuristic candidates for `p`'s descriptors within this object's
  // workspace, into out[0..k); returns how many, and the heuristic's status in `st`.
  int lt_heuristic(const LtPlan& p, int k, cublasLtMatmulHeuristicResult_t* out,
                   cublasStatus_t& st);
  static cudaDataType_t cuda_type(HalfType t);
  // The descriptors of y [n, ldy] (fp32) = x [n, cols] · w [rows, cols]ᵀ with x and w of type
  // `in`, fp32 accumulation, in the "TN" mapping of gemm.cpp (no algorithm yet).
  static std::unique_ptr<LtPlan> describe_lt(cudaDataType_t in, int64_t rows, int64_t cols,
                                             int64_t n, int64_t ldy);

  cublasHandle_t handle_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;  // created on first use (matmul_fp8, tuned matmul_x16)
  std::map<Fp8Key, std::unique_ptr<LtPlan>> fp8_plans_;
  std::map<X16Key, X16Choice> x16_choices_;              // key: ..., bucket top
  std::map<X16Key, std::unique_ptr<LtPlan>> x16_plans_;  // key: ..., n
  Fp8Scaling fp8_scaling_ = Fp8Scaling::automatic;
  Fp8Scaling last_fp8_scaling_ = Fp8Scaling::automatic;
  cudaStream_t stream_ = nullptr;
  DeviceBuffer<uint8_t> workspace_;
  DeviceBuffer<uint16_t> x16_;  // [n_tokens, cols] scratch for matmul's converted activations
};

}  // namespace rz::gpu
