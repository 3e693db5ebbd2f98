// rz synth, the plan: shapes, formats, llama.cpp's per-tensor type rules and the tensor list with
// types and byte sizes (see synth.hpp). No data here; synth.cpp generates and writes.
#include <algorithm>
#include <cstdlib>

#include "apps/synth/synth.hpp"
#include "formats/common.hpp"

namespace rz {

namespace {

struct FormatInfo {
  SynthFormat format;
  const char* name;
  uint32_t file_type;  // llama.cpp's llama_ftype
  GgmlType base;       // the type of every matrix no rule changes
};

constexpr FormatInfo kFormats[] = {
    {SynthFormat::F16, "f16", 1, GgmlType::F16},
    {SynthFormat::BF16, "bf16", 32, GgmlType::BF16},
    {SynthFormat::Q8_0, "q8_0", 7, GgmlType::Q8_0},
    {SynthFormat::Q4_0, "q4_0", 2, GgmlType::Q4_0},
    {SynthFormat::Q4_1, "q4_1", 3, GgmlType::Q4_1},
    {SynthFormat::Q5_0, "q5_0", 8, GgmlType::Q5_0},
    {SynthFormat::Q5_1, "q5_1", 9, GgmlType::Q5_1},
    {SynthFormat::Q2_K, "q2_k", 10, GgmlType::Q2_K},
    {SynthFormat::Q3_K_M, "q3_k_m", 12, GgmlType::Q3_K},
    {SynthFormat::Q4_K_M, "q4_k_m", 15, GgmlType::Q4_K},
    {SynthFormat::Q5_K_M, "q5_k_m", 17, GgmlType::Q5_K},
    {SynthFormat::Q6_K, "q6_k", 18, GgmlType::Q6_K},
    {SynthFormat::IQ4_XS, "iq4_xs", 30, GgmlType::IQ4_XS},
};

const FormatInfo& info(SynthFormat f) {
  for (const FormatInfo& i : kFormats)
    if (i.format == f) return i;
  throw Error("synth: unknown format");
}

}  // namespace

const std::string& synth_format_list() {
  static const std::string list = [] {
    std::string s;
    for (const FormatInfo& i : kFormats) s += (s.empty() ? "" : ", ") + std::string(i.name);
    return s;
  }();
  return list;
}

SynthFormat parse_synth_format(const std::string& name) {
  for (const FormatInfo& i : kFormats)
    if (name == i.name) return i.format;
  throw Error("unknown format '" + name + "' (expected " + synth_format_list() + ")");
}

const char* synth_format_name(SynthFormat f) { return info(f).name; }

uint32_t synth_file_type(SynthFormat f) { return info(f).file_type; }

const std::vector<std::string>& synth_shape_names() {
  static const std::vector<std::string> names = {"tiny", "qwen2.5-1.5b", "llama3.1-8b"};
  return names;
}

SynthShape synth_shape(const std::string& name, int vocab_tokens) {
  SynthShape s;
  s.name = name;
  if (name == "tiny") {
    s.arch = "llama";
    s.n_vocab = (std::max(vocab_tokens, 256) + 127) / 128 * 128;
    s.n_embd = 256;
    s.n_layer = 2;
    s.n_head = 4;
    s.n_head_kv = 2;
    s.head_dim = 64;
    s.n_ff = 512;  // a multiple of Q4_K's 256-element blocks (ffn_down rows)
    s.n_ctx = 2048;
    s.rope_theta = 10000.0f;
    s.norm_eps = 1e-5f;
  } else if (name == "qwen2.5-1.5b") {
    s.arch = "qwen2";
    s.n_vocab = 151936;
    s.n_embd = 1536;
    s.n_layer = 28;
    s.n_head = 12;
    s.n_head_kv = 2;
    s.head_dim = 128;
    s.n_ff = 8960;
    s.n_ctx = 32768;
    s.rope_theta = 1e6f;
    s.norm_eps = 1e-6f;
    s.tied_embeddings = true;
    s.qkv_bias = true;
  } else if (name == "llama3.1-8b") {
    s.arch = "llama";
    s.n_vocab = 128256;
    s.n_embd = 4096;
    s.n_layer = 32;
    s.n_head = 32;
    s.n_head_kv = 8;
    s.head_dim = 128;
    s.n_ff = 14336;
    s.n_ctx = 131072;
    s.rope_theta = 5e5f;
    s.norm_eps = 1e-5f;
    s.llama3_rope = true;
  } else {
    throw Error("unknown shape '" + name + "' (expected tiny, qwen2.5-1.5b or llama3.1-8b)");
  }
  return s;
}

bool use_more_bits(int i_layer, int n_layers) {
  return i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2;
}

// llama.cpp's llama_tensor_get_type for these presets on a dense llama/qwen2 model without an
// importance matrix: the rules that apply, in its order, then its fallback for rows that are not
// whole 256-element super-blocks.
GgmlType preset_type(const SynthShape& s, SynthFormat f, const std::string& name, int64_t cols,
                     bool pure) {
  const GgmlType base = info(f).base;
  const bool quantized = f != SynthFormat::F16 && f != SynthFormat::BF16;
  GgmlType t = base;
  const bool is_output =
      name == "output.weight" || (s.tied_embeddings && name == "token_embd.weight");
  const int layer = name.rfind("blk.", 0) == 0 ? std::atoi(name.c_str() + 4) : -1;
  const auto is = [&](const char* suffix) { return layer >= 0 && name.ends_with(suffix); };
  const int n_gqa = s.n_head / s.n_head_kv;
  if (!quantized || pure) {
  } else if (is_output) {
    if (cols % 256 != 0)
      t = GgmlType::Q8_0;
    else if (base != GgmlType::Q8_0)
      t = GgmlType::Q6_K;
  } else if (is(".attn_v.weight")) {
    if (f == SynthFormat::Q2_K)
      t = n_gqa >= 4 ? GgmlType::Q4_K : GgmlType::Q3_K;
    else if (f == SynthFormat::Q3_K_M)
      t = layer < 2 ? GgmlType::Q5_K : GgmlType::Q4_K;
    else if (f == SynthFormat::IQ4_XS && n_gqa >= 4)
      t = GgmlType::Q5_K;
    else if ((f == SynthFormat::Q4_K_M || f == SynthFormat::Q5_K_M) &&
             use_more_bits(layer, s.n_layer))
      t = GgmlType::Q6_K;
  } else if (is(".ffn_down.weight")) {
    if (f == SynthFormat::Q2_K)
      t = GgmlType::Q3_K;
    else if (f == SynthFormat::Q3_K_M)
      t = layer < s.n_layer / 16 ? GgmlType::Q5_K : GgmlType::Q4_K;
    else if ((f == SynthFormat::Q4_K_M || f == SynthFormat::Q5_K_M) &&
             use_more_bits(layer, s.n_layer))
      t = GgmlType::Q6_K;
  } else if (is(".attn_output.weight")) {
    if (f == SynthFormat::Q2_K)
      t = GgmlType::Q3_K;
    else if (f == SynthFormat::Q3_K_M)
      t = GgmlType::Q4_K;
  }
  if (cols % 256 != 0) {  // llama.cpp's fallback for rows of partial super-blocks
    switch (t) {
      case GgmlType::Q2_K:
      case GgmlType::Q3_K:
      case GgmlType::IQ4_XS: t = GgmlType::IQ4_NL; break;
      case GgmlType::Q4_K: t = GgmlType::Q5_0; break;
      case GgmlType::Q5_K: t = GgmlType::Q5_1; break;
      case GgmlType::Q6_K: t = GgmlType::Q8_0; break;
      default: break;
    }
  }
  return t;
}

namespace {

uint64_t tensor_bytes(const std::string& name, GgmlType t, const std::vector<int64_t>& ne) {
  const TypeTraits& tr = type_traits(t);
  if (ne[0] % tr.block_size != 0)
    throw Error("synth: tensor '" + name + "': row of " + std::to_string(ne[0]) +
                " is not a whole number of " + std::string(tr.name) + " blocks");
  uint64_t n = 1;
  for (int64_t d : ne) n *= static_cast<uint64_t>(d);
  return n / tr.block_size * tr.type_size;
}

}  // namespace

std::vector<SynthTensor> synth_plan(const SynthShape& s, SynthFormat f, bool pure) {
  using Init = SynthTensor::Init;
  std::vector<SynthTensor> plan;
  auto add = [&](const std::string& name, std::vector<int64_t> ne, Init init) {
    GgmlType t = GgmlType::F32;
    if (init == Init::Matrix) t = preset_type(s, f, name, ne[0], pure);
    const uint64_t bytes = tensor_bytes(name, t, ne);
    plan.push_back(SynthTensor{name, t, std::move(ne), bytes, init});
  };
  const int64_t E = s.n_embd, V = s.n_vocab, F = s.n_ff;
  const int64_t Q = int64_t{s.n_head} * s.head_dim, KV = int64_t{s.n_head_kv} * s.head_dim;
  add("token_embd.weight", {E, V}, Init::Matrix);
  add("output_norm.weight", {E}, Init::Norm);
  if (!s.tied_embeddings) add("output.weight", {E, V}, Init::Matrix);
  if (s.llama3_rope) add("rope_freqs.weight", {s.head_dim / 2}, Init::RopeFreqs);
  for (int i = 0; i < s.n_layer; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    add(b + "attn_norm.weight", {E}, Init::Norm);
    add(b + "attn_q.weight", {E, Q}, Init::Matrix);
    if (s.qkv_bias) add(b + "attn_q.bias", {Q}, Init::Bias);
    add(b + "attn_k.weight", {E, KV}, Init::Matrix);
    if (s.qkv_bias) add(b + "attn_k.bias", {KV}, Init::Bias);
    add(b + "attn_v.weight", {E, KV}, Init::Matrix);
    if (s.qkv_bias) add(b + "attn_v.bias", {KV}, Init::Bias);
    add(b + "attn_output.weight", {Q, E}, Init::Matrix);
    add(b + "ffn_norm.weight", {E}, Init::Norm);
    add(b + "ffn_gate.weight", {E, F}, Init::Matrix);
    add(b + "ffn_up.weight", {E, F}, Init::Matrix);
    add(b + "ffn_down.weight", {F, E}, Init::Matrix);
  }
  return plan;
}

uint64_t synth_plan_bytes(const std::vector<SynthTensor>& plan) {
  uint64_t total = 0;
  for (const auto& t : plan) total += t.bytes;
  return total;
}

}  // namespace rz
