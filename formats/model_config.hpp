// Architecture hyper-parameters of a Llama-family model, read from GGUF metadata or from a
// Hugging Face config.json. Everything above the file readers works from this struct.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rz {

class GgufFile;

enum class Arch { Llama, Qwen2, Mistral, Qwen3, Phi3, Gemma3 };
inline constexpr Arch kArchs[] = {Arch::Llama, Arch::Qwen2, Arch::Mistral,
                                  Arch::Qwen3, Arch::Phi3,  Arch::Gemma3};
// GGUF's general.architecture / Hugging Face's model_type of each (Hugging Face names gemma3's
// text model "gemma3_text"; arch_from_name takes both).
const char* arch_name(Arch a);
std::optional<Arch> arch_from_name(std::string_view name);
std::string supported_arch_names();  // "llama, qwen2, ..."

struct RopeScaling {
  enum class Type { None, Linear, Yarn, Llama3 };
  Type type = Type::None;
  float factor = 1.0f;
  int original_context = 0;       // original_max_position_embeddings (yarn, llama3)
  float low_freq_factor = 1.0f;   // llama3
  float high_freq_factor = 4.0f;  // llama3
};

struct ModelConfig {
  Arch arch = Arch::Llama;
  int n_vocab = 0;
  int n_embd = 0;  // hidden size
  int n_layer = 0;
  int n_head = 0;
  int n_head_kv = 0;    // grouped-query attention: n_head % n_head_kv == 0
  int head_dim = 0;     // usually n_embd / n_head
  int n_rot = 0;        // rotary dimensions (== head_dim for these architectures)
  int n_ff = 0;         // feed-forward hidden size
  int n_ctx_train = 0;  // context length the model was trained for
  float rope_theta = 10000.0f;
  float norm_eps = 1e-5f;
  // NeoX-style rotation (pairs i, i + n_rot/2) instead of adjacent pairs (2i, 2i+1). llama.cpp
  // permutes Llama Q/K rows when it writes GGUF, so GGUF llama/mistral use adjacent pairs while
  // GGUF qwen2 and every safetensors (Hugging Face layout) model use NeoX pairs.
  bool rope_neox = false;
  RopeScaling rope_scaling;
  // Per-frequency divisors of the rotary inverse frequencies, [n_rot / 2], or empty for none.
  // llama.cpp's converter stores Llama 3.x frequency scaling this way, as the GGUF tensor
  // "rope_freqs.weight", and writes no scaling metadata. RopeFreqs::make (cpu/cpu_ops.hpp), the
  // one place both executors take their frequencies from, divides frequency i by
  // rope_freq_factors[i] after any rope_scaling, as llama.cpp does.
  std::vector<float> rope_freq_factors;
  bool tied_embeddings = false;  // no output.weight: the token embedding is the output matrix
  bool qkv_bias = false;         // attn_q/k/v have biases (qwen2)
  // Per-head RMSNorm of q and k before RoPE, one [head_dim] weight each shared by all heads
  // (attn_q_norm / attn_k_norm: qwen3).
  bool qk_norm = false;
  // Q, K, V stored as one matrix attn_qkv [q_dim + 2 kv_dim][n_embd] and gate and up as one
  // ffn_up [2 n_ff][n_embd], gate rows first (phi3, as its Hugging Face checkpoints and llama.cpp's
  // converter store them); ModelWeights presents the parts as separate row ranges.
  bool fused_qkv_gate_up = false;
  // Sliding-window attention: a query at position p attends to keys at positions > p - window
  // (the window counts the query itself, as transformers masks it); 0: every position.
  int sliding_window = 0;
  // Which layers use the sliding window (1) and which attend to every position (0): gemma3
  // interleaves them; empty: every layer uses sliding_window.
  std::vector<uint8_t> sliding_layers;
  // The rotary base of the sliding-window layers, which rotate without rope_scaling or
  // rope_freq_factors (gemma3's local layers: 10000); 0: they rotate as the others.
  float rope_theta_swa = 0.0f;

  // Gemma 3 (and other departures from the Llama block):
  enum class Act { SiLU, GeluTanh };
  Act act = Act::SiLU;      // the gate's activation: silu, or gelu's tanh approximation
  float embd_scale = 0.0f;  // token embeddings multiplied by this (gemma: sqrt(n_embd)); 0: none
  float attn_scale = 0.0f;  // attention score scale; 0: 1 / sqrt(head_dim)
  bool post_norms = false;  // RMSNorm of the attention and feed-forward outputs before each
                            // residual add (post_attention_norm, post_ffw_norm)
  float norm_weight_add = 0.0f;      // added to every RMSNorm weight at load (gemma's safetensors
                                     // store w - 1; llama.cpp's converter writes w)
  float final_logit_softcap = 0.0f;  // logits = cap * tanh(logits / cap); 0: none

  // Layer l's sliding window (0: none).
  int layer_window(int layer) const {
    if (sliding_window <= 0) return 0;
    if (sliding_layers.empty()) return sliding_window;
    return sliding_layers[size_t(layer)] ? sliding_window : 0;
  }
  // Whether layer l rotates with rope_theta_swa.
  bool layer_rope_swa(int layer) const { return rope_theta_swa > 0 && layer_window(layer) > 0; }

  // Checks internal consistency; throws rz::Error("WHERE: cause").
  void validate(const std::string& where) const;
};

// Reads the config of a GGUF file ("general.architecture" picks the key prefix). Throws
// rz::Error naming the file for an unsupported architecture or missing keys.
ModelConfig config_from_gguf(const GgufFile& f);

}  // namespace rz
