// The CUDA executor's weights on the device: every matrix in its stored GGUF type (F32 kept as
// F32 and multiplied in full precision), norm weights and biases as fp32 vectors. Gathered and
// shape-checked by ModelWeights::load (model/model_weights.hpp), then copied up.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "formats/ggml_types.hpp"
#include "formats/model_file.hpp"
#include "gpu/device_buffer.hpp"

namespace rz::gpu {

struct DeviceMatrix {
  GgmlType type = GgmlType::F32;  // the stored type (for fp8: the file's F16 / BF16)
  int64_t rows = 0, cols = 0;     // [rows][cols], GGUF row layout
  size_t row_bytes = 0;
  DeviceBuffer<uint8_t> data;  // rows * row_bytes bytes
  // Converted to FP8 at load (GpuWeights::upload with fp8): data holds E4M3 codes (row_bytes =
  // cols) and scale one fp32 per row, as kernels/fp8.hpp rounds them.
  bool fp8 = false;
  DeviceBuffer<float> scale;
  // The matrix dequantized to fp16 once at load (GpuExecutorOptions::fp16_copies), which the
  // GEMM path multiplies instead of dequantizing the stored blocks on every call; empty when not
  // kept.
  DeviceBuffer<uint16_t> f16_copy;
  bool has_f16_copy() const { return f16_copy.size() != 0; }
  const void* ptr() const { return data.get(); }
};

// Q, K and V of a layer stored in one type are kept as one matrix [wq; wk; wv] (one matmul writes
// a fused row [q | k | v] per token); when only Q and K share a type (Q4_K_M keeps some layers' V
// in Q6_K) they are kept as [wq; wk] and V apart; gate and up of one type as [w_gate; w_up]. The
// separate matrices are then left empty.
struct GpuLayerWeights {
  DeviceBuffer<float> attn_norm, ffn_norm;            // [n_embd]
  DeviceBuffer<float> bq, bk, bv;                     // biases (empty unless qkv_bias)
  DeviceBuffer<float> q_norm, k_norm;                 // [head_dim] (empty unless qk_norm)
  DeviceBuffer<float> post_attn_norm, post_ffn_norm;  // [n_embd] (empty unless post_norms)
  DeviceMatrix wq, wk, wv, wo, w_gate, w_up, w_down;
  DeviceMatrix wqkv;       // [q_dim + 2 kv_dim][n_embd] when fused_qkv
  DeviceMatrix wqk;        // [q_dim + kv_dim][n_embd] when fused_qk (then wv holds V)
  DeviceMatrix w_gate_up;  // [2 n_ff][n_embd] when fused_gate_up
  bool fused_qkv = false, fused_qk = false, fused_gate_up = false;
};

struct GpuWeights {
  DeviceMatrix token_embd;          // [n_vocab][n_embd]
  DeviceMatrix output_own;          // output.weight when the model has one
  bool tied = false;                // output = token_embd
  DeviceBuffer<float> output_norm;  // [n_embd]
  std::vector<GpuLayerWeights> layers;
  size_t bytes = 0;  // device bytes of all of the above

  const DeviceMatrix& output() const { return tied ? token_embd : output_own; }
  int64_t max_matrix_elems() const;  // the largest matrix, for dequant scratch
  int64_t max_cols() const;

  // f(const DeviceMatrix&) for the output matrix and every layer's matrices (empty ones too).
  template <class F>
  void for_each_matrix(F&& f) const {
    each_matrix(*this, f);
  }
  template <class F>
  void for_each_matrix(F&& f) {
    each_matrix(*this, f);
  }

  // Bytes fp16 copies of every quantized matrix would take (what keep_f16_copies allocates).
  size_t f16_copy_bytes() const;
  // Dequantizes every quantized matrix (GGUF blocks that kernels/dequant.hpp decodes; not F16,
  // F32 or FP8 rows) into its f16_copy; returns the bytes allocated.
  size_t keep_f16_copies();

  // Throws rz::Error("PATH: cause") for a tensor type without GPU kernels, or a shape the kernels
  // cannot take; CudaError when the device runs out of memory. fp8: every layer matrix stored in
  // F16 or BF16 (cols a multiple of 16) is converted to FP8 rows (DeviceMatrix::fp8); the token
  // embedding and the output matrix keep their type, as do quantized and F32 matrices.
  static GpuWeights upload(const ModelFile& file, bool fp8 = false);
  int fp8_matrices = 0;  // layer matrices converted by upload(fp8)

 private:
  // for_each_matrix's one body, for const and mutable weights alike.
  template <class Self, class F>
  static void each_matrix(Self& self, F& f) {
    f(self.tied ? self.token_embd : self.output_own);
    for (auto& l : self.layers)
      for (auto* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down, &l.wqkv, &l.wqk,
                      &l.w_gate_up})
        f(*m);
  }
};

// Whether the CUDA executor can multiply a matrix of this type and width.
bool gpu_matrix_supported(GgmlType type, int64_t cols);

}  // namespace rz::gpu
