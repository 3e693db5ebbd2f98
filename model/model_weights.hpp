// The weight map of a Llama-family model, gathered by name from a ModelFile: what the CPU executor
// reads in place and what the CUDA executor uploads (gpu/gpu_weights.cpp). Matrices stay views into
// the mapped file in their stored (possibly quantized) type; the small vectors (norm weights,
// biases) are dequantized once into fp32, norm weights with ModelConfig::norm_weight_add added.
#pragma once
#include <memory>
#include <vector>

#include "formats/model_config.hpp"
#include "formats/model_file.hpp"
#include "formats/tensor.hpp"

namespace rz {

struct LayerWeights {
  std::vector<float> attn_norm;       // [n_embd]
  const TensorView* wq = nullptr;     // [n_head * head_dim][n_embd]
  const TensorView* wk = nullptr;     // [n_head_kv * head_dim][n_embd]
  const TensorView* wv = nullptr;     // [n_head_kv * head_dim][n_embd]
  std::vector<float> bq, bk, bv;      // biases (empty unless qkv_bias)
  std::vector<float> q_norm, k_norm;  // [head_dim] per-head norms (empty unless qk_norm)
  std::vector<float> post_attn_norm, post_ffn_norm;  // [n_embd] (empty unless post_norms)
  const TensorView* wo = nullptr;                    // [n_embd][n_head * head_dim]
  std::vector<float> ffn_norm;                       // [n_embd]
  const TensorView* w_gate = nullptr;                // [n_ff][n_embd]
  const TensorView* w_up = nullptr;                  // [n_ff][n_embd]
  const TensorView* w_down = nullptr;                // [n_embd][n_ff]
};

struct ModelWeights {
  const TensorView* token_embd = nullptr;  // [n_vocab][n_embd]
  std::vector<float> output_norm;          // [n_embd]
  const TensorView* output = nullptr;      // [n_vocab][n_embd]: output.weight or token_embd
  std::vector<LayerWeights> layers;
  // Row ranges of fused file tensors (attn_qkv, ffn_up of phi3) that wq/wk/wv/w_gate/w_up point
  // at: a quantized row holds whole blocks, so a range of rows is a view into the same bytes.
  std::vector<std::unique_ptr<TensorView>> row_ranges;

  // Looks every tensor up and checks shapes and types. Throws rz::Error("PATH: cause").
  static ModelWeights load(const ModelFile& file);
  // Bytes of weights one decode step reads (every matrix once, plus the embedding rows). fp8: as
  // the CUDA executor stores them under `--weights fp8` (fp8_converts below).
  size_t matrix_bytes(bool fp8 = false) const;
};

// Whether `--weights fp8` (gpu::GpuExecutorOptions::fp8_weights) turns a layer matrix of this
// type and shape into FP8 rows: F16 and BF16 matrices whose rows and columns are multiples of 16
// (what cuBLASLt's FP8 GEMM and gemv_fp8 take). Such a matrix then holds rows * (cols + 4) bytes
// (the codes and one fp32 scale a row). The token embedding and the output matrix are never
// converted.
bool fp8_converts(GgmlType type, int64_t rows, int64_t cols);

}  // namespace rz
