// ModelConfig from GGUF metadata, and its consistency check (see model_config.hpp).
//
// GGUF keys read, with {arch} = general.architecture:
//   {arch}.context_length, .embedding_length, .block_count, .feed_forward_length,
//   .attention.head_count, .attention.head_count_kv (default head_count),
//   .attention.key_length (default embedding_length / head_count),
//   .rope.dimension_count (default key_length), .rope.freq_base (default 10000),
//   .attention.layer_norm_rms_epsilon, .vocab_size (default: length of tokenizer.ggml.tokens),
//   .rope.scaling.type / .factor / .original_context_length.
// Llama 3.1-style frequency scaling is not in the metadata: llama.cpp's converter bakes it into a
// tensor "rope_freqs.weight" ([n_rot / 2] f32, one divisor per rotary frequency). rope_scaling
// stays None for such files; the tensor's values become ModelConfig::rope_freq_factors.
#include "formats/model_config.hpp"

#include <cmath>
#include <cstring>
#include <optional>

#include "formats/common.hpp"
#include "formats/gguf.hpp"

namespace rz {

std::optional<Arch> arch_from_name(std::string_view name) {
  if (name == "gemma3_text") return Arch::Gemma3;  // transformers' model_type
  for (Arch a : kArchs)
    if (name == arch_name(a)) return a;
  return std::nullopt;
}

std::string supported_arch_names() {
  std::string s;
  for (Arch a : kArchs) s += (s.empty() ? "" : ", ") + std::string(arch_name(a));
  return s;
}

const char* arch_name(Arch a) {
  switch (a) {
    case Arch::Llama: return "llama";
    case Arch::Qwen2: return "qwen2";
    case Arch::Mistral: return "mistral";
    case Arch::Qwen3: return "qwen3";
    case Arch::Phi3: return "phi3";
    case Arch::Gemma3: return "gemma3";
  }
  return "?";
}

void ModelConfig::validate(const std::string& where) const {
  auto fail = [&](const std::string& cause) {
    throw file_error(where, "invalid model config: " + cause);
  };
  auto positive = [&](const char* name, int v) {
    if (v <= 0) fail(std::string(name) + " must be positive (got " + std::to_string(v) + ")");
  };
  positive("n_vocab", n_vocab);
  positive("n_embd", n_embd);
  positive("n_layer", n_layer);
  positive("n_head", n_head);
  positive("n_head_kv", n_head_kv);
  positive("head_dim", head_dim);
  positive("n_rot", n_rot);
  positive("n_ff", n_ff);
  positive("n_ctx_train", n_ctx_train);
  if (n_head % n_head_kv != 0)
    fail("n_head " + std::to_string(n_head) + " is not a multiple of n_head_kv " +
         std::to_string(n_head_kv));
  if (n_rot > head_dim || n_rot % 2 != 0)
    fail("n_rot " + std::to_string(n_rot) + " must be even and at most head_dim " +
         std::to_string(head_dim));
  if (sliding_window < 0)
    fail("sliding_window must be >= 0 (got " + std::to_string(sliding_window) + ")");
  if (!sliding_layers.empty() && static_cast<int>(sliding_layers.size()) != n_layer)
    fail(std::to_string(sliding_layers.size()) + " sliding-window layer flags for " +
         std::to_string(n_layer) + " layers");
  if (!(rope_theta_swa >= 0) || !std::isfinite(rope_theta_swa))
    fail("the sliding layers' rope theta must be positive");
  if (!(embd_scale >= 0) || !std::isfinite(embd_scale)) fail("embedding scale must be >= 0");
  if (!(attn_scale >= 0) || !std::isfinite(attn_scale)) fail("attention scale must be >= 0");
  if (!(final_logit_softcap >= 0) || !std::isfinite(final_logit_softcap))
    fail("final logit softcap must be >= 0");
  if (!(rope_theta > 0) || !std::isfinite(rope_theta)) fail("rope_theta must be positive");
  if (!(norm_eps > 0) || !std::isfinite(norm_eps) || norm_eps >= 1)
    fail("norm_eps must be in (0, 1)");
  if (rope_scaling.type != RopeScaling::Type::None) {
    if (!(rope_scaling.factor > 0) || !std::isfinite(rope_scaling.factor))
      fail("rope scaling factor must be positive");
    if (rope_scaling.type != RopeScaling::Type::Linear && rope_scaling.original_context <= 0)
      fail("rope scaling needs the original context length");
    if (rope_scaling.type == RopeScaling::Type::Llama3 &&
        !(rope_scaling.high_freq_factor > rope_scaling.low_freq_factor &&
          rope_scaling.low_freq_factor > 0))
      fail("llama3 rope scaling needs high_freq_factor > low_freq_factor > 0");
  }
  if (!rope_freq_factors.empty()) {
    if (static_cast<int>(rope_freq_factors.size()) != n_rot / 2)
      fail("rope frequency factors: " + std::to_string(rope_freq_factors.size()) +
           " values for n_rot / 2 = " + std::to_string(n_rot / 2) + " frequencies");
    for (size_t i = 0; i < rope_freq_factors.size(); ++i)
      if (!(rope_freq_factors[i] > 0) || !std::isfinite(rope_freq_factors[i]))
        fail("rope frequency factor " + std::to_string(i) + " must be positive and finite (got " +
             std::to_string(rope_freq_factors[i]) + ")");
    // Both would scale the same frequencies twice; no converter writes both.
    if (rope_scaling.type == RopeScaling::Type::Llama3)
      fail("llama3 rope scaling and per-frequency rope factors are both given");
  }
}

ModelConfig config_from_gguf(const GgufFile& f) {
  const std::string& path = f.path();
  auto arch_s = f.get_string("general.architecture");
  if (!arch_s) throw file_error(path, "metadata key 'general.architecture' is missing");
  ModelConfig c;
  if (const std::optional<Arch> a = arch_from_name(*arch_s))
    c.arch = *a;
  else
    throw file_error(path, "unsupported architecture '" + *arch_s + "' (rz runs " +
                               supported_arch_names() + ")");
  const std::string p = *arch_s + ".";

  auto in_range = [&](const std::string& key, int64_t v) {
    if (v < 0 || v > (int64_t{1} << 30))
      throw file_error(path,
                       "metadata key '" + key + "' is out of range (" + std::to_string(v) + ")");
    return static_cast<int>(v);
  };
  auto opt_int = [&](const std::string& key) -> std::optional<int> {
    auto v = f.get_int(key);
    if (!v) return std::nullopt;
    return in_range(key, *v);
  };
  auto req_int = [&](const std::string& key) {
    auto v = opt_int(key);
    if (!v) throw file_error(path, "metadata key '" + key + "' is missing");
    return *v;
  };
  auto req_float = [&](const std::string& key) {
    auto v = f.get_float(key);
    if (!v) throw file_error(path, "metadata key '" + key + "' is missing");
    return static_cast<float>(*v);
  };

  c.n_ctx_train = req_int(p + "context_length");
  c.n_embd = req_int(p + "embedding_length");
  c.n_layer = req_int(p + "block_count");
  c.n_ff = req_int(p + "feed_forward_length");
  c.n_head = req_int(p + "attention.head_count");
  c.n_head_kv = opt_int(p + "attention.head_count_kv").value_or(c.n_head);
  if (c.n_head <= 0)
    throw file_error(path, "metadata key '" + p + "attention.head_count' must be positive");
  c.head_dim = opt_int(p + "attention.key_length").value_or(c.n_embd / c.n_head);
  if (auto vl = opt_int(p + "attention.value_length"); vl && *vl != c.head_dim)
    throw file_error(path, "attention.value_length " + std::to_string(*vl) +
                               " differs from key_length " + std::to_string(c.head_dim) +
                               " (not supported)");
  c.n_rot = opt_int(p + "rope.dimension_count").value_or(c.head_dim);
  c.rope_theta = static_cast<float>(f.get_float(p + "rope.freq_base").value_or(10000.0));
  c.norm_eps = req_float(p + "attention.layer_norm_rms_epsilon");
  if (auto v = opt_int(p + "vocab_size")) {
    c.n_vocab = *v;
  } else {
    const GgufValue* toks = f.find("tokenizer.ggml.tokens");
    if (!toks || toks->type != GgufValueType::ARRAY)
      throw file_error(path,
                       "neither '" + p + "vocab_size' nor 'tokenizer.ggml.tokens' is present");
    c.n_vocab =
        in_range("tokenizer.ggml.tokens", static_cast<int64_t>(toks->as_array().items.size()));
  }

  // Rope scaling. Older files say "rope.scale_linear" (a float) instead.
  if (auto type = f.get_string(p + "rope.scaling.type")) {
    if (*type == "none") {
    } else if (*type == "linear") {
      c.rope_scaling.type = RopeScaling::Type::Linear;
    } else if (*type == "yarn") {
      c.rope_scaling.type = RopeScaling::Type::Yarn;
    } else {
      throw file_error(
          path, "unsupported rope scaling type '" + *type + "' (rz supports none, linear, yarn)");
    }
    if (c.rope_scaling.type != RopeScaling::Type::None) {
      c.rope_scaling.factor = req_float(p + "rope.scaling.factor");
      c.rope_scaling.original_context =
          opt_int(p + "rope.scaling.original_context_length").value_or(0);
      if (c.rope_scaling.type == RopeScaling::Type::Yarn && c.rope_scaling.original_context == 0)
        c.rope_scaling.original_context = c.n_ctx_train;
    }
  } else if (auto lin = f.get_float(p + "rope.scale_linear"); lin && *lin != 1.0) {
    c.rope_scaling.type = RopeScaling::Type::Linear;
    c.rope_scaling.factor = static_cast<float>(*lin);
  }

  // Per-frequency divisors (Llama 3.x as llama.cpp converts it). llama.cpp reads them as F32 only.
  if (const TensorView* t = f.find_tensor("rope_freqs.weight")) {
    if (t->type != GgmlType::F32)
      throw file_error(path, "tensor 'rope_freqs.weight' has type " +
                                 std::string(type_traits(t->type).name) +
                                 "; rope frequency factors must be F32");
    if (t->n_dims != 1)
      throw file_error(path, "tensor 'rope_freqs.weight' must be one-dimensional ([n_rot / 2])");
    c.rope_freq_factors.resize(static_cast<size_t>(t->n_elements()));
    std::memcpy(c.rope_freq_factors.data(), t->data, c.rope_freq_factors.size() * sizeof(float));
  }

  // llama.cpp writes Llama/Mistral Q/K rows permuted for adjacent-pair rotation; the others keep
  // the Hugging Face layout and rotate NeoX pairs.
  c.rope_neox = c.arch != Arch::Llama && c.arch != Arch::Mistral;
  c.tied_embeddings = f.find_tensor("output.weight") == nullptr;
  c.qkv_bias = f.find_tensor("blk.0.attn_q.bias") != nullptr;
  c.qk_norm = f.find_tensor("blk.0.attn_q_norm.weight") != nullptr;
  c.fused_qkv_gate_up = c.arch == Arch::Phi3;
  if (c.arch == Arch::Gemma3) {
    // What llama.cpp's gemma3 loader fixes rather than reads: every sixth layer attends to all
    // positions, the others to the sliding window with rotary base 10000; gelu (tanh) gate;
    // embeddings times sqrt(n_embd); scores scaled by 1 / sqrt(head_dim) (query_pre_attn_scalar
    // is the head dimension in every Gemma 3 but 27B, whose 1 / sqrt(n_embd / n_head) llama.cpp
    // also derives by its size: done the same way here); the norm weights stored as w (the
    // converter adds Gemma's 1).
    c.sliding_window = opt_int(p + "attention.sliding_window").value_or(0);
    c.sliding_layers.assign(size_t(c.n_layer), 1);
    for (int l = 5; l < c.n_layer; l += 6) c.sliding_layers[size_t(l)] = 0;
    c.rope_theta_swa = 10000.0f;
    c.act = ModelConfig::Act::GeluTanh;
    c.embd_scale = std::sqrt(static_cast<float>(c.n_embd));
    c.attn_scale = c.n_layer == 62 ? 1.0f / std::sqrt(static_cast<float>(c.n_embd / c.n_head))
                                   : 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    c.post_norms = true;
    if (auto cap = f.get_float(p + "final_logit_softcapping")) c.final_logit_softcap = float(*cap);
  }
  if (c.arch == Arch::Phi3) {
    // Phi-3's 128k variants (LongRoPE: two sets of per-frequency factors picked by context
    // length, and an attention factor) are not implemented; their 4k ones need none of it.
    if (f.find_tensor("rope_factors_long.weight") || f.find_tensor("rope_factors_short.weight"))
      throw file_error(path,
                       "phi3 with LongRoPE factors (rope_factors_long/short, the 128k variants) "
                       "is not supported; the 4k variants are");
    // transformers masks Phi-3 attention to its sliding window; llama.cpp's converter writes it
    // as phi3.attention.sliding_window.
    c.sliding_window = opt_int(p + "attention.sliding_window").value_or(0);
  }
  c.validate(path);
  return c;
}

}  // namespace rz
