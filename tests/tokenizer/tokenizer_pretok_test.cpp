// Pre-tokenizers: PCRE2 must cut text exactly as Hugging Face `tokenizers` does with the same
// regex sequences (tests/golden/pretok_golden.json, from make_pretok_golden.py), and a few
// hand-checked splits.
#include <gtest/gtest.h>
#include <simdjson.h>

#include "formats/common.hpp"
#include "tokenizer/tokenizer_pretok.hpp"

namespace rz::tok {
namespace {

std::vector<std::string> split(const PreTokenizer& p, std::string_view text) {
  std::vector<std::string_view> w;
  p.split(text, w);
  return {w.begin(), w.end()};
}

std::string show(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += "[" + x + "]";
  return s;
}

TEST(PreTokenizer, MatchesHuggingFaceSplits) {
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.load(RZ_SOURCE_DIR "/tests/golden/pretok_golden.json");
  std::vector<std::string> texts;
  for (simdjson::dom::element t : doc["texts"].get_array()) texts.emplace_back(std::string_view(t));
  ASSERT_GE(texts.size(), 40u);
  int names = 0;
  for (auto [name, per_text] : doc["splits"].get_object()) {
    ++names;
    PreTokenizer p(std::string(name), "test");
    size_t i = 0;
    for (simdjson::dom::element pieces : per_text.get_array()) {
      std::vector<std::string> want;
      for (simdjson::dom::element s : pieces.get_array()) want.emplace_back(std::string_view(s));
      ASSERT_LT(i, texts.size());
      EXPECT_EQ(show(split(p, texts[i])), show(want)) << name << " on: " << texts[i];
      ++i;
    }
  }
  EXPECT_EQ(names, 7);
}

TEST(PreTokenizer, HandCheckedSplits) {
  PreTokenizer gpt2("gpt-2", "test");
  EXPECT_EQ(split(gpt2, "Hello world"), (std::vector<std::string>{"Hello", " world"}));
  // a run of spaces leaves its last space to the word after it
  EXPECT_EQ(split(gpt2, "a   b"), (std::vector<std::string>{"a", "  ", " b"}));
  EXPECT_EQ(split(gpt2, "I'll go"), (std::vector<std::string>{"I", "'ll", " go"}));
  EXPECT_EQ(split(gpt2, "x  "), (std::vector<std::string>{"x", "  "}));
  PreTokenizer smol("smollm", "test");
  EXPECT_EQ(split(smol, "ab 123"), (std::vector<std::string>{"ab", " ", "1", "2", "3"}));
  PreTokenizer llama3("llama-bpe", "test");
  EXPECT_EQ(split(llama3, "12345 I'LL"), (std::vector<std::string>{"123", "45", " I", "'LL"}));
  EXPECT_TRUE(split(gpt2, "").empty());
  // Invalid UTF-8 never stops the split: the bytes end up in some piece.
  std::string bad = "ab\xFF\xFE cd";
  std::string joined;
  for (const auto& s : split(gpt2, bad)) joined += s;
  EXPECT_EQ(joined, bad);
}

TEST(PreTokenizer, UnknownNameAndBadRegex) {
  try {
    PreTokenizer p("nope", "model.gguf");
    ADD_FAILURE();
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_EQ(m.rfind("model.gguf: unknown pre-tokenizer 'nope' (known: ", 0), 0u) << m;
  }
  EXPECT_THROW(PreTokenizer(std::vector<std::string>{"(unclosed"}, "x"), Error);
}

}  // namespace
}  // namespace rz::tok
