// SmolLM2's tokenizer against golden ids from Hugging Face `tokenizers` and transformers' GGUF
// loader (tests/golden/smollm2_tokenizer_golden.json, written by make_tokenizer_golden.py):
// ids with and without special-token parsing, decode, and streaming decode.
#include <gtest/gtest.h>
#include <simdjson.h>

#include <filesystem>

#include "tests/tokenizer/tokenizer_test_util.hpp"

namespace rz {
namespace {

struct GoldenCase {
  std::string text, decoded;
  std::vector<int32_t> ids, ids_special;
};

std::vector<GoldenCase> read_golden(const std::string& path) {
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.load(path);
  std::vector<GoldenCase> out;
  for (simdjson::dom::element c : doc["cases"].get_array()) {
    GoldenCase g;
    g.text = std::string(std::string_view(c["text"]));
    g.decoded = std::string(std::string_view(c["decoded"]));
    for (int64_t x : c["ids"].get_array()) g.ids.push_back(static_cast<int32_t>(x));
    for (int64_t x : c["ids_special"].get_array()) g.ids_special.push_back(static_cast<int32_t>(x));
    out.push_back(std::move(g));
  }
  return out;
}

std::string ids_str(const std::vector<int32_t>& v) {
  std::string s;
  for (int32_t x : v) s += (s.empty() ? "" : " ") + std::to_string(x);
  return s;
}

class SmolLM2Golden : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string model = test::smollm2_path();
    ASSERT_TRUE(std::filesystem::exists(model)) << model << " missing: run scripts/setup.sh";
    tok_ = test::load_tokenizer(model);
    cases_ = read_golden(RZ_SOURCE_DIR "/tests/golden/smollm2_tokenizer_golden.json");
    ASSERT_GE(cases_.size(), 40u);
  }
  std::shared_ptr<Tokenizer> tok_;
  std::vector<GoldenCase> cases_;
};

TEST_F(SmolLM2Golden, IdsWithoutSpecialParsing) {
  for (const auto& c : cases_)
    EXPECT_EQ(ids_str(tok_->encode(c.text, false, false)), ids_str(c.ids)) << "text: " << c.text;
}

TEST_F(SmolLM2Golden, IdsWithSpecialParsing) {
  for (const auto& c : cases_)
    EXPECT_EQ(ids_str(tok_->encode(c.text, false, true)), ids_str(c.ids_special))
        << "text: " << c.text;
}

TEST_F(SmolLM2Golden, AddSpecialAddsNothingWithoutTheFlags) {
  for (const auto& c : cases_) EXPECT_EQ(tok_->encode(c.text, true, false), c.ids);
}

TEST_F(SmolLM2Golden, DecodeMatchesReferenceAndInvertsEncode) {
  for (const auto& c : cases_) {
    EXPECT_EQ(tok_->decode(c.ids_special), c.decoded);
    EXPECT_EQ(tok_->decode(c.ids), c.text);
    EXPECT_EQ(tok_->decode(c.ids_special), c.text);
  }
}

TEST_F(SmolLM2Golden, StreamingMatchesDecode) {
  for (const auto& c : cases_) {
    for (bool skip : {false, true}) {
      StreamingDetokenizer sd(*tok_, skip);
      std::string s;
      for (int32_t id : c.ids_special) s += sd.push(id);
      s += sd.flush();
      EXPECT_EQ(s, tok_->decode(c.ids_special, skip)) << "text: " << c.text;
    }
  }
}

}  // namespace
}  // namespace rz
