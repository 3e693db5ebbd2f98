// choose_matmul_path (see matmul_path.hpp for the measurements behind the rule).
#include "gpu/matmul_path.hpp"

#include "formats/common.hpp"
#include "kernels/gemv.hpp"
#include "kernels/qmm.hpp"

namespace rz::gpu {
namespace {

bool qmm_wins(double bytes, int n) {
  constexpr double kSmall = 4e6, kHuge = 64e6;
  if (bytes >= kHuge) return true;  // n <= kQmmMaxTokens
  if (n <= 2) return false;
  if (n <= 8) return bytes >= kSmall;
  return n <= 64;
}

}  // namespace

MatmulPath choose_matmul_path(GgmlType type, int64_t rows, int64_t cols, int n, bool use_qmm) {
  if (type == GgmlType::F32) return MatmulPath::gemm;
  if (use_qmm && qmm_supported(type, cols) && n >= 1 && n <= kQmmMaxTokens &&
      qmm_wins(double(row_size(type, cols)) * double(rows), n))
    return MatmulPath::qmm;
  return gemv_supported(type, n) != GemvKernel::none ? MatmulPath::gemv : MatmulPath::gemm;
}

}  // namespace rz::gpu
