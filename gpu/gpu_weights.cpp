// Copying a model's weights to the device (see gpu_weights.hpp).
#include "gpu/gpu_weights.hpp"

#include <algorithm>
#include <initializer_list>
#include <string>

#include "formats/common.hpp"
#include "kernels/dequant.hpp"
#include "kernels/embedding.hpp"
#include "kernels/fp8.hpp"
#include "kernels/gemv.hpp"
#include "model/model_weights.hpp"

namespace rz::gpu {
namespace {

size_t add_bytes(size_t& total, size_t n) {
  total += n;
  return n;
}

void check_loadable(const ModelFile& f, const TensorView& t) {
  if (!gpu_matrix_supported(t.type, t.cols()))
    throw file_error(f.path(), t.name + " has type " + std::string(type_traits(t.type).name) +
                                   " with " + std::to_string(t.cols()) +
                                   " columns, which the CUDA executor cannot multiply");
}

DeviceMatrix matrix(const ModelFile& f, const TensorView& t, size_t& total) {
  check_loadable(f, t);
  DeviceMatrix m;
  m.type = t.type;
  m.rows = t.rows();
  m.cols = t.cols();
  m.row_bytes = t.row_bytes();
  m.data = DeviceBuffer<uint8_t>(add_bytes(total, t.nbytes));
  m.data.upload(t.data, t.nbytes);
  return m;
}

// One matrix of the given row blocks, stacked in order (all of one type and width).
DeviceMatrix stacked(const ModelFile& f, std::initializer_list<const TensorView*> parts,
                     size_t& total) {
  const TensorView& first = **parts.begin();
  check_loadable(f, first);
  DeviceMatrix m;
  m.type = first.type;
  m.cols = first.cols();
  m.row_bytes = first.row_bytes();
  size_t bytes = 0;
  for (const TensorView* t : parts) {
    m.rows += t->rows();
    bytes += t->nbytes;
  }
  m.data = DeviceBuffer<uint8_t>(add_bytes(total, bytes));
  size_t at = 0;
  for (const TensorView* t : parts) {
    RZ_CUDA_CHECK(cudaMemcpy(m.data.get() + at, t->data, t->nbytes, cudaMemcpyHostToDevice));
    at += t->nbytes;
  }
  return m;
}

// m (F16 or BF16, cols % 16 == 0) as FP8 rows: the codes replace the data, one scale per row.
// The 16-bit copy is freed after the conversion, so a model's peak device use stays one matrix
// above its FP8 size.
void to_fp8(DeviceMatrix& m, size_t& total) {
  DeviceBuffer<uint8_t> q(size_t(m.rows) * size_t(m.cols));
  DeviceBuffer<float> scale(size_t(m.rows));
  quantize_rows_fp8(m.data.get(), m.type == GgmlType::BF16 ? Fp8Source::bf16 : Fp8Source::f16,
                    q.get(), scale.get(), m.rows, m.cols, nullptr);
  RZ_CUDA_CHECK(cudaDeviceSynchronize());
  total = total - m.data.bytes() + q.bytes() + scale.bytes();
  m.data = std::move(q);
  m.scale = std::move(scale);
  m.row_bytes = size_t(m.cols);
  m.fp8 = true;
}

DeviceBuffer<float> vec(const std::vector<float>& v, size_t& total) {
  DeviceBuffer<float> b(v.size());
  add_bytes(total, b.bytes());
  if (!v.empty()) b.upload(v);
  return b;
}

}  // namespace

bool gpu_matrix_supported(GgmlType type, int64_t cols) {
  if (type == GgmlType::F32) return true;  // cuBLAS SGEMM for every batch size
  if (gemv_supported(type, 1) == GemvKernel::none || !dequant_supported(type)) return false;
  return cols % gemv_cols_multiple(type) == 0 && cols % dequant_cols_multiple(type) == 0;
}

int64_t GpuWeights::max_matrix_elems() const {
  int64_t n = 0;
  for_each_matrix([&](const DeviceMatrix& m) { n = std::max(n, m.rows * m.cols); });
  return n;
}

int64_t GpuWeights::max_cols() const {
  int64_t n = 0;
  for_each_matrix([&](const DeviceMatrix& m) { n = std::max(n, m.cols); });
  return n;
}

namespace {

bool copy_wanted(const DeviceMatrix& m) {
  return m.rows > 0 && !m.fp8 && m.type != GgmlType::F16 && m.type != GgmlType::F32 &&
         dequant_supported(m.type);
}

}  // namespace

size_t GpuWeights::f16_copy_bytes() const {
  size_t n = 0;
  for_each_matrix([&](const DeviceMatrix& m) {
    if (copy_wanted(m)) n += size_t(m.rows) * size_t(m.cols) * sizeof(uint16_t);
  });
  return n;
}

size_t GpuWeights::keep_f16_copies() {
  size_t n = 0;
  for_each_matrix([&](DeviceMatrix& m) {
    if (!copy_wanted(m) || m.has_f16_copy()) return;
    m.f16_copy = DeviceBuffer<uint16_t>(size_t(m.rows) * size_t(m.cols));
    dequantize_matrix(m.type, m.ptr(), m.f16_copy.get(), HalfType::f16, m.rows, m.cols, nullptr);
    n += m.f16_copy.bytes();
  });
  RZ_CUDA_CHECK(cudaDeviceSynchronize());
  return n;
}

GpuWeights GpuWeights::upload(const ModelFile& f, bool fp8) {
  const ModelWeights cw = ModelWeights::load(f);  // lookups and shape checks
  GpuWeights w;
  if (!embedding_type_supported(cw.token_embd->type))
    throw file_error(f.path(), "token_embd.weight has type " +
                                   std::string(type_traits(cw.token_embd->type).name) +
                                   ", which the CUDA executor cannot gather");
  w.token_embd = matrix(f, *cw.token_embd, w.bytes);
  w.tied = cw.output == cw.token_embd;
  if (!w.tied) w.output_own = matrix(f, *cw.output, w.bytes);
  w.output_norm = vec(cw.output_norm, w.bytes);
  for (const LayerWeights& cl : cw.layers) {
    GpuLayerWeights l;
    l.attn_norm = vec(cl.attn_norm, w.bytes);
    l.ffn_norm = vec(cl.ffn_norm, w.bytes);
    l.bq = vec(cl.bq, w.bytes);
    l.bk = vec(cl.bk, w.bytes);
    l.bv = vec(cl.bv, w.bytes);
    l.q_norm = vec(cl.q_norm, w.bytes);
    l.k_norm = vec(cl.k_norm, w.bytes);
    l.post_attn_norm = vec(cl.post_attn_norm, w.bytes);
    l.post_ffn_norm = vec(cl.post_ffn_norm, w.bytes);
    l.fused_qkv = cl.wq->type == cl.wk->type && cl.wq->type == cl.wv->type;
    l.fused_qk = !l.fused_qkv && cl.wq->type == cl.wk->type;
    if (l.fused_qkv) {
      l.wqkv = stacked(f, {cl.wq, cl.wk, cl.wv}, w.bytes);
    } else if (l.fused_qk) {
      l.wqk = stacked(f, {cl.wq, cl.wk}, w.bytes);
      l.wv = matrix(f, *cl.wv, w.bytes);
    } else {
      l.wq = matrix(f, *cl.wq, w.bytes);
      l.wk = matrix(f, *cl.wk, w.bytes);
      l.wv = matrix(f, *cl.wv, w.bytes);
    }
    l.wo = matrix(f, *cl.wo, w.bytes);
    l.fused_gate_up = cl.w_gate->type == cl.w_up->type;
    if (l.fused_gate_up) {
      l.w_gate_up = stacked(f, {cl.w_gate, cl.w_up}, w.bytes);
    } else {
      l.w_gate = matrix(f, *cl.w_gate, w.bytes);
      l.w_up = matrix(f, *cl.w_up, w.bytes);
    }
    l.w_down = matrix(f, *cl.w_down, w.bytes);
    if (fp8)
      for (DeviceMatrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down, &l.wqkv,
                              &l.wqk, &l.w_gate_up})
        if (m->rows > 0 && fp8_converts(m->type, m->rows, m->cols)) {
          to_fp8(*m, w.bytes);
          ++w.fp8_matrices;
        }
    w.layers.push_back(std::move(l));
  }
  RZ_CUDA_CHECK(cudaDeviceSynchronize());
  return w;
}

}  // namespace rz::gpu
