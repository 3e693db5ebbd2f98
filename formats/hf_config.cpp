// Hugging Face config.json reader (see hf_config.hpp), on simdjson's DOM API.
#include "formats/hf_config.hpp"

#include <simdjson.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>

#include "formats/common.hpp"

namespace rz {

std::string read_text_file(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) {
    int e = errno;
    throw file_error(
        path, e == ENOENT ? "no such file" : std::string("cannot open: ") + std::strerror(e));
  }
  std::string s;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
  bool err = std::ferror(f);
  std::fclose(f);
  if (err) throw file_error(path, "cannot read (is it a directory?)");
  return s;
}

namespace {

using simdjson::dom::element;
using simdjson::dom::element_type;
using simdjson::dom::object;

// Typed access to one JSON object's keys; a null value counts as absent.
class Keys {
 public:
  Keys(object obj, const std::string& where, std::string prefix = "")
      : obj_(obj), where_(where), prefix_(std::move(prefix)) {}

  std::optional<element> find(const char* key) const {
    element e;
    if (obj_.at_key(key).get(e) != simdjson::SUCCESS || e.is_null()) return std::nullopt;
    return e;
  }
  [[noreturn]] void fail(const char* key, const std::string& cause) const {
    throw file_error(where_, "\"" + prefix_ + key + "\" " + cause);
  }

  std::optional<int64_t> opt_int(const char* key) const {
    auto e = find(key);
    if (!e) return std::nullopt;
    int64_t i;
    if (e->get_int64().get(i) == simdjson::SUCCESS) return i;
    double d;
    if (e->get_double().get(d) == simdjson::SUCCESS && std::nearbyint(d) == d &&
        std::fabs(d) < 1e15)
      return static_cast<int64_t>(d);
    fail(key, "must be an integer");
  }
  int req_int(const char* key) const {
    auto v = opt_int(key);
    if (!v) fail(key, "is missing");
    return checked_int(key, *v);
  }
  int int_or(const char* key, int def) const {
    auto v = opt_int(key);
    return v ? checked_int(key, *v) : def;
  }
  std::optional<double> opt_float(const char* key) const {
    auto e = find(key);
    if (!e) return std::nullopt;
    double d;
    if (e->get_double().get(d) != simdjson::SUCCESS) fail(key, "must be a number");
    return d;
  }
  float float_or(const char* key, float def) const {
    auto v = opt_float(key);
    return v ? static_cast<float>(*v) : def;
  }
  bool bool_or(const char* key, bool def) const {
    auto e = find(key);
    if (!e) return def;
    bool b;
    if (e->get_bool().get(b) != simdjson::SUCCESS) fail(key, "must be true or false");
    return b;
  }
  std::optional<std::string> opt_string(const char* key) const {
    auto e = find(key);
    if (!e) return std::nullopt;
    std::string_view s;
    if (e->get_string().get(s) != simdjson::SUCCESS) fail(key, "must be a string");
    return std::string(s);
  }

 private:
  int checked_int(const char* key, int64_t v) const {
    if (v < 0 || v > (int64_t{1} << 30)) fail(key, "is out of range (" + std::to_string(v) + ")");
    return static_cast<int>(v);
  }
  object obj_;
  const std::string& where_;
  std::string prefix_;
};

// Rope scaling from "rope_parameters" (transformers 5) or "rope_scaling" (earlier), with
// transformers' defaulting: "rope_type" wins over "type"; for yarn and llama3 a top-level
// original_max_position_embeddings wins over the one in the dict, and max_position_embeddings
// stands in when neither is given; a yarn factor left out is max_pos / original.
// `owner` holds the dict (the top level, or gemma3's rope_parameters whose dicts are per layer
// type); `prefix` names it in messages.
RopeScaling parse_rope_scaling(const Keys& top, const Keys& owner, const std::string& prefix,
                               const char* dict_key, int max_pos, const std::string& where) {
  RopeScaling rs;
  auto e = owner.find(dict_key);
  if (!e) return rs;
  object obj;
  if (e->get_object().get(obj) != simdjson::SUCCESS) owner.fail(dict_key, "must be an object");
  Keys k(obj, where, prefix + dict_key + ".");
  auto type = k.opt_string("rope_type");
  if (!type) type = k.opt_string("type");
  if (!type || *type == "default") return rs;
  auto original = [&] {
    if (top.opt_int("original_max_position_embeddings"))
      return top.int_or("original_max_position_embeddings", 0);
    return k.int_or("original_max_position_embeddings", max_pos);
  };
  auto factor = [&](std::optional<double> def) {
    auto f = k.opt_float("factor");
    if (!f) f = def;
    if (!f) k.fail("factor", "is missing");
    if (!(*f > 0.0) || !std::isfinite(*f)) k.fail("factor", "must be a positive number");
    return static_cast<float>(*f);
  };
  if (*type == "linear") {
    rs.type = RopeScaling::Type::Linear;
    rs.factor = factor(std::nullopt);
  } else if (*type == "yarn") {
    rs.type = RopeScaling::Type::Yarn;
    rs.original_context = original();
    if (rs.original_context <= 0) k.fail("original_max_position_embeddings", "must be positive");
    rs.factor = factor(static_cast<double>(max_pos) / rs.original_context);
    // RopeScaling carries only factor and original context, so the executor must use YaRN's
    // defaults (beta_fast 32, beta_slow 1, attention factor 0.1 * ln(factor) + 1); a config that
    // sets others would silently compute a different model.
    if (k.float_or("beta_fast", 32.0f) != 32.0f)
      k.fail("beta_fast", "other than 32 is not supported");
    if (k.float_or("beta_slow", 1.0f) != 1.0f) k.fail("beta_slow", "other than 1 is not supported");
    for (const char* key : {"attention_factor", "mscale", "mscale_all_dim"})
      if (k.find(key)) k.fail(key, "is not supported");
    if (k.bool_or("truncate", true) != true) k.fail("truncate", "false is not supported");
  } else if (*type == "llama3") {
    rs.type = RopeScaling::Type::Llama3;
    rs.factor = factor(std::nullopt);
    auto lo = k.opt_float("low_freq_factor"), hi = k.opt_float("high_freq_factor");
    if (!lo) k.fail("low_freq_factor", "is missing");
    if (!hi) k.fail("high_freq_factor", "is missing");
    rs.low_freq_factor = static_cast<float>(*lo);
    rs.high_freq_factor = static_cast<float>(*hi);
    if (!(rs.high_freq_factor > rs.low_freq_factor) || !(rs.low_freq_factor > 0))
      k.fail("high_freq_factor", "must be greater than low_freq_factor > 0");
    rs.original_context = original();
  } else {
    k.fail("rope_type", "\"" + *type + "\" is not supported (rz supports linear, yarn, llama3)");
  }
  if (auto prf = k.opt_float("partial_rotary_factor"); prf && *prf != 1.0)
    k.fail("partial_rotary_factor", "other than 1 is not supported");
  return rs;
}

// Gemma3TextConfig: the block's departures from Llama (see ModelConfig), with its defaults.
void parse_gemma3(const Keys& k, object obj, ModelConfig& c) {
  c.qkv_bias = k.bool_or("attention_bias", false);
  c.qk_norm = true;
  c.post_norms = true;
  c.norm_weight_add = 1.0f;  // Gemma3RMSNorm: x * (1 + w)
  c.embd_scale = std::sqrt(static_cast<float>(c.n_embd));
  c.attn_scale = 1.0f / std::sqrt(k.float_or("query_pre_attn_scalar", 256.0f));
  c.final_logit_softcap = k.float_or("final_logit_softcapping", 0.0f);
  if (k.find("attn_logit_softcapping")) k.fail("attn_logit_softcapping", "is not supported");
  for (const char* key : {"hidden_activation", "hidden_act"})
    if (auto act = k.opt_string(key)) {
      if (*act != "gelu_pytorch_tanh")
        k.fail(key, "\"" + *act + "\" is not supported (rz implements gelu_pytorch_tanh)");
      break;
    }
  c.act = ModelConfig::Act::GeluTanh;
  if (k.bool_or("use_bidirectional_attention", false))
    k.fail("use_bidirectional_attention", "true is not supported");
  c.sliding_window = k.int_or("sliding_window", 4096);
  c.sliding_layers.assign(size_t(c.n_layer), 1);
  element lt;
  if (obj.at_key("layer_types").get(lt) == simdjson::SUCCESS && !lt.is_null()) {
    simdjson::dom::array a;
    if (lt.get_array().get(a) != simdjson::SUCCESS || a.size() != size_t(c.n_layer))
      k.fail("layer_types", "must be an array of num_hidden_layers strings");
    size_t i = 0;
    for (element e : a) {
      std::string_view t;
      if (e.get_string().get(t) != simdjson::SUCCESS ||
          (t != "sliding_attention" && t != "full_attention"))
        k.fail("layer_types", "entries must be \"sliding_attention\" or \"full_attention\"");
      c.sliding_layers[i++] = t == "sliding_attention";
    }
  } else {  // transformers 4: every sliding_window_pattern-th layer is global
    const int pattern = k.int_or("sliding_window_pattern", 6);
    for (int l = 0; l < c.n_layer; ++l)
      c.sliding_layers[size_t(l)] = pattern <= 0 || (l + 1) % pattern != 0;
  }
}

}  // namespace

ModelConfig parse_hf_config(std::string_view json, const std::string& where) {
  simdjson::dom::parser parser;
  simdjson::padded_string text(json.data(), json.size());
  element root;
  if (auto err = parser.parse(text).get(root); err != simdjson::SUCCESS)
    throw file_error(where, std::string("invalid JSON: ") + simdjson::error_message(err));
  object obj;
  if (root.get_object().get(obj) != simdjson::SUCCESS)
    throw file_error(where, "expected a JSON object");
  auto model_type = Keys(obj, where).opt_string("model_type");
  // Gemma 3's image-text checkpoints (Gemma3ForConditionalGeneration, model_type "gemma3"): rz
  // runs their language model, whose config is text_config (a gemma3_text config).
  element text_config;
  std::string prefix;
  if (model_type == "gemma3" && obj.at_key("text_config").get(text_config) == simdjson::SUCCESS &&
      !text_config.is_null()) {
    if (text_config.get_object().get(obj) != simdjson::SUCCESS)
      Keys(obj, where).fail("text_config", "must be an object");
    model_type = "gemma3_text";
    prefix = "text_config.";
  }
  Keys k(obj, where, prefix);
  if (!model_type) k.fail("model_type", "is missing");
  ModelConfig c;
  if (const std::optional<Arch> a = arch_from_name(*model_type))
    c.arch = *a;
  else
    throw file_error(where, "unsupported model_type \"" + *model_type + "\" (rz runs " +
                                supported_arch_names() + ")");

  c.n_embd = k.req_int("hidden_size");
  c.n_layer = k.req_int("num_hidden_layers");
  c.n_head = k.req_int("num_attention_heads");
  // transformers: an explicit null means "as many as num_attention_heads"; a missing key gets
  // the config class's default (LlamaConfig and Phi3Config: num_attention_heads, Qwen2Config and
  // Qwen3Config 32, MistralConfig 8).
  {
    const int absent = c.arch == Arch::Qwen2 || c.arch == Arch::Qwen3 ? 32
                       : c.arch == Arch::Mistral                      ? 8
                       : c.arch == Arch::Gemma3                       ? 4
                                                                      : c.n_head;
    element dummy;
    const bool present = obj.at_key("num_key_value_heads").get(dummy) == simdjson::SUCCESS;
    c.n_head_kv = k.int_or("num_key_value_heads", present ? c.n_head : absent);
  }
  c.n_ff = k.req_int("intermediate_size");
  c.n_vocab = k.req_int("vocab_size");
  if (c.n_head <= 0) k.fail("num_attention_heads", "must be positive");
  if (auto prf = k.opt_float("partial_rotary_factor"); prf && *prf != 1.0)
    k.fail("partial_rotary_factor", "other than 1 is not supported");
  // Qwen3Config's head_dim defaults to 128, Gemma3TextConfig's to 256; the others' to
  // hidden_size / num_attention_heads.
  c.head_dim = k.int_or("head_dim", c.arch == Arch::Qwen3    ? 128
                                    : c.arch == Arch::Gemma3 ? 256
                                                             : c.n_embd / c.n_head);
  c.n_rot = c.head_dim;
  int default_ctx = 131072;  // MistralConfig
  switch (c.arch) {
    case Arch::Llama: default_ctx = 2048; break;
    case Arch::Qwen2:
    case Arch::Qwen3: default_ctx = 32768; break;
    case Arch::Phi3: default_ctx = 4096; break;
    case Arch::Gemma3: break;  // 131072 too
    case Arch::Mistral: break;
  }
  c.n_ctx_train = k.int_or("max_position_embeddings", default_ctx);
  const bool gemma = c.arch == Arch::Gemma3;
  c.rope_theta = k.float_or("rope_theta", gemma ? 1000000.0f : 10000.0f);
  c.norm_eps = k.float_or("rms_norm_eps", 1e-6f);
  c.rope_neox = true;  // Hugging Face layout: rotate_half pairs (i, i + d/2)
  object ro;
  auto rp = k.find("rope_parameters");
  if (rp && rp->get_object().get(ro) != simdjson::SUCCESS)
    k.fail("rope_parameters", "must be an object");
  const Keys rk(ro, where, "rope_parameters.");
  if (gemma && rp && rk.find("full_attention")) {
    // transformers 5's gemma3: one dict per layer type; the sliding layers' must be unscaled.
    object full, local;
    if (rk.find("full_attention")->get_object().get(full) != simdjson::SUCCESS)
      rk.fail("full_attention", "must be an object");
    c.rope_theta =
        Keys(full, where, "rope_parameters.full_attention.").float_or("rope_theta", c.rope_theta);
    c.rope_scaling =
        parse_rope_scaling(k, rk, "rope_parameters.", "full_attention", c.n_ctx_train, where);
    c.rope_theta_swa = 10000.0f;
    if (auto sl = rk.find("sliding_attention")) {
      if (sl->get_object().get(local) != simdjson::SUCCESS)
        rk.fail("sliding_attention", "must be an object");
      c.rope_theta_swa = Keys(local, where, "rope_parameters.sliding_attention.")
                             .float_or("rope_theta", c.rope_theta_swa);
      if (parse_rope_scaling(k, rk, "rope_parameters.", "sliding_attention", c.n_ctx_train, where)
              .type != RopeScaling::Type::None)
        rk.fail("sliding_attention", "with rope scaling is not supported");
    }
  } else if (rp) {  // transformers 5: theta lives in the dict
    c.rope_theta = rk.float_or("rope_theta", c.rope_theta);
    c.rope_scaling = parse_rope_scaling(k, k, "", "rope_parameters", c.n_ctx_train, where);
  } else {
    c.rope_scaling = parse_rope_scaling(k, k, "", "rope_scaling", c.n_ctx_train, where);
  }
  if (gemma && c.rope_theta_swa == 0.0f)  // transformers 4's gemma3 config
    c.rope_theta_swa = k.float_or("rope_local_base_freq", 10000.0f);
  c.tied_embeddings = k.bool_or("tie_word_embeddings", gemma);  // Gemma3TextConfig: tied
  switch (c.arch) {
    case Arch::Qwen2: c.qkv_bias = true; break;  // Qwen2Attention: bias on q/k/v, none on o
    case Arch::Llama:
      // LlamaAttention puts attention_bias on q, k, v and o; ModelFile::open rejects the o bias.
      c.qkv_bias = k.bool_or("attention_bias", false);
      if (k.bool_or("mlp_bias", false)) k.fail("mlp_bias", "true is not supported");
      break;
    case Arch::Mistral: c.qkv_bias = false; break;
    case Arch::Qwen3:
      // Qwen3Attention: attention_bias on q, k, v and o (ModelFile::open rejects the o bias);
      // RMSNorm of each q and k head. Its sliding window applies only with use_sliding_window.
      c.qkv_bias = k.bool_or("attention_bias", false);
      c.qk_norm = true;
      if (k.bool_or("use_sliding_window", false))
        k.fail("use_sliding_window", "true is not supported");
      break;
    case Arch::Phi3:
      // Phi3Attention: fused qkv_proj and gate_up_proj, no biases; attention masked to
      // sliding_window when the config has one.
      c.fused_qkv_gate_up = true;
      c.sliding_window = k.int_or("sliding_window", 0);
      break;
    case Arch::Gemma3: parse_gemma3(k, obj, c); break;
  }
  if (auto act = k.opt_string("hidden_act"); act && *act != "silu" && !gemma)
    k.fail("hidden_act", "\"" + *act + "\" is not supported (rz implements silu)");
  c.validate(where);
  return c;
}

ModelConfig read_hf_config(const std::string& path) {
  return parse_hf_config(read_text_file(path), path);
}

}  // namespace rz
