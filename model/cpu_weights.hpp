// The weights the CPU executor reads, gathered by name from a ModelFile. Matrices stay views into
// the mapped file in their stored (possibly quantized) type; the small vectors (norm weights,
// biases) are dequantized once into fp32.
#pragma once
#include <memory>
#include <vector>

#include "model/model_config.hpp"
#include "model/model_file.hpp"
#include "model/tensor.hpp"

namespace rz {

struct CpuLayerWeights {
  std::vector<float> attn_norm;           // [n_embd]
  const TensorView* wq = nullptr;         // [n_head * head_dim][n_embd]
  const TensorView* wk = nullptr;         // [n_head_kv * head_dim][n_embd]
  const TensorView* wv = nullptr;         // [n_head_kv * head_dim][n_embd]
  std::vector<float> bq, bk, bv;          // biases (empty unless qkv_bias)
  const TensorView* wo = nullptr;         // [n_embd][n_head * head_dim]
  std::vector<float> ffn_norm;            // [n_embd]
  const TensorView* w_gate = nullptr;     // [n_ff][n_embd]
  const TensorView* w_up = nullptr;       // [n_ff][n_embd]
  const TensorView* w_down = nullptr;     // [n_embd][n_ff]
};

struct CpuWeights {
  const TensorView* token_embd = nullptr;  // [n_vocab][n_embd]
  std::vector<float> output_norm;          // [n_embd]
  const TensorView* output = nullptr;      // [n_vocab][n_embd]: output.weight or token_embd
  std::vector<CpuLayerWeights> layers;

  // Looks every tensor up and checks shapes and types. Throws rz::Error("PATH: cause").
  static CpuWeights load(const ModelFile& file);
  // Bytes of weights one decode step reads (every matrix once, plus the embedding rows).
  size_t matrix_bytes() const;
};

}  // namespace rz
