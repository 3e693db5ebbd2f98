// TokenStream (actors/session_stream.hpp) with the default model's tokenizer: frames carry every
// token exactly once with contiguous indexes, their text concatenates to the tokenizer's own
// decode, and a stop string that spans tokens cuts the text and ends the stream.
#include "actors/session_stream.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tests/actors/engine_test_support.hpp"

using rz::engine::TokenStream;

namespace {

struct Streamed {
  std::string text;
  std::vector<int32_t> tokens;
  bool stopped = false;
  bool indexes_ok = true;
};

Streamed stream(const rz::Tokenizer& tok, const std::vector<int32_t>& ids,
                std::vector<std::string> stops) {
  TokenStream s(tok, "r", std::move(stops));
  Streamed out;
  auto take = [&](const std::optional<rz::proto::TokenFrame>& f) {
    if (!f) return;
    if (f->index != out.tokens.size() || f->tokens.empty() || f->id != "r") out.indexes_ok = false;
    out.text += f->text;
    out.tokens.insert(out.tokens.end(), f->tokens.begin(), f->tokens.end());
  };
  for (int32_t t : ids) {
    take(s.push(t));
    if (s.stopped()) break;
  }
  if (!s.stopped()) take(s.finish());
  out.stopped = s.stopped();
  if (s.sent_tokens() != out.tokens.size()) out.indexes_ok = false;
  return out;
}

class TokenStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(rz_test::default_model_path()))
      FAIL() << "missing " << rz_test::default_model_path() << ": run scripts/setup.sh";
    tok_ = rz_test::default_tokenizer();
  }
  std::shared_ptr<const rz::Tokenizer> tok_;
};

}  // namespace

TEST_F(TokenStreamTest, TextIsTheTokenizersDecode) {
  for (const std::string text :
       {"Hello world, this is a test.", "caf\xC3\xA9 \xF0\x9F\x98\x80 na\xC3\xAFve",
        "line one\n\nline two\n"}) {
    const auto ids = tok_->encode(text, false, false);
    const Streamed s = stream(*tok_, ids, {});
    EXPECT_EQ(s.text, tok_->decode(ids, true)) << text;
    EXPECT_EQ(s.text, text);
    EXPECT_EQ(s.tokens, ids);
    EXPECT_TRUE(s.indexes_ok);
    EXPECT_FALSE(s.stopped);
  }
}

TEST_F(TokenStreamTest, StopStringAcrossTokens) {
  const std::string text = "The quick brown fox jumps over the lazy dog.";
  const auto ids = tok_->encode(text, false, false);
  for (const std::string stop : {"brown fox", "ump", "k b", "dog.", "."}) {
    const size_t cut = text.find(stop);
    ASSERT_NE(cut, std::string::npos);
    // The first token prefix whose decoded text contains the stop string.
    size_t k = 1;
    while (tok_->decode(std::vector<int32_t>(ids.begin(), ids.begin() + k), true).find(stop) ==
           std::string::npos)
      ++k;
    const Streamed s = stream(*tok_, ids, {stop, "never"});
    EXPECT_TRUE(s.stopped) << stop;
    EXPECT_EQ(s.text, text.substr(0, cut)) << stop;
    EXPECT_EQ(s.tokens, std::vector<int32_t>(ids.begin(), ids.begin() + k)) << stop;
    EXPECT_TRUE(s.indexes_ok);
  }
}

TEST_F(TokenStreamTest, HeldBackTextGoesOutWithItsTokensAtTheEnd) {
  const std::string text = "Hello world\n";
  const auto ids = tok_->encode(text, false, false);
  const Streamed s = stream(*tok_, ids, {"\n\n"});
  EXPECT_FALSE(s.stopped);
  EXPECT_EQ(s.text, text);
  EXPECT_EQ(s.tokens, ids);
  EXPECT_TRUE(s.indexes_ok);
}
