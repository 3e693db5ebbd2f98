// rz synth, the plan: shapes, formats, llama.cpp's Q4_K_M type rule and the tensor list with
// types and byte sizes (see synth.hpp). No data here; synth.cpp generates and writes.
#include <algorithm>
#include <cstdlib>

#include "apps/synth/synth.hpp"
#include "formats/common.hpp"

namespace rz {

SynthFormat parse_synth_format(const std::string& name) {
  for (SynthFormat f : {SynthFormat::F16, SynthFormat::BF16, SynthFormat::Q8_0, SynthFormat::Q4_0,
                        SynthFormat::Q4_1, SynthFormat::Q4_K_M})
    if (name == synth_format_name(f)) return f;
  throw Error("unknown format '" + name + "' (expected f16, bf16, q8_0, q4_0, q4_1 or q4_k_m)");
}

const char* synth_format_name(SynthFormat f) {
  switch (f) {
    case SynthFormat::F16: return "f16";
    case SynthFormat::BF16: return "bf16";
    case SynthFormat::Q8_0: return "q8_0";
    case SynthFormat::Q4_0: return "q4_0";
    case SynthFormat::Q4_1: return "q4_1";
    case SynthFormat::Q4_K_M: return "q4_k_m";
  }
  return "?";
}

uint32_t synth_file_type(SynthFormat f) {
  switch (f) {  // llama.cpp's llama_ftype numbers
    case SynthFormat::F16: return 1;
    case SynthFormat::BF16: return 32;
    case SynthFormat::Q8_0: return 7;
    case SynthFormat::Q4_0: return 2;
    case SynthFormat::Q4_1: return 3;
    case SynthFormat::Q4_K_M: return 15;
  }
  return 0;
}

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

GgmlType q4_k_m_type(const SynthShape& s, const std::string& name) {
  if (name == "output.weight") return GgmlType::Q6_K;
  if (name == "token_embd.weight") return s.tied_embeddings ? GgmlType::Q6_K : GgmlType::Q4_K;
  if (name.rfind("blk.", 0) == 0) {
    const int layer = std::atoi(name.c_str() + 4);
    const bool more = name.ends_with(".attn_v.weight") || name.ends_with(".ffn_down.weight");
    if (more && use_more_bits(layer, s.n_layer)) return GgmlType::Q6_K;
  }
  return GgmlType::Q4_K;
}

namespace {

GgmlType pure_type(SynthFormat f) {
  switch (f) {
    case SynthFormat::F16: return GgmlType::F16;
    case SynthFormat::BF16: return GgmlType::BF16;
    case SynthFormat::Q8_0: return GgmlType::Q8_0;
    case SynthFormat::Q4_0: return GgmlType::Q4_0;
    case SynthFormat::Q4_1: return GgmlType::Q4_1;
    case SynthFormat::Q4_K_M: break;
  }
  return GgmlType::Q4_K;
}

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

std::vector<SynthTensor> synth_plan(const SynthShape& s, SynthFormat f) {
  using Init = SynthTensor::Init;
  std::vector<SynthTensor> plan;
  auto add = [&](const std::string& name, std::vector<int64_t> ne, Init init) {
    GgmlType t = GgmlType::F32;
    if (init == Init::Matrix) t = f == SynthFormat::Q4_K_M ? q4_k_m_type(s, name) : pure_type(f);
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
