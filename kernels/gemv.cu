// gemv's chooser and its one dispatch point: type -> kernel family (gemv_supported), family ->
// per-batch launcher (family_of), after the shape and alignment checks that every family shares.
#include "kernels/gemv.hpp"

#include <string>

#include "gpu/cuda_check.hpp"
#include "kernels/gemv_common.cuh"
#include "model/common.hpp"

namespace rz::gpu {
namespace {

using gemv_detail::Family;

GemvKernel kernel_for_type(GgmlType type) {
  switch (type) {
    case GgmlType::Q4_K: return GemvKernel::q4_k;
    case GgmlType::Q6_K: return GemvKernel::q6_k;
    case GgmlType::Q8_0: return GemvKernel::q8_0;
    case GgmlType::Q4_0: return GemvKernel::q4_0;
    case GgmlType::Q4_1: return GemvKernel::q4_1;
    case GgmlType::F16: return GemvKernel::f16;
    case GgmlType::BF16: return GemvKernel::bf16;
    default: return GemvKernel::none;
  }
}

const Family* family_of(GemvKernel k) {
  using namespace gemv_detail;
  switch (k) {
    case GemvKernel::q4_k: return &family_q4_k();
    case GemvKernel::q6_k: return &family_q6_k();
    case GemvKernel::q8_0: return &family_q8_0();
    case GemvKernel::q4_0: return &family_q4_0();
    case GemvKernel::q4_1: return &family_q4_1();
    case GemvKernel::f16: return &family_f16();
    case GemvKernel::bf16: return &family_bf16();
    case GemvKernel::none: break;
  }
  return nullptr;
}

std::string type_label(GgmlType t) {
  const auto& tr = type_traits(t);
  return tr.name.empty() ? "type " + std::to_string(static_cast<uint32_t>(t)) : std::string(tr.name);
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace

GemvKernel gemv_supported(GgmlType type, int batch) {
  if (batch < 1 || batch > kGemvMaxBatch) return GemvKernel::none;
  return kernel_for_type(type);
}

int gemv_cols_multiple(GgmlType type) {
  const Family* f = family_of(kernel_for_type(type));
  return f ? f->block_elems : 0;
}

void gemv(GgmlType type, const void* w, const float* x, float* y, int64_t rows, int64_t cols,
          int batch, cudaStream_t stream) {
  const std::string what = "gemv " + type_label(type) + " [" + std::to_string(rows) + ", " +
                           std::to_string(cols) + "] batch " + std::to_string(batch);
  const GemvKernel k = gemv_supported(type, batch);
  if (k == GemvKernel::none) {
    throw Error(what + ": " +
                (kernel_for_type(type) == GemvKernel::none ? "no GPU kernel for this type"
                                                           : "batch must be 1.." + std::to_string(kGemvMaxBatch)));
  }
  const Family& f = *family_of(k);
  // The kernels index the blocks of a row with 32-bit ints.
  if (rows < 1 || cols < 1 || cols > (int64_t{1} << 30) || rows > (int64_t{1} << 31))
    throw Error(what + ": rows and cols must be in 1..2^31 and 1..2^30");
  if (cols % f.block_elems != 0)
    throw Error(what + ": cols must be a multiple of " + std::to_string(f.block_elems));
  if (!aligned16(w) || !aligned16(x) || (reinterpret_cast<uintptr_t>(y) & 3u) != 0)
    throw Error(what + ": weights and activations must be 16-byte aligned, outputs 4-byte");
  f.launch[batch - 1](w, x, y, rows, cols, stream);
  RZ_CUDA_CHECK_LAUNCH("gemv_kernel");
}

}  // namespace rz::gpu
