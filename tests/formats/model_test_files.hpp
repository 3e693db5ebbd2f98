// Test helpers for the model-file tests: temporary directories, running a command with its
// output captured, and tiny random Llama-shaped models written as GGUF (GgufWriter) or as
// safetensors + config.json (write_safetensors).
#pragma once
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "formats/gguf_writer.hpp"
#include "formats/safetensors.hpp"

namespace rz::test {

// A fresh directory under $TMPDIR (or /tmp), removed with everything in it on destruction.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/rz_test_XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (!mkdtemp(buf.data())) std::abort();
    path_ = buf.data();
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  // Writes `content` to a file in the directory and returns its path.
  std::string write(const std::string& name, const std::string& content) const {
    std::ofstream(file(name), std::ios::binary) << content;
    return file(name);
  }

 private:
  std::string path_;
};

inline std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

struct CommandResult {
  int exit_code = -1;
  std::string out, err;
};

// Runs `cmd` through /bin/sh with stdout and stderr captured separately (through files).
inline CommandResult run_command(const std::string& cmd) {
  TempDir d;
  const std::string o = d.file("stdout"), e = d.file("stderr");
  int status = std::system((cmd + " >" + shell_quote(o) + " 2>" + shell_quote(e)).c_str());
  CommandResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  auto slurp = [](const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  r.out = slurp(o);
  r.err = slurp(e);
  return r;
}

// Dimensions of a tiny model (defaults: a 2-layer GQA model).
struct TinyDims {
  int n_vocab = 40, n_embd = 64, n_layer = 2, n_head = 4, n_head_kv = 2, n_ff = 96;
  int head_dim() const { return n_embd / n_head; }
};

inline std::vector<float> random_floats(size_t n, std::mt19937& rng, float scale = 0.5f) {
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

// Every weight of a Llama-family model: GGUF name and GGUF shape (ne order).
struct WeightSpec {
  std::string gguf_name, hf_name;
  std::vector<int64_t> ne;
};

inline std::vector<WeightSpec> tiny_weights(const TinyDims& d, bool tied, bool qkv_bias) {
  const int64_t E = d.n_embd, V = d.n_vocab, F = d.n_ff, Q = int64_t{d.n_head} * d.head_dim(),
                KV = int64_t{d.n_head_kv} * d.head_dim();
  std::vector<WeightSpec> w = {{"token_embd.weight", "model.embed_tokens.weight", {E, V}},
                               {"output_norm.weight", "model.norm.weight", {E}}};
  if (!tied) w.push_back({"output.weight", "lm_head.weight", {E, V}});
  for (int l = 0; l < d.n_layer; ++l) {
    const std::string g = "blk." + std::to_string(l) + ".",
                      h = "model.layers." + std::to_string(l) + ".";
    w.push_back({g + "attn_norm.weight", h + "input_layernorm.weight", {E}});
    w.push_back({g + "attn_q.weight", h + "self_attn.q_proj.weight", {E, Q}});
    w.push_back({g + "attn_k.weight", h + "self_attn.k_proj.weight", {E, KV}});
    w.push_back({g + "attn_v.weight", h + "self_attn.v_proj.weight", {E, KV}});
    if (qkv_bias) {
      w.push_back({g + "attn_q.bias", h + "self_attn.q_proj.bias", {Q}});
      w.push_back({g + "attn_k.bias", h + "self_attn.k_proj.bias", {KV}});
      w.push_back({g + "attn_v.bias", h + "self_attn.v_proj.bias", {KV}});
    }
    w.push_back({g + "attn_output.weight", h + "self_attn.o_proj.weight", {Q, E}});
    w.push_back({g + "ffn_norm.weight", h + "post_attention_layernorm.weight", {E}});
    w.push_back({g + "ffn_gate.weight", h + "mlp.gate_proj.weight", {E, F}});
    w.push_back({g + "ffn_up.weight", h + "mlp.up_proj.weight", {E, F}});
    w.push_back({g + "ffn_down.weight", h + "mlp.down_proj.weight", {F, E}});
  }
  return w;
}

inline int64_t n_elements(const std::vector<int64_t>& ne) {
  int64_t n = 1;
  for (int64_t x : ne) n *= x;
  return n;
}

// A tiny random model as a GgufWriter (metadata + F32 tensors, token_embd as Q8_0 when
// `q8_embd`). Callers may add or replace things before writing.
inline GgufWriter tiny_gguf(const TinyDims& d, const std::string& arch = "llama", bool tied = false,
                            bool qkv_bias = false, bool q8_embd = true, unsigned seed = 1) {
  std::mt19937 rng(seed);
  GgufWriter w;
  w.set_string("general.architecture", arch);
  w.set_string("general.name", "tiny-" + arch);
  const std::string p = arch + ".";
  w.set_u32(p + "context_length", 256);
  w.set_u32(p + "embedding_length", d.n_embd);
  w.set_u32(p + "block_count", d.n_layer);
  w.set_u32(p + "feed_forward_length", d.n_ff);
  w.set_u32(p + "attention.head_count", d.n_head);
  w.set_u32(p + "attention.head_count_kv", d.n_head_kv);
  w.set_f32(p + "rope.freq_base", 10000.0f);
  w.set_f32(p + "attention.layer_norm_rms_epsilon", 1e-5f);
  w.set_u32(p + "rope.dimension_count", d.head_dim());
  std::vector<std::string> toks;
  for (int i = 0; i < d.n_vocab; ++i) toks.push_back("tok" + std::to_string(i));
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string_array("tokenizer.ggml.tokens", toks);
  for (const auto& s : tiny_weights(d, tied, qkv_bias)) {
    const int64_t n = n_elements(s.ne);
    if (q8_embd && s.gguf_name == "token_embd.weight" && s.ne[0] % 32 == 0) {
      std::vector<uint8_t> q(static_cast<size_t>(n / 32) * 34);
      std::uniform_int_distribution<int> b(-127, 127);
      for (size_t blk = 0; blk < q.size() / 34; ++blk) {
        q[blk * 34] = 0x00;  // fp16 0x2000 (~0.0078): a plausible scale
        q[blk * 34 + 1] = 0x20;
        for (int i = 0; i < 32; ++i) q[blk * 34 + 2 + i] = static_cast<uint8_t>(b(rng));
      }
      w.add_tensor(s.gguf_name, GgmlType::Q8_0, s.ne, q);
    } else {
      auto v = random_floats(static_cast<size_t>(n), rng);
      w.add_tensor_f32(s.gguf_name, s.ne, v);
    }
  }
  return w;
}

// config.json text for the tiny model.
inline std::string tiny_config_json(const TinyDims& d, const std::string& model_type = "llama",
                                    bool tied = false) {
  return "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"" + model_type +
         "\", \"hidden_size\": " + std::to_string(d.n_embd) +
         ", \"num_hidden_layers\": " + std::to_string(d.n_layer) +
         ", \"num_attention_heads\": " + std::to_string(d.n_head) +
         ", \"num_key_value_heads\": " + std::to_string(d.n_head_kv) +
         ", \"intermediate_size\": " + std::to_string(d.n_ff) +
         ", \"vocab_size\": " + std::to_string(d.n_vocab) +
         ", \"max_position_embeddings\": 256, \"rope_theta\": 10000.0, \"rms_norm_eps\": 1e-05"
         ", \"tie_word_embeddings\": " +
         (tied ? "true" : "false") + "}";
}

// The tiny model's tensors as safetensors entries (HF names, row-major shapes, F32 data).
inline std::vector<SafetensorsEntry> tiny_safetensors(const TinyDims& d, bool tied = false,
                                                      bool qkv_bias = false, unsigned seed = 1) {
  std::mt19937 rng(seed);
  std::vector<SafetensorsEntry> out;
  for (const auto& s : tiny_weights(d, tied, qkv_bias)) {
    auto v = random_floats(static_cast<size_t>(n_elements(s.ne)), rng);
    SafetensorsEntry e;
    e.name = s.hf_name;
    e.dtype = "F32";
    e.shape.assign(s.ne.rbegin(), s.ne.rend());  // row-major: reverse of GGUF order
    e.data.resize(v.size() * 4);
    std::memcpy(e.data.data(), v.data(), e.data.size());
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace rz::test
