// StreamingDetokenizer: whole UTF-8 characters only, characters split over byte tokens, invalid
// bytes as U+FFFD, SentencePiece's leading space, special tokens skipped or kept.
#include <gtest/gtest.h>

#include <filesystem>

#include "tests/tokenizer/tokenizer_test_util.hpp"

namespace rz {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

std::shared_ptr<Tokenizer> vocab(const char* name) {
  std::string p = test::vocab_dir() + "/" + name;
  if (!std::filesystem::exists(p)) return nullptr;
  return test::load_tokenizer(p);
}

int32_t byte_tok(const Tokenizer& t, unsigned b) {
  char name[8];
  std::snprintf(name, sizeof name, "<0x%02X>", b);
  int32_t id = t.find_token(name);
  EXPECT_GE(id, 0) << name;
  return id;
}

TEST(StreamingDetokenizer, EmojiSplitAcrossSpmByteTokens) {
  auto t = vocab("ggml-vocab-llama-spm.gguf");
  if (!t) RZ_MISSING_TEST_DATA(test::vocab_dir());
  // 🦙 (U+1F999) has no token of its own here: it is encoded as four byte tokens.
  auto ids = t->encode("\xF0\x9F\xA6\x99", false, false);
  ASSERT_EQ(ids.size(), 5u);  // "▁" then four bytes
  StreamingDetokenizer sd(*t);
  EXPECT_EQ(sd.push(ids[0]), "");  // the space prefix is dropped
  EXPECT_EQ(sd.push(ids[1]), "");
  EXPECT_EQ(sd.push(ids[2]), "");
  EXPECT_EQ(sd.push(ids[3]), "");
  EXPECT_EQ(sd.push(ids[4]), "\xF0\x9F\xA6\x99");
  EXPECT_EQ(sd.flush(), "");
}

TEST(StreamingDetokenizer, LeadingSpaceOnlyDroppedOnce) {
  auto t = vocab("ggml-vocab-llama-spm.gguf");
  if (!t) RZ_MISSING_TEST_DATA(test::vocab_dir());
  auto ids = t->encode("Hello world", true, false);  // <s> ▁Hello ▁world
  ASSERT_EQ(ids.size(), 3u);
  StreamingDetokenizer sd(*t);
  EXPECT_EQ(sd.push(ids[0]), "");  // BOS skipped by default
  EXPECT_EQ(sd.push(ids[1]), "Hello");
  EXPECT_EQ(sd.push(ids[2]), " world");
  StreamingDetokenizer keep(*t, false);
  EXPECT_EQ(keep.push(ids[0]), "<s>");
  EXPECT_EQ(keep.push(ids[1]), "Hello");
}

TEST(StreamingDetokenizer, InvalidBytesBecomeReplacementCharacters) {
  auto t = vocab("ggml-vocab-llama-spm.gguf");
  if (!t) RZ_MISSING_TEST_DATA(test::vocab_dir());
  StreamingDetokenizer sd(*t);
  EXPECT_EQ(sd.push(byte_tok(*t, 0xFF)), kFffd);        // can never start a character
  EXPECT_EQ(sd.push(byte_tok(*t, 0xE2)), "");           // may still become a character
  EXPECT_EQ(sd.push(byte_tok(*t, 0x41)), kFffd + "A");  // ... but 'A' breaks it
  EXPECT_EQ(sd.push(byte_tok(*t, 0xC3)), "");
  EXPECT_EQ(sd.flush(), kFffd);  // incomplete at the end
  EXPECT_EQ(sd.flush(), "");
  // A lone continuation byte, an overlong form and a surrogate are invalid too.
  StreamingDetokenizer sd2(*t);
  std::string s;
  for (unsigned b : {0x80u, 0xC0u, 0xAFu, 0xEDu, 0xA0u, 0x80u}) s += sd2.push(byte_tok(*t, b));
  s += sd2.flush();
  EXPECT_EQ(s.find_first_not_of(kFffd), std::string::npos) << s;
  EXPECT_FALSE(s.empty());
}

TEST(StreamingDetokenizer, ByteLevelBpePartialCharacters) {
  auto t = vocab("ggml-vocab-gpt-2.gguf");
  if (!t) RZ_MISSING_TEST_DATA(test::vocab_dir());
  std::string text = "a \xF0\x9F\xA6\x99\xF0\x9F\xA6\x99 \xE1\x9E\x80!";  // a 🦙🦙 ក!
  auto ids = t->encode(text, false, false);
  StreamingDetokenizer sd(*t);
  std::string out;
  for (int32_t id : ids) {
    std::string part = sd.push(id);
    // every chunk is valid UTF-8 on its own
    for (size_t i = 0; i < part.size();) {
      unsigned char c = part[i];
      size_t n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
      ASSERT_TRUE(c < 0x80 || c >= 0xC2) << "chunk starts inside a character";
      ASSERT_LE(i + n, part.size()) << "chunk ends inside a character";
      i += n;
    }
    out += part;
  }
  out += sd.flush();
  EXPECT_EQ(out, text);
  EXPECT_GT(ids.size(), 6u);  // the emoji really are split over several tokens
}

}  // namespace
}  // namespace rz
