// Tokenizer::from_hf_dir: a tokenizer.json written with SmolLM2's vocabulary and merges (from
// its GGUF) and the pre-tokenizer structure of SmolLM2's real tokenizer.json must reproduce the
// Hugging Face golden ids; unsupported tokenizer.json contents are clear errors.
#include <gtest/gtest.h>
#include <simdjson.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "formats/common.hpp"
#include "tests/tokenizer/tokenizer_test_util.hpp"

namespace rz {
namespace {

namespace fs = std::filesystem;

using test::json_str;

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/rz_tok_hf_XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(path + "/" + name) << text;
  }
};

// tokenizer.json in the shape of SmolLM2's, with the vocabulary of `gguf_path`.
std::string smollm_tokenizer_json(const GgufFile& g, bool merges_as_pairs) {
  auto tokens = g.get_string_array("tokenizer.ggml.tokens");
  auto types = g.get_int_array("tokenizer.ggml.token_type");
  auto merges = g.get_string_array("tokenizer.ggml.merges");
  std::string j =
      "{\"version\": \"1.0\", \"truncation\": null, \"padding\": null, \"added_tokens\": [";
  bool first = true;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (types[i] != 3) continue;
    j += std::string(first ? "" : ", ") + "{\"id\": " + std::to_string(i) +
         ", \"content\": " + json_str(tokens[i]) +
         ", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, "
         "\"normalized\": false, \"special\": true}";
    first = false;
  }
  j += "], \"normalizer\": null, \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": ["
       "{\"type\": \"Digits\", \"individual_digits\": true}, {\"type\": \"ByteLevel\", "
       "\"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": true}]}, "
       "\"post_processor\": null, \"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": "
       "true, \"trim_offsets\": true, \"use_regex\": true}, \"model\": {\"type\": \"BPE\", "
       "\"dropout\": null, \"unk_token\": \"<|endoftext|>\", \"fuse_unk\": false, "
       "\"byte_fallback\": false, \"ignore_merges\": false, \"vocab\": {";
  for (size_t i = 0; i < tokens.size(); ++i)
    j += (i ? ", " : "") + json_str(tokens[i]) + ": " + std::to_string(i);
  j += "}, \"merges\": [";
  for (size_t i = 0; i < merges.size(); ++i) {
    j += i ? ", " : "";
    if (merges_as_pairs) {
      size_t sp = merges[i].find(' ', 1);
      j +=
          "[" + json_str(merges[i].substr(0, sp)) + ", " + json_str(merges[i].substr(sp + 1)) + "]";
    } else {
      j += json_str(merges[i]);
    }
  }
  return j + "]}}";
}

TEST(TokenizerHf, SmolLM2TokenizerJsonMatchesGolden) {
  std::string model = test::smollm2_path();
  ASSERT_TRUE(fs::exists(model)) << model << " missing: run scripts/setup.sh";
  auto g = GgufFile::open(model);
  simdjson::dom::parser parser;
  simdjson::dom::element golden =
      parser.load(RZ_SOURCE_DIR "/tests/golden/smollm2_tokenizer_golden.json");
  for (bool pairs : {false, true}) {
    TempDir dir;
    dir.write("tokenizer.json", smollm_tokenizer_json(*g, pairs));
    dir.write("tokenizer_config.json",
              "{\"add_bos_token\": false, \"bos_token\": \"<|im_start|>\", "
              "\"eos_token\": {\"content\": \"<|im_end|>\"}}");
    auto t = Tokenizer::from_hf_dir(dir.path);
    EXPECT_EQ(t->pre(), "smollm");
    EXPECT_EQ(t->n_vocab(), 49152);
    EXPECT_EQ(t->bos_id(), 1);
    EXPECT_EQ(t->eos_id(), 2);
    EXPECT_FALSE(t->add_bos());
    EXPECT_TRUE(t->is_eog(2));
    int n = 0;
    for (simdjson::dom::element c : golden["cases"].get_array()) {
      std::string text = std::string(std::string_view(c["text"]));
      std::vector<int32_t> ids, ids_special;
      for (int64_t x : c["ids"].get_array()) ids.push_back(static_cast<int32_t>(x));
      for (int64_t x : c["ids_special"].get_array()) ids_special.push_back(static_cast<int32_t>(x));
      EXPECT_EQ(t->encode(text, false, false), ids) << text;
      EXPECT_EQ(t->encode(text, false, true), ids_special) << text;
      EXPECT_EQ(t->decode(ids), text);
      ++n;
    }
    EXPECT_GE(n, 40);
  }
}

TEST(TokenizerHf, UnsupportedContentsAreClearErrors) {
  TempDir dir;
  auto expect_error = [&](const std::string& json, const std::string& needle) {
    dir.write("tokenizer.json", json);
    try {
      Tokenizer::from_hf_dir(dir.path);
      ADD_FAILURE() << "no error for " << json;
    } catch (const Error& e) {
      std::string m = e.what();
      EXPECT_NE(m.find(dir.path + "/tokenizer.json"), std::string::npos) << m;
      EXPECT_NE(m.find(needle), std::string::npos) << m;
    }
  };
  expect_error("{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}", "not supported yet");
  expect_error(
      "{\"model\": {\"type\": \"BPE\", \"byte_fallback\": true, \"vocab\": {\"a\": 0}, "
      "\"merges\": []}}",
      "not supported yet");
  expect_error(
      "{\"normalizer\": {\"type\": \"NFC\"}, \"model\": {\"type\": \"BPE\", \"vocab\": "
      "{\"a\": 0}, \"merges\": []}}",
      "not supported yet");
  expect_error(
      "{\"pre_tokenizer\": {\"type\": \"Whitespace\"}, \"decoder\": {\"type\": "
      "\"ByteLevel\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}",
      "Whitespace");
  expect_error("{not json", "not valid JSON");
  EXPECT_THROW(Tokenizer::from_hf_dir("/nonexistent/dir"), Error);
}

TEST(TokenizerHf, SplitRegexSequence) {
  // A Llama-3-style tokenizer.json: Split with an explicit regex, ByteLevel without regex, and a
  // template post-processor that adds BOS. Tiny vocabulary: bytes a, b, space stand-in Ġ, merges.
  TempDir dir;
  dir.write("tokenizer.json", R"({
    "added_tokens": [{"id": 5, "content": "<|begin_of_text|>", "special": true}],
    "normalizer": null,
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}, "behavior": "Isolated", "invert": false},
      {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]},
    "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}]},
    "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "ignore_merges": true, "vocab": {"a": 0, "b": 1, "\u0120": 2, "ab": 3, "\u0120ab": 4},
              "merges": ["a b", "\u0120 ab"]}})");
  auto t = Tokenizer::from_hf_dir(dir.path);
  EXPECT_EQ(t->pre(), "llama-bpe");
  EXPECT_TRUE(t->add_bos());
  EXPECT_EQ(t->bos_id(), 5);
  EXPECT_EQ(t->encode("ab ab", true, false), (std::vector<int32_t>{5, 3, 4}));
  EXPECT_EQ(t->decode(t->encode("ab ab", true, false), true), "ab ab");
}

}  // namespace
}  // namespace rz
