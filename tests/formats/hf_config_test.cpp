// config.json reader tests: every case of tests/golden/hf_config_golden.json (what transformers
// derives from each config, made by make_hf_config_golden.py) and the errors rz must raise.
#include "formats/hf_config.hpp"

#include <gtest/gtest.h>
#include <simdjson.h>

#include <filesystem>

#include "formats/common.hpp"
#include "tests/formats/model_test_files.hpp"

namespace rz {
namespace {

const std::string kGolden = RZ_SOURCE_DIR "/tests/golden/hf_config_golden.json";

void expect_error(std::string_view json, const std::string& cause) {
  try {
    parse_hf_config(json, "dir/config.json");
    ADD_FAILURE() << "accepted: " << json;
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_EQ(m.rfind("dir/config.json: ", 0), 0u) << m;
    EXPECT_NE(m.find(cause), std::string::npos) << "expected '" << cause << "' in: " << m;
  }
}

TEST(HfConfig, MatchesTransformersGolden) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  ASSERT_EQ(parser.load(kGolden).get(root), simdjson::SUCCESS) << kGolden;
  simdjson::dom::array cases = root["cases"];
  ASSERT_GE(cases.size(), 10u);
  for (auto c : cases) {
    const std::string name{std::string_view(c["name"])};
    SCOPED_TRACE(name);
    const std::string json = simdjson::to_string(c["config"]);
    ModelConfig m = parse_hf_config(json, name);
    auto ex = c["expected"];
    EXPECT_EQ(m.n_embd, int64_t(ex["n_embd"]));
    EXPECT_EQ(m.n_layer, int64_t(ex["n_layer"]));
    EXPECT_EQ(m.n_head, int64_t(ex["n_head"]));
    EXPECT_EQ(m.n_head_kv, int64_t(ex["n_head_kv"]));
    EXPECT_EQ(m.head_dim, int64_t(ex["head_dim"]));
    EXPECT_EQ(m.n_rot, int64_t(ex["head_dim"]));
    EXPECT_EQ(m.n_ff, int64_t(ex["n_ff"]));
    EXPECT_EQ(m.n_vocab, int64_t(ex["n_vocab"]));
    EXPECT_EQ(m.n_ctx_train, int64_t(ex["n_ctx_train"]));
    EXPECT_EQ(m.rope_theta, float(double(ex["rope_theta"])));
    EXPECT_EQ(m.norm_eps, float(double(ex["norm_eps"])));
    EXPECT_EQ(m.tied_embeddings, bool(ex["tied_embeddings"]));
    EXPECT_EQ(m.qkv_bias, bool(ex["qkv_bias"]));
    EXPECT_TRUE(m.rope_neox);  // Hugging Face layout
    const std::string_view rt = ex["rope_type"];
    using T = RopeScaling::Type;
    const T want = rt == "default"  ? T::None
                   : rt == "linear" ? T::Linear
                   : rt == "yarn"   ? T::Yarn
                   : rt == "llama3" ? T::Llama3
                                    : T(-1);
    EXPECT_EQ(int(m.rope_scaling.type), int(want)) << rt;
    if (want != T::None) {
      EXPECT_EQ(m.rope_scaling.factor, float(double(ex["rope_factor"])));
    }
    if (want == T::Yarn || want == T::Llama3) {
      EXPECT_EQ(m.rope_scaling.original_context, int64_t(ex["rope_original_context"]));
    }
    if (want == T::Llama3) {
      EXPECT_EQ(m.rope_scaling.low_freq_factor, float(double(ex["rope_low_freq_factor"])));
      EXPECT_EQ(m.rope_scaling.high_freq_factor, float(double(ex["rope_high_freq_factor"])));
    }
  }
}

TEST(HfConfig, ArchitecturesAndNulls) {
  const char* base = R"("hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                        "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 100)";
  EXPECT_EQ(parse_hf_config(std::string("{\"model_type\": \"llama\", ") + base + "}", "x").arch,
            Arch::Llama);
  EXPECT_EQ(parse_hf_config(std::string("{\"model_type\": \"qwen2\", ") + base + "}", "x").arch,
            Arch::Qwen2);
  EXPECT_EQ(parse_hf_config(std::string("{\"model_type\": \"mistral\", ") + base + "}", "x").arch,
            Arch::Mistral);
  // Qwen3: per-head q/k norms, head_dim 128 unless given, no biases unless attention_bias.
  ModelConfig q3 = parse_hf_config(std::string("{\"model_type\": \"qwen3\", ") + base + "}", "x");
  EXPECT_EQ(q3.arch, Arch::Qwen3);
  EXPECT_TRUE(q3.qk_norm);
  EXPECT_FALSE(q3.qkv_bias);
  EXPECT_EQ(q3.head_dim, 128);
  EXPECT_TRUE(q3.rope_neox);
  EXPECT_EQ(q3.sliding_window, 0);
  EXPECT_THROW(parse_hf_config(std::string("{\"model_type\": \"qwen3\", "
                                           "\"use_sliding_window\": true, ") +
                                   base + "}",
                               "x"),
               Error);
  // Phi-3: fused tensors, its sliding window kept, 4096 positions by default.
  ModelConfig p3 = parse_hf_config(
      std::string("{\"model_type\": \"phi3\", \"sliding_window\": 2047, ") + base + "}", "x");
  EXPECT_EQ(p3.arch, Arch::Phi3);
  EXPECT_TRUE(p3.fused_qkv_gate_up);
  EXPECT_FALSE(p3.qk_norm);
  EXPECT_EQ(p3.sliding_window, 2047);
  EXPECT_EQ(p3.layer_window(1), 2047);
  EXPECT_EQ(p3.head_dim, 16);
  EXPECT_EQ(p3.n_ctx_train, 4096);
  // Phi-3's 128k variants (LongRoPE) are refused by name.
  EXPECT_THROW(parse_hf_config(std::string("{\"model_type\": \"phi3\", \"rope_scaling\": "
                                           "{\"type\": \"longrope\", \"short_factor\": [1], "
                                           "\"long_factor\": [1]}, ") +
                                   base + "}",
                               "x"),
               Error);
  // Gemma 3 image-text: the language model's config is text_config; its errors name it.
  ModelConfig g3 = parse_hf_config(std::string("{\"model_type\": \"gemma3\", \"text_config\": "
                                               "{\"model_type\": \"gemma3_text\", ") +
                                       base + "}}",
                                   "x");
  EXPECT_EQ(g3.arch, Arch::Gemma3);
  EXPECT_EQ(g3.n_embd, 64);
  EXPECT_EQ(g3.head_dim, 256);          // Gemma3TextConfig's default
  EXPECT_EQ(g3.layer_window(1), 4096);  // 2 layers: no sixth, global one
  EXPECT_EQ(g3.sliding_window, 4096);   // Gemma3TextConfig's default
  try {
    parse_hf_config(R"({"model_type": "gemma3", "text_config": {"hidden_size": 64}})", "x");
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("\"text_config.num_hidden_layers\" is missing"),
              std::string::npos)
        << e.what();
  }
  // null counts as absent; a llama's sliding_window is ignored.
  ModelConfig m =
      parse_hf_config(std::string("{\"model_type\": \"llama\", \"head_dim\": null, "
                                  "\"rope_scaling\": null, \"sliding_window\": 4096, ") +
                          base + "}",
                      "x");
  EXPECT_EQ(m.head_dim, 16);
  EXPECT_EQ(m.rope_scaling.type, RopeScaling::Type::None);
  // "rope_type": "default" is no scaling.
  m = parse_hf_config(
      std::string("{\"model_type\": \"llama\", \"rope_scaling\": {\"rope_type\": \"default\"}, ") +
          base + "}",
      "x");
  EXPECT_EQ(m.rope_scaling.type, RopeScaling::Type::None);
  // transformers reads a rope_scaling dict without a type as "default" (the factor is unused).
  m = parse_hf_config(
      std::string("{\"model_type\": \"llama\", \"rope_scaling\": {\"factor\": 2.0}, ") + base + "}",
      "x");
  EXPECT_EQ(m.rope_scaling.type, RopeScaling::Type::None);
  // qwen2 without num_key_value_heads gets Qwen2Config's default of 32 (as transformers does).
  const char* no_kv = R"("hidden_size": 512, "num_hidden_layers": 1, "num_attention_heads": 64,
                         "intermediate_size": 128, "vocab_size": 100)";
  EXPECT_EQ(
      parse_hf_config(std::string("{\"model_type\": \"qwen2\", ") + no_kv + "}", "x").n_head_kv,
      32);
  EXPECT_EQ(
      parse_hf_config(std::string("{\"model_type\": \"mistral\", ") + no_kv + "}", "x").n_head_kv,
      8);
  EXPECT_EQ(
      parse_hf_config(std::string("{\"model_type\": \"llama\", ") + no_kv + "}", "x").n_head_kv,
      64);
}

TEST(HfConfig, Errors) {
  const std::string base = R"("hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                               "intermediate_size": 128, "vocab_size": 100)";
  auto llama = [&](const std::string& extra) {
    return "{\"model_type\": \"llama\", " + extra + base + "}";
  };
  expect_error("{\"model_type\": \"gpt2\", " + base + "}", "unsupported model_type \"gpt2\"");
  expect_error(
      "{\"model_type\": \"gemma2\", " + base + "}",
      "unsupported model_type \"gemma2\" (rz runs llama, qwen2, mistral, qwen3, phi3, gemma3)");
  expect_error("{" + base + "}", "model_type");
  expect_error("{\"model_type\": \"llama\"}", "hidden_size");
  expect_error(R"({"model_type": "llama", "hidden_size": 64})", "num_hidden_layers");
  expect_error("not json", "invalid JSON");
  expect_error("[1, 2]", "JSON object");
  expect_error("", "invalid JSON");
  expect_error(llama("\"num_key_value_heads\": 3, "), "not a multiple");
  expect_error(llama("\"num_key_value_heads\": \"two\", "), "num_key_value_heads");
  expect_error("{\"model_type\": \"llama\", \"hidden_size\": -64, " +
                   base.substr(base.find("\"num_hidden")) + "}",
               "hidden_size");
  expect_error(llama("\"hidden_size\": 1.5, "),
               "");  // duplicate key or non-integer: rejected either way
  expect_error(llama("\"rope_scaling\": {\"type\": \"dynamic\", \"factor\": 2.0}, "),
               "\"dynamic\" is not supported");
  expect_error(llama("\"rope_scaling\": {\"type\": \"longrope\", \"factor\": 2.0}, "),
               "not supported");
  expect_error(llama("\"rope_scaling\": {\"type\": \"linear\"}, "), "rope_scaling.factor");
  expect_error(llama("\"rope_scaling\": {\"type\": \"llama3\", \"factor\": 8.0}, "),
               "low_freq_factor");
  expect_error(
      llama("\"rope_scaling\": {\"type\": \"yarn\", \"factor\": 4.0, \"beta_fast\": 16}, "),
      "beta_fast");
  expect_error(
      llama("\"rope_scaling\": {\"type\": \"yarn\", \"factor\": 4.0, \"attention_factor\": 0.5}, "),
      "attention_factor");
  expect_error(llama("\"rope_scaling\": 2, "), "rope_scaling");
  expect_error(llama("\"mlp_bias\": true, "), "mlp_bias");
  expect_error(llama("\"hidden_act\": \"gelu\", "), "hidden_act");
  expect_error(llama("\"partial_rotary_factor\": 0.5, "), "partial_rotary_factor");
  expect_error(llama("\"rms_norm_eps\": 0, "), "norm_eps");
  expect_error(llama("\"tie_word_embeddings\": 1, "), "tie_word_embeddings");
}

TEST(HfConfig, ReadsFilesAndNamesThem) {
  test::TempDir d;
  const std::string p = d.write("config.json", test::tiny_config_json(test::TinyDims{}));
  ModelConfig m = read_hf_config(p);
  EXPECT_EQ(m.n_embd, 64);
  EXPECT_EQ(m.n_head_kv, 2);
  try {
    read_hf_config(d.file("missing.json"));
    ADD_FAILURE() << "missing file accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), d.file("missing.json") + ": no such file");
  }
  const std::string bad = d.write("bad.json", "{\"model_type\": \"bert\"}");
  try {
    read_hf_config(bad);
    ADD_FAILURE() << "bert accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind(bad + ": unsupported model_type \"bert\"", 0), 0u)
        << e.what();
  }
}

}  // namespace
}  // namespace rz
