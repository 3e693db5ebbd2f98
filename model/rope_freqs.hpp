// The rotary embedding's frequencies after every scaling rule, computed once per model: what
// both executors build their cos/sin from (cpu/cpu_ops.hpp's rope_table, the CUDA executor's
// rope_cs_table).
#pragma once
#include <vector>

#include "formats/model_config.hpp"

namespace rz {

// Per-pair inverse frequencies of the rotary embedding after rope scaling and the per-frequency
// divisors (ModelConfig::rope_freq_factors, GGUF rope_freqs.weight), and the factor multiplied
// into cos/sin (1 except yarn). Both executors take their frequencies from here, so a scaling
// rule lives in this one place. Linear and llama3 follow Hugging Face exactly. Yarn
// follows Hugging Face's defaults (beta_fast 32, beta_slow 1, attention factor
// 0.1 ln(factor) + 1): ModelConfig carries no beta or attention-factor overrides, so a model that
// sets them gets these defaults instead (an approximation for such models).
struct RopeFreqs {
  std::vector<float> inv_freq;  // [n_rot / 2]
  float attn_factor = 1.0f;
  static RopeFreqs make(const ModelConfig& c);
  // The sliding-window layers' frequencies when they have their own base
  // (ModelConfig::rope_theta_swa: gemma3's local layers), without any scaling.
  static RopeFreqs make_swa(const ModelConfig& c);
};

}  // namespace rz
