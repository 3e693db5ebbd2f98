// gemv's chooser and its one dispatch point: type -> kernel family (gemv_supported), family ->
// per-batch launcher (family_of), after the shape and alignment checks that every family shares.
// Few long rows at batch <= 4 go to the split-row kernel (gemv_choose_split, from the SM count).
#include "kernels/gemv.hpp"

#include <algorithm>
#include <string>

#include "formats/common.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/gemv_common.cuh"

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
    case GgmlType::Q5_0: return GemvKernel::q5_0;
    case GgmlType::Q5_1: return GemvKernel::q5_1;
    case GgmlType::Q5_K: return GemvKernel::q5_k;
    case GgmlType::Q2_K: return GemvKernel::q2_k;
    case GgmlType::Q3_K: return GemvKernel::q3_k;
    case GgmlType::IQ4_NL: return GemvKernel::iq4_nl;
    case GgmlType::IQ4_XS: return GemvKernel::iq4_xs;
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
    case GemvKernel::q5_0: return &family_q5_0();
    case GemvKernel::q5_1: return &family_q5_1();
    case GemvKernel::q5_k: return &family_q5_k();
    case GemvKernel::q2_k: return &family_q2_k();
    case GemvKernel::q3_k: return &family_q3_k();
    case GemvKernel::iq4_nl: return &family_iq4_nl();
    case GemvKernel::iq4_xs: return &family_iq4_xs();
    case GemvKernel::none: break;
  }
  return nullptr;
}

// What one call multiplies: a GGUF type's family, or FP8 rows with their per-row scales.
struct Operand {
  const Family* family = nullptr;
  GgmlType type = GgmlType::F32;  // when !fp8
  bool fp8 = false;
  const float* row_scale = nullptr;  // fp8 only
  // The 256-element super-block types (Q2_K .. Q6_K, IQ4_XS): few work items per row.
  bool k_quant() const { return !fp8 && family != nullptr && family->block_elems == 256; }
  std::string label() const {
    if (fp8) return "fp8";
    const auto& tr = type_traits(type);
    return tr.name.empty() ? "type " + std::to_string(static_cast<uint32_t>(type))
                           : std::string(tr.name);
  }
};

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

int choose_split(const Family& f, bool k_quant, int64_t rows, int64_t cols, int batch,
                 int sm_count);

// split: 0 = as choose_split says, 1 = the ordinary kernel, 2 / 4 / 8 = the split-row kernel
// with that many warps per row.
void run(const Operand& op, const void* w, const float* x, float* y, int64_t rows, int64_t cols,
         int batch, int split, cudaStream_t stream) {
  // The message's prefix, built only when a check fails (this runs for every matmul of a step).
  const auto what = [&] {
    return "gemv " + op.label() + " [" + std::to_string(rows) + ", " + std::to_string(cols) +
           "] batch " + std::to_string(batch);
  };
  if (op.family == nullptr) throw Error(what() + ": no GPU kernel for this type");
  if (batch < 1 || batch > kGemvMaxBatch)
    throw Error(what() + ": batch must be 1.." + std::to_string(kGemvMaxBatch));
  const Family& f = *op.family;
  // The kernels index the blocks of a row with 32-bit ints.
  if (rows < 1 || cols < 1 || cols > (int64_t{1} << 30) || rows > (int64_t{1} << 31))
    throw Error(what() + ": rows and cols must be in 1..2^31 and 1..2^30");
  if (cols % f.block_elems != 0)
    throw Error(what() + ": cols must be a multiple of " + std::to_string(f.block_elems));
  if (!aligned16(w) || !aligned16(x) || (reinterpret_cast<uintptr_t>(y) & 3u) != 0)
    throw Error(what() + ": weights and activations must be 16-byte aligned, outputs 4-byte");
  if (split == 0) split = choose_split(f, op.k_quant(), rows, cols, batch, device_sm_count());
  if (split != 1 && split != 2 && split != 4 && split != 8)
    throw Error(what() + ": split must be 0, 1, 2, 4 or 8, not " + std::to_string(split));
  if (split > 1 && (batch > gemv_detail::kSplitMaxBatch || rows >= (int64_t{1} << 30)))
    throw Error(what() + ": the split-row kernel takes batch 1.." +
                std::to_string(gemv_detail::kSplitMaxBatch) + " and rows < 2^30");
  if (split > 1) {
    f.launch_split[batch - 1](w, x, y, rows, cols, split, op.row_scale, stream);
    RZ_CUDA_CHECK_LAUNCH("gemv_split_kernel");
  } else {
    f.launch[batch - 1](w, x, y, rows, cols, op.row_scale, stream);
    RZ_CUDA_CHECK_LAUNCH("gemv_kernel");
  }
}

Operand operand(GgmlType type) { return Operand{family_of(kernel_for_type(type)), type}; }

// Split when the ordinary kernel would leave most warp slots empty: it runs about one warp per
// row, and a memory-bound GEMV wants at least half of sm_90's 64 warp slots per SM busy, i.e.
// 32 * sm_count warps. Double S (2, 4, 8) while rows * S is short of that and each warp still
// gets at least 1024 columns and one work item per lane. Only batch <= kSplitMaxBatch (larger
// batches have R rows per warp and are FMA-bound) and cols >= 4096.
int choose_split(const Family& f, bool k_quant, int64_t rows, int64_t cols, int batch,
                 int sm_count) {
  if (batch > gemv_detail::kSplitMaxBatch || sm_count <= 0 || cols < 4096 || rows < 1) return 1;
  const int64_t want_warps = int64_t{32} * sm_count;
  const int64_t items = cols / f.block_elems * f.parts;
  int s = 1;
  while (s < 8 && rows * s < want_warps && cols / (2 * s) >= 1024 && items / (2 * s) >= 32) s *= 2;
  // Caps measured on an H200 (bench/gpu-runs/2026-11-22-h200-gemv-split-sweep.log): rows that
  // already fill half the warp budget (llama 4096-row matrices) gain only at batch 1, and only
  // from S = 2 (at batch 2..4 the split is up to 1.8x slower); the K-quants, and every type at
  // batch 3..4, do best with S = 2 on few rows.
  if (rows * 2 >= want_warps) return batch == 1 ? std::min(s, 2) : 1;
  if (k_quant || batch >= 3) s = std::min(s, 2);
  return s;
}

}  // namespace

namespace gemv_detail {

int gemv_choose_split(GgmlType type, int64_t rows, int64_t cols, int batch, int sm_count) {
  const Operand op = operand(type);
  if (op.family == nullptr || gemv_supported(type, batch) == GemvKernel::none) return 1;
  return choose_split(*op.family, op.k_quant(), rows, cols, batch, sm_count);
}

void gemv_with_split(GgmlType type, const void* w, const float* x, float* y, int64_t rows,
                     int64_t cols, int batch, int split, cudaStream_t stream) {
  run(operand(type), w, x, y, rows, cols, batch, split, stream);
}

}  // namespace gemv_detail

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
  run(operand(type), w, x, y, rows, cols, batch, 0, stream);
}

void gemv_fp8(const uint8_t* w, const float* row_scale, const float* x, float* y, int64_t rows,
              int64_t cols, int batch, cudaStream_t stream) {
  if (row_scale == nullptr) throw Error("gemv fp8: null row scales");
  run(Operand{&gemv_detail::family_fp8(), GgmlType::F32, true, row_scale}, w, x, y, rows, cols,
      batch, 0, stream);
}

}  // namespace rz::gpu
