// config_from_gguf and ModelConfig::validate: the default model's known hyper-parameters,
// synthetic GGUF files (GgufWriter) for each architecture, defaults, rope scaling and errors.
#include "formats/model_config.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "formats/common.hpp"
#include "formats/gguf.hpp"
#include "formats/gguf_writer.hpp"
#include "tests/formats/model_test_files.hpp"

namespace rz {
namespace {

using test::TempDir;
const std::string kModel = RZ_SOURCE_DIR "/models/SmolLM2-135M-Instruct.Q4_1.gguf";

// Required metadata only (no tensors): an untied, bias-free model unless tensors say otherwise.
GgufWriter meta(const std::string& arch) {
  GgufWriter w;
  w.set_string("general.architecture", arch);
  const std::string p = arch + ".";
  w.set_u32(p + "context_length", 4096);
  w.set_u32(p + "embedding_length", 256);
  w.set_u32(p + "block_count", 3);
  w.set_u32(p + "feed_forward_length", 512);
  w.set_u32(p + "attention.head_count", 8);
  w.set_f32(p + "attention.layer_norm_rms_epsilon", 1e-6f);
  w.set_u32(p + "vocab_size", 1000);
  w.add_tensor_f32("output.weight", {1}, std::vector<float>{0.0f});
  return w;
}

ModelConfig config_of(const GgufWriter& w, const TempDir& d) {
  const std::string p = d.file("m.gguf");
  w.write(p);
  return config_from_gguf(*GgufFile::open(p));
}

void expect_config_error(const GgufWriter& w, const TempDir& d, const std::string& cause) {
  const std::string p = d.file("m.gguf");
  w.write(p);
  auto f = GgufFile::open(p);
  try {
    config_from_gguf(*f);
    ADD_FAILURE() << "accepted (expected '" << cause << "')";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_EQ(m.rfind(p + ": ", 0), 0u) << m;
    EXPECT_NE(m.find(cause), std::string::npos) << "expected '" << cause << "' in: " << m;
  }
}

TEST(ModelConfigGguf, DefaultModel) {
  if (!std::filesystem::exists(kModel)) FAIL() << "missing " << kModel << ": run scripts/setup.sh";
  auto f = GgufFile::open(kModel);
  ModelConfig c = config_from_gguf(*f);
  // SmolLM2-135M-Instruct, as its model card and config.json describe it.
  EXPECT_EQ(c.arch, Arch::Llama);
  EXPECT_EQ(c.n_layer, 30);
  EXPECT_EQ(c.n_embd, 576);
  EXPECT_EQ(c.n_head, 9);
  EXPECT_EQ(c.n_head_kv, 3);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.n_rot, 64);
  EXPECT_EQ(c.n_ff, 1536);
  EXPECT_EQ(c.n_vocab, 49152);
  EXPECT_EQ(c.n_ctx_train, 8192);
  EXPECT_EQ(c.rope_theta, 100000.0f);
  EXPECT_EQ(c.norm_eps, 1e-5f);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_FALSE(c.rope_neox);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::None);
}

TEST(ModelConfigGguf, ArchitecturesAndDerivedFlags) {
  TempDir d;
  ModelConfig c = config_of(meta("llama"), d);
  EXPECT_EQ(c.arch, Arch::Llama);
  EXPECT_FALSE(c.rope_neox);
  EXPECT_FALSE(c.tied_embeddings);
  EXPECT_FALSE(c.qkv_bias);
  // Defaults: kv heads = heads, head_dim = n_embd / heads, n_rot = head_dim, theta 10000.
  EXPECT_EQ(c.n_head_kv, 8);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.n_rot, 32);
  EXPECT_EQ(c.rope_theta, 10000.0f);
  EXPECT_EQ(c.norm_eps, 1e-6f);
  EXPECT_EQ(c.n_vocab, 1000);
  EXPECT_EQ(c.n_ctx_train, 4096);

  GgufWriter q = meta("qwen2");
  q.add_tensor_f32("blk.0.attn_q.bias", {256}, std::vector<float>(256));
  c = config_of(q, d);
  EXPECT_EQ(c.arch, Arch::Qwen2);
  EXPECT_TRUE(c.rope_neox);
  EXPECT_TRUE(c.qkv_bias);

  c = config_of(meta("mistral"), d);
  EXPECT_EQ(c.arch, Arch::Mistral);
  EXPECT_FALSE(c.rope_neox);

  GgufWriter tied;  // no output.weight
  tied.set_string("general.architecture", "llama");
  for (const auto& [k, v] :
       std::vector<std::pair<std::string, uint32_t>>{{"llama.context_length", 128},
                                                     {"llama.embedding_length", 64},
                                                     {"llama.block_count", 1},
                                                     {"llama.feed_forward_length", 96},
                                                     {"llama.attention.head_count", 4}})
    tied.set_u32(k, v);
  tied.set_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  tied.set_string_array("tokenizer.ggml.tokens", {"a", "b", "c"});  // vocab from tokens
  c = config_of(tied, d);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_EQ(c.n_vocab, 3);
}

TEST(ModelConfigGguf, ExplicitKeys) {
  TempDir d;
  GgufWriter w = meta("llama");
  w.set_u32("llama.attention.head_count_kv", 2);
  w.set_u32("llama.attention.key_length", 64);
  w.set_u32("llama.attention.value_length", 64);
  w.set_u32("llama.rope.dimension_count", 48);
  w.set_f32("llama.rope.freq_base", 500000.0f);
  w.set_i32("llama.vocab_size", 777);  // any integer type is accepted
  ModelConfig c = config_of(w, d);
  EXPECT_EQ(c.n_head_kv, 2);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.n_rot, 48);
  EXPECT_EQ(c.rope_theta, 500000.0f);
  EXPECT_EQ(c.n_vocab, 777);
}

TEST(ModelConfigGguf, RopeScaling) {
  TempDir d;
  GgufWriter w = meta("llama");
  w.set_string("llama.rope.scaling.type", "linear").set_f32("llama.rope.scaling.factor", 4.0f);
  ModelConfig c = config_of(w, d);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::Linear);
  EXPECT_EQ(c.rope_scaling.factor, 4.0f);

  w = meta("qwen2");
  w.set_string("qwen2.rope.scaling.type", "yarn").set_f32("qwen2.rope.scaling.factor", 4.0f);
  w.set_u32("qwen2.rope.scaling.original_context_length", 32768);
  c = config_of(w, d);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::Yarn);
  EXPECT_EQ(c.rope_scaling.factor, 4.0f);
  EXPECT_EQ(c.rope_scaling.original_context, 32768);

  w = meta("llama");
  w.set_string("llama.rope.scaling.type", "none").set_f32("llama.rope.scaling.factor", 4.0f);
  EXPECT_EQ(config_of(w, d).rope_scaling.type, RopeScaling::Type::None);

  w = meta("llama");  // older files
  w.set_f32("llama.rope.scale_linear", 2.0f);
  c = config_of(w, d);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::Linear);
  EXPECT_EQ(c.rope_scaling.factor, 2.0f);

  // Llama 3.1 frequency factors live in a tensor: rope_scaling stays None, the tensor's values
  // become rope_freq_factors (n_rot / 2 = 16 here).
  w = meta("llama");
  std::vector<float> ff(16);
  for (int i = 0; i < 16; ++i) ff[i] = 1.0f + 0.5f * i;
  w.add_tensor_f32("rope_freqs.weight", {16}, ff);
  c = config_of(w, d);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::None);
  EXPECT_EQ(c.rope_freq_factors, ff);
  EXPECT_TRUE(config_of(meta("llama"), d).rope_freq_factors.empty());

  w = meta("llama");
  w.add_tensor_f32("rope_freqs.weight", {8}, std::vector<float>(8, 1.0f));
  expect_config_error(w, d, "rope frequency factors: 8 values for n_rot / 2 = 16");
  w = meta("llama");
  w.add_tensor_f32("rope_freqs.weight", {8, 2}, std::vector<float>(16, 1.0f));
  expect_config_error(w, d, "'rope_freqs.weight' must be one-dimensional");
  w = meta("llama");
  ff[3] = 0.0f;
  w.add_tensor_f32("rope_freqs.weight", {16}, ff);
  expect_config_error(w, d, "rope frequency factor 3 must be positive");
  w = meta("llama");
  ff[3] = NAN;
  w.add_tensor_f32("rope_freqs.weight", {16}, ff);
  expect_config_error(w, d, "rope frequency factor 3 must be positive");
  w = meta("llama");
  w.add_tensor("rope_freqs.weight", GgmlType::F16, {16}, std::vector<uint8_t>(32, 0));
  expect_config_error(w, d, "'rope_freqs.weight' has type F16; rope frequency factors must be F32");

  w = meta("llama");
  w.set_string("llama.rope.scaling.type", "longrope").set_f32("llama.rope.scaling.factor", 4.0f);
  expect_config_error(w, d, "unsupported rope scaling type 'longrope'");
  w = meta("llama");
  w.set_string("llama.rope.scaling.type", "linear");
  expect_config_error(w, d, "llama.rope.scaling.factor");
}

TEST(ModelConfigGguf, Errors) {
  TempDir d;
  GgufWriter w = meta("gpt2");
  expect_config_error(w, d, "unsupported architecture 'gpt2'");
  w = meta("llama");
  w.set_string("general.architecture", "falcon");
  expect_config_error(w, d, "unsupported architecture 'falcon'");
  GgufWriter none;
  none.set_u32("llama.block_count", 1);
  expect_config_error(none, d, "general.architecture");
  for (const char* key :
       {"context_length", "embedding_length", "block_count", "feed_forward_length",
        "attention.head_count", "attention.layer_norm_rms_epsilon"}) {
    SCOPED_TRACE(key);
    GgufWriter w2;  // the same metadata without `key`
    w2.set_string("general.architecture", "llama");
    for (const auto& [k, v] :
         std::vector<std::pair<std::string, uint32_t>>{{"context_length", 4096},
                                                       {"embedding_length", 256},
                                                       {"block_count", 3},
                                                       {"feed_forward_length", 512},
                                                       {"attention.head_count", 8},
                                                       {"vocab_size", 1000}})
      if (k != key) w2.set_u32("llama." + k, v);
    if (std::string(key) != "attention.layer_norm_rms_epsilon")
      w2.set_f32("llama.attention.layer_norm_rms_epsilon", 1e-6f);
    expect_config_error(w2, d, std::string("'llama.") + key + "' is missing");
  }
  w = meta("llama");
  w.set_string("llama.block_count", "three");
  expect_config_error(w, d, "llama.block_count");
  w = meta("llama");
  w.set_u32("llama.attention.head_count_kv", 3);
  expect_config_error(w, d, "not a multiple");
  w = meta("llama");
  w.set_i32("llama.block_count", -1);
  expect_config_error(w, d, "llama.block_count");
  w = meta("llama");
  w.set_u32("llama.attention.head_count", 0);
  expect_config_error(w, d, "head_count");
  w = meta("llama");
  w.set_u32("llama.attention.value_length", 16);
  expect_config_error(w, d, "value_length");
  GgufWriter nv;
  nv.set_string("general.architecture", "llama");
  for (const auto& [k, v] :
       std::vector<std::pair<std::string, uint32_t>>{{"context_length", 4096},
                                                     {"embedding_length", 256},
                                                     {"block_count", 3},
                                                     {"feed_forward_length", 512},
                                                     {"attention.head_count", 8}})
    nv.set_u32("llama." + k, v);
  nv.set_f32("llama.attention.layer_norm_rms_epsilon", 1e-6f);
  expect_config_error(nv, d, "tokenizer.ggml.tokens");
}

ModelConfig valid() {
  ModelConfig c;
  c.n_vocab = 100;
  c.n_embd = 64;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_head_kv = 2;
  c.head_dim = 16;
  c.n_rot = 16;
  c.n_ff = 128;
  c.n_ctx_train = 256;
  return c;
}

TEST(ModelConfig, Validate) {
  EXPECT_NO_THROW(valid().validate("w"));
  auto expect_invalid = [](ModelConfig c, const std::string& cause) {
    try {
      c.validate("where");
      ADD_FAILURE() << "accepted (expected '" << cause << "')";
    } catch (const Error& e) {
      std::string m = e.what();
      EXPECT_EQ(m.rfind("where: ", 0), 0u) << m;
      EXPECT_NE(m.find(cause), std::string::npos) << m;
    }
  };
  ModelConfig c;
  c = valid();
  c.n_vocab = 0;
  expect_invalid(c, "n_vocab");
  c = valid();
  c.n_embd = -1;
  expect_invalid(c, "n_embd");
  c = valid();
  c.n_layer = 0;
  expect_invalid(c, "n_layer");
  c = valid();
  c.n_head = 0;
  expect_invalid(c, "n_head");
  c = valid();
  c.n_head_kv = 0;
  expect_invalid(c, "n_head_kv");
  c = valid();
  c.n_head_kv = 3;
  expect_invalid(c, "not a multiple");
  c = valid();
  c.head_dim = 0;
  expect_invalid(c, "head_dim");
  c = valid();
  c.n_rot = 18;
  expect_invalid(c, "n_rot");
  c = valid();
  c.n_rot = 7;
  expect_invalid(c, "n_rot");
  c = valid();
  c.n_ff = 0;
  expect_invalid(c, "n_ff");
  c = valid();
  c.n_ctx_train = 0;
  expect_invalid(c, "n_ctx_train");
  c = valid();
  c.rope_theta = 0;
  expect_invalid(c, "rope_theta");
  c = valid();
  c.rope_theta = NAN;
  expect_invalid(c, "rope_theta");
  c = valid();
  c.norm_eps = 0;
  expect_invalid(c, "norm_eps");
  c = valid();
  c.norm_eps = NAN;
  expect_invalid(c, "norm_eps");
  c = valid();
  c.rope_scaling.type = RopeScaling::Type::Linear;
  c.rope_scaling.factor = 0;
  expect_invalid(c, "factor");
  c = valid();
  c.rope_scaling.type = RopeScaling::Type::Yarn;
  c.rope_scaling.factor = 2;
  expect_invalid(c, "original context");
  c = valid();
  c.rope_scaling.type = RopeScaling::Type::Llama3;
  c.rope_scaling.factor = 8;
  c.rope_scaling.original_context = 8192;
  c.rope_scaling.low_freq_factor = 4;
  c.rope_scaling.high_freq_factor = 1;
  expect_invalid(c, "high_freq_factor");
  c = valid();
  c.rope_freq_factors.assign(c.n_rot / 2 + 1, 1.0f);
  expect_invalid(c, "rope frequency factors");
  c = valid();
  c.rope_freq_factors.assign(c.n_rot / 2, 1.0f);
  c.rope_freq_factors[1] = -2;
  expect_invalid(c, "rope frequency factor 1");
  c = valid();
  c.rope_freq_factors.assign(c.n_rot / 2, 1.0f);
  EXPECT_NO_THROW(c.validate("m"));
  c.rope_scaling.type = RopeScaling::Type::Llama3;
  c.rope_scaling.factor = 8;
  c.rope_scaling.original_context = 8192;
  expect_invalid(c, "both given");
  EXPECT_STREQ(arch_name(Arch::Llama), "llama");
  EXPECT_STREQ(arch_name(Arch::Qwen2), "qwen2");
  EXPECT_STREQ(arch_name(Arch::Mistral), "mistral");
}

}  // namespace
}  // namespace rz
