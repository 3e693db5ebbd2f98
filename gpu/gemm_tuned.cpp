// Gemm::tune_x16 and the tuned matmul_x16 (see gemm.hpp): cuBLASLt's fp16 / bf16 GEMM with the
// algorithm chosen by timing, on the same row-major mapping as gemm.cpp's cublasGemmEx call
// (W [rows, cols] is column-major A [cols, rows] taken transposed, X [n, cols] is B [cols, n],
// Y [n, rows] is D [rows, n] with ldd = ldy).
//
// Why: cublasGemmEx picks its kernel by a heuristic per shape, and between neighbouring token
// counts its picks differ by up to 1.7x (GemmBench.DISABLED_TokenSweep on an H200: qwen2.5-1.5b
// gate+up 43 us at 256 rows, 62 at 320, 48 at 352), which is what a step of 256 decodes and a
// 64-token prompt chunk pays. Timing the heuristic's first candidates once per token bucket at
// load removes those outliers.
//
// A bucket's choice is measured at its top token count (once per process and device: later Gemm
// objects take the first one's choices) and used for every count in it; the plan
// for an exact count checks the algorithm against that count (cublasLtMatmulAlgoCheck) and falls
// back to cublasGemmEx where it does not fit. Every candidate computes the same sums in fp32 with
// no atomics (deterministic for a given algorithm); different algorithms may order the sums
// differently, so results can differ in the last bits from cublasGemmEx's.
#include <algorithm>
#include <cfloat>
#include <climits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "formats/common.hpp"
#include "gpu/cuda_check.hpp"
#include "gpu/gemm.hpp"

namespace rz::gpu {

namespace {

constexpr size_t kMaxX16Plans = 4096;  // exact token counts kept (a server's chunks take many)
constexpr int kCandidates = 8;         // the heuristic's first candidates timed per bucket
constexpr double kMinGain = 0.97;      // a cuBLASLt kernel must beat cublasGemmEx by 3 %

// The choices made in this process, per device: a later Gemm (another executor on the same
// model, such as rz bench's one per batch size, or a test's second executor) takes them instead
// of timing again, so that every executor of a process runs the same kernels.
struct Shared {
  std::mutex mu;
  std::map<std::pair<int, Gemm::X16Key>, Gemm::X16Choice> choices;  // (device, key)
};
Shared& shared() {
  static Shared s;
  return s;
}

struct EventPair {
  cudaEvent_t start = nullptr, stop = nullptr;
  EventPair() {
    RZ_CUDA_CHECK(cudaEventCreate(&start));
    RZ_CUDA_CHECK(cudaEventCreate(&stop));
  }
  ~EventPair() {
    cudaEventDestroy(stop);
    cudaEventDestroy(start);
  }
  EventPair(const EventPair&) = delete;
  EventPair& operator=(const EventPair&) = delete;
};

}  // namespace

cublasLtHandle_t Gemm::lt() {
  if (!lt_) RZ_CUBLAS_CHECK(cublasLtCreate(&lt_));
  return lt_;
}

int64_t Gemm::x16_bucket(int64_t n) {
  const int64_t step = n <= 64 ? 8 : n <= 128 ? 16 : n <= 256 ? 32 : 64;
  return (n + step - 1) / step * step;
}

Gemm::LtPlan* Gemm::x16_plan(HalfType type, int64_t rows, int64_t cols, int64_t n, int64_t ldy,
                             const cublasLtMatmulAlgo_t& algo) {
  const X16Key key{type, rows, cols, ldy, n};
  if (auto it = x16_plans_.find(key); it != x16_plans_.end()) return it->second.get();
  if (x16_plans_.size() >= kMaxX16Plans) x16_plans_.clear();
  auto p = describe_lt(cuda_type(type), rows, cols, n, ldy);
  p->algo = algo;
  cublasLtMatmulHeuristicResult_t check{};
  const cublasStatus_t st =
      cublasLtMatmulAlgoCheck(lt(), p->op, p->a, p->b, p->d, p->d, &p->algo, &check);
  p->ok = st == CUBLAS_STATUS_SUCCESS && check.workspaceSize <= workspace_.bytes();
  return x16_plans_.emplace(key, std::move(p)).first->second.get();
}

bool Gemm::matmul_x16_tuned(HalfType type, const void* w, const void* x16, float* y, int64_t rows,
                            int64_t cols, int64_t n, int64_t ldy) {
  const auto it = x16_choices_.find(X16Key{type, rows, cols, ldy, x16_bucket(n)});
  if (it == x16_choices_.end() || !it->second.lt) return false;
  const LtPlan* p = x16_plan(type, rows, cols, n, ldy, it->second.algo);
  if (!p->ok) return false;
  const float alpha = 1.0f, beta = 0.0f;
  RZ_CUBLAS_CHECK(cublasLtMatmul(lt(), p->op, &alpha, w, p->a, x16, p->b, &beta, y, p->d, y, p->d,
                                 &p->algo, workspace_.get(), workspace_.bytes(), stream_));
  return true;
}

Gemm::TuneCount Gemm::tune_x16(HalfType type, const void* w, const void* x16, float* y,
                               int64_t rows, int64_t cols, int64_t n_lo, int64_t n_hi,
                               int64_t ldy) {
  if (ldy == 0) ldy = rows;
  if (rows < 1 || cols < 1 || rows > INT_MAX || cols > INT_MAX || n_lo < 1 || n_hi < n_lo ||
      n_hi > INT_MAX || ldy < rows || ldy > INT_MAX || !w || !x16 || !y)
    throw Error("gemm tune [" + std::to_string(rows) + ", " + std::to_string(cols) + "] at " +
                std::to_string(n_lo) + ".." + std::to_string(n_hi) +
                " tokens: bad shape, token range, ldy or null pointer");
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  RZ_CUDA_CHECK(cudaStreamIsCapturing(stream_, &capture));
  if (capture != cudaStreamCaptureStatusNone)
    throw Error("gemm tune: the stream is capturing a graph");
  RZ_CUDA_CHECK(cudaStreamSynchronize(stream_));
  EventPair ev;
  const float alpha = 1.0f, beta = 0.0f;
  // Seconds per call: one warm-up, then the better of two rounds of three calls; a negative
  // value when the call fails (a candidate that cannot run this shape after all).
  const auto time = [&](auto&& call) -> double {
    if (!call()) return -1;
    double best = DBL_MAX;
    for (int round = 0; round < 2; ++round) {
      RZ_CUDA_CHECK(cudaEventRecord(ev.start, stream_));
      for (int i = 0; i < 3; ++i)
        if (!call()) return -1;
      RZ_CUDA_CHECK(cudaEventRecord(ev.stop, stream_));
      RZ_CUDA_CHECK(cudaEventSynchronize(ev.stop));
      float ms = 0;
      RZ_CUDA_CHECK(cudaEventElapsedTime(&ms, ev.start, ev.stop));
      best = std::min(best, double(ms) / 3);
    }
    return best;
  };
  int device = 0;
  RZ_CUDA_CHECK(cudaGetDevice(&device));
  TuneCount count;
  for (int64_t top = x16_bucket(n_lo);; top = x16_bucket(top + 1)) {
    const X16Key key{type, rows, cols, ldy, top};
    {
      std::lock_guard<std::mutex> lock(shared().mu);
      const auto it = shared().choices.find({device, key});
      if (it != shared().choices.end()) {
        x16_choices_[key] = it->second;
        ++count.buckets;
        count.lt += it->second.lt ? 1 : 0;
        if (top >= n_hi) break;
        continue;
      }
    }
    const int64_t n = std::min(top, n_hi);
    double best =
        time([&] { return gemm_ex(type, w, x16, y, rows, cols, n, ldy) == CUBLAS_STATUS_SUCCESS; });
    if (best < 0) throw Error("gemm tune: cublasGemmEx failed on its own shape");
    best *= kMinGain;
    X16Choice choice;
    auto d = describe_lt(cuda_type(type), rows, cols, n, ldy);
    cublasLtMatmulHeuristicResult_t res[kCandidates] = {};
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    const int found = lt_heuristic(*d, kCandidates, res, st);
    for (int c = 0; c < found; ++c) {
      if (res[c].state != CUBLAS_STATUS_SUCCESS) continue;
      const double t = time([&] {
        return cublasLtMatmul(lt(), d->op, &alpha, w, d->a, x16, d->b, &beta, y, d->d, y, d->d,
                              &res[c].algo, workspace_.get(), workspace_.bytes(),
                              stream_) == CUBLAS_STATUS_SUCCESS;
      });
      if (t >= 0 && t < best) {
        best = t;
        choice = X16Choice{true, res[c].algo};
      }
    }
    x16_choices_[key] = choice;
    {
      std::lock_guard<std::mutex> lock(shared().mu);
      shared().choices.emplace(std::make_pair(device, key), choice);
    }
    ++count.buckets;
    count.lt += choice.lt ? 1 : 0;
    if (top >= n_hi) break;
  }
  x16_plans_.clear();  // plans hold the algorithms of earlier choices
  return count;
}

}  // namespace rz::gpu
