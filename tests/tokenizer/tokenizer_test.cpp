// Tokenizer tests: the vocab test vectors of testdata/vocab (produced by Hugging Face
// `tokenizers`) for byte-level BPE and SentencePiece files, round trips, special tokens,
// BOS/EOS, end-of-generation ids and loader errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "formats/common.hpp"
#include "formats/gguf_writer.hpp"
#include "tests/tokenizer/tokenizer_test_util.hpp"
#include "tokenizer/tokenizer_impl.hpp"
#include "tokenizer/tokenizer_pretok.hpp"

namespace rz {
namespace {

std::string ids_str(const std::vector<int32_t>& v) {
  std::string s;
  for (int32_t x : v) s += (s.empty() ? "" : " ") + std::to_string(x);
  return s;
}

class VocabFile : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    path_ = test::vocab_dir() + "/" + GetParam();
    RZ_REQUIRE_TEST_DATA(path_);
    tok_ = test::load_tokenizer(path_);
    cases_ = test::read_vocab_cases(path_);
  }
  std::string path_;
  std::shared_ptr<Tokenizer> tok_;
  std::vector<test::VocabCase> cases_;
};

TEST_P(VocabFile, EncodesEveryCaseExactly) {
  ASSERT_GE(cases_.size(), 40u);
  int bad = 0;
  for (const auto& c : cases_) {
    auto got = tok_->encode(c.text, false, false);
    if (got != c.ids) {
      ++bad;
      ADD_FAILURE() << "text: '" << c.text << "'\n  want: " << ids_str(c.ids)
                    << "\n  got:  " << ids_str(got);
    }
  }
  EXPECT_EQ(bad, 0);
}

TEST_P(VocabFile, DecodeInvertsEncode) {
  for (const auto& c : cases_) {
    auto ids = tok_->encode(c.text, false, false);
    EXPECT_EQ(tok_->decode(ids), c.text) << "ids: " << ids_str(ids);
    // With BOS/EOS added and skipped on decode, the text is the same.
    auto ids2 = tok_->encode(c.text, true, false);
    EXPECT_EQ(tok_->decode(ids2, true), c.text);
  }
}

TEST_P(VocabFile, StreamingMatchesDecode) {
  for (const auto& c : cases_) {
    auto ids = tok_->encode(c.text, false, false);
    StreamingDetokenizer sd(*tok_);
    std::string streamed;
    for (int32_t id : ids) streamed += sd.push(id);
    streamed += sd.flush();
    EXPECT_EQ(streamed, tok_->decode(ids, true)) << "text: '" << c.text << "'";
  }
}

INSTANTIATE_TEST_SUITE_P(Vocab, VocabFile,
                         ::testing::Values("ggml-vocab-gpt-2.gguf", "ggml-vocab-starcoder.gguf",
                                           "ggml-vocab-llama-spm.gguf", "ggml-vocab-phi-3.gguf"),
                         [](const auto& info) {
                           std::string s = info.param;
                           s = s.substr(11, s.size() - 16);  // between "ggml-vocab-" and ".gguf"
                           for (char& ch : s)
                             if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return s;
                         });

std::shared_ptr<Tokenizer> vocab_or_skip(const char* name) {
  std::string p = test::vocab_dir() + "/" + name;
  if (!std::filesystem::exists(p)) return nullptr;
  return test::load_tokenizer(p);
}

TEST(Tokenizer, MetadataOfVocabFiles) {
  auto gpt2 = vocab_or_skip("ggml-vocab-gpt-2.gguf");
  auto spm = vocab_or_skip("ggml-vocab-llama-spm.gguf");
  if (!gpt2 || !spm) RZ_MISSING_TEST_DATA(test::vocab_dir());
  EXPECT_EQ(gpt2->model(), "gpt2");
  EXPECT_EQ(gpt2->pre(), "gpt-2");
  EXPECT_EQ(gpt2->n_vocab(), 50257);
  EXPECT_FALSE(gpt2->add_space_prefix());
  EXPECT_FALSE(gpt2->add_bos());
  EXPECT_EQ(spm->model(), "llama");
  EXPECT_EQ(spm->n_vocab(), 32000);
  EXPECT_TRUE(spm->add_space_prefix());
  EXPECT_TRUE(spm->add_bos());
  EXPECT_FALSE(spm->add_eos());
  EXPECT_EQ(spm->bos_id(), 1);
  EXPECT_EQ(spm->eos_id(), 2);
  EXPECT_EQ(spm->token_type(1), TokenType::Control);
  EXPECT_EQ(spm->token_type(3), TokenType::Byte);
  EXPECT_EQ(spm->find_token("<0x0A>"), 13);
  EXPECT_EQ(spm->find_token("no such token at all"), -1);
  EXPECT_EQ(gpt2->token_text(50256), "<|endoftext|>");
}

TEST(Tokenizer, AddSpecialFollowsFlags) {
  auto spm = vocab_or_skip("ggml-vocab-llama-spm.gguf");
  auto gpt2 = vocab_or_skip("ggml-vocab-gpt-2.gguf");
  if (!gpt2 || !spm) RZ_MISSING_TEST_DATA(test::vocab_dir());
  auto with = spm->encode("Hello", true, false), without = spm->encode("Hello", false, false);
  ASSERT_EQ(with.size(), without.size() + 1);
  EXPECT_EQ(with[0], 1);
  EXPECT_EQ(gpt2->encode("Hello", true, false), gpt2->encode("Hello", false, false));
  EXPECT_EQ(spm->encode("", true, false), std::vector<int32_t>{1});
  EXPECT_TRUE(spm->encode("", false, false).empty());
}

TEST(Tokenizer, SpecialTokenTextIsParsedOnlyOnRequest) {
  auto spm = vocab_or_skip("ggml-vocab-phi-3.gguf");
  auto sc = vocab_or_skip("ggml-vocab-starcoder.gguf");
  if (!spm || !sc) RZ_MISSING_TEST_DATA(test::vocab_dir());
  // starcoder: <|endoftext|> is id 0, <fim_prefix> id 1.
  auto parsed = sc->encode("a<|endoftext|>b<fim_prefix>", false, true);
  ASSERT_EQ(parsed.size(), 4u);
  EXPECT_EQ(parsed[1], 0);
  EXPECT_EQ(parsed[3], 1);
  EXPECT_EQ(parsed[0], sc->encode("a", false, false)[0]);
  auto plain = sc->encode("a<|endoftext|>b<fim_prefix>", false, false);
  EXPECT_GT(plain.size(), 6u);
  for (int32_t id : plain) EXPECT_NE(sc->token_type(id), TokenType::Control);
  EXPECT_EQ(sc->decode(plain), "a<|endoftext|>b<fim_prefix>");
  EXPECT_EQ(sc->decode(parsed), "a<|endoftext|>b<fim_prefix>");
  EXPECT_EQ(sc->decode(parsed, true), "ab");

  // phi-3 (SentencePiece): <|user|> = 32010, <|end|> = 32007; the text after a special token
  // gets the space prefix again.
  auto p = spm->encode("<|user|>Hi<|end|>", true, true);
  ASSERT_GE(p.size(), 4u);
  EXPECT_EQ(p.front(), 1);
  EXPECT_EQ(p[1], 32010);
  EXPECT_EQ(p.back(), 32007);
  auto mid = std::vector<int32_t>(p.begin() + 2, p.end() - 1);
  EXPECT_EQ(mid, spm->encode("Hi", false, false));
}

TEST(Tokenizer, LongestSpecialTokenWins) {
  tok::VocabData d;
  d.source = "synthetic";
  d.model = "gpt2";
  d.pre = "gpt-2";
  // byte stand-ins for 'a', '<', '>', 'x' and two control tokens, one the prefix of the other
  d.tokens = {"a", "<", ">", "x", "<x>", "<x>>"};
  d.types = {TokenType::Normal, TokenType::Normal,  TokenType::Normal,
             TokenType::Normal, TokenType::Control, TokenType::Control};
  d.merges = {"a a"};  // merge result missing from the vocabulary: never applied
  auto t = tok::make_bpe_tokenizer(d);
  EXPECT_EQ(t->encode("a<x>>a<x>", false, true), (std::vector<int32_t>{0, 5, 0, 4}));
  EXPECT_EQ(t->encode("<x>", false, false), (std::vector<int32_t>{1, 3, 2}));
}

TEST(Tokenizer, EndOfGeneration) {
  auto phi = vocab_or_skip("ggml-vocab-phi-3.gguf");
  if (!phi) RZ_MISSING_TEST_DATA(test::vocab_dir());
  EXPECT_TRUE(phi->is_eog(32000));   // eos <|endoftext|>
  EXPECT_TRUE(phi->is_eog(32007));   // <|end|> (control)
  EXPECT_FALSE(phi->is_eog(2));      // </s> is user-defined in this file, not control
  EXPECT_FALSE(phi->is_eog(32010));  // <|user|>
  EXPECT_FALSE(phi->is_eog(100));

  std::string smol = test::smollm2_path();
  ASSERT_TRUE(std::filesystem::exists(smol)) << smol << " missing: run scripts/setup.sh";
  auto s = test::load_tokenizer(smol);
  EXPECT_EQ(s->pre(), "smollm");
  EXPECT_EQ(s->eos_id(), 2);
  EXPECT_TRUE(s->is_eog(2));  // <|im_end|>
  EXPECT_TRUE(s->is_eog(0));  // <|endoftext|>
  EXPECT_FALSE(s->is_eog(1));
  EXPECT_FALSE(s->add_bos());
}

TEST(Tokenizer, TokenToPiece) {
  auto spm = vocab_or_skip("ggml-vocab-llama-spm.gguf");
  auto gpt2 = vocab_or_skip("ggml-vocab-gpt-2.gguf");
  if (!gpt2 || !spm) RZ_MISSING_TEST_DATA(test::vocab_dir());
  EXPECT_EQ(spm->token_to_piece(13), "\n");  // <0x0A>
  EXPECT_EQ(spm->token_to_piece(spm->find_token("\xE2\x96\x81Hello")), " Hello");
  EXPECT_EQ(spm->token_to_piece(1), "<s>");
  EXPECT_EQ(spm->token_to_piece(1, true), "");
  EXPECT_EQ(gpt2->token_to_piece(gpt2->find_token("\xC4\xA0the")), " the");  // "Ġthe"
  EXPECT_EQ(gpt2->token_to_piece(gpt2->find_token("\xC4\x8A")), "\n");       // "Ċ"
  EXPECT_THROW(gpt2->token_to_piece(-1), Error);
  EXPECT_THROW(gpt2->token_to_piece(50257), Error);
}

TEST(Tokenizer, InvalidUtf8InputStillEncodesAndRoundTrips) {
  auto spm = vocab_or_skip("ggml-vocab-llama-spm.gguf");
  auto gpt2 = vocab_or_skip("ggml-vocab-gpt-2.gguf");
  if (!gpt2 || !spm) RZ_MISSING_TEST_DATA(test::vocab_dir());
  std::string bad = "ab\xFF\xC3 c\xE2\x82";
  EXPECT_EQ(gpt2->decode(gpt2->encode(bad, false, false)), bad);
  EXPECT_EQ(spm->decode(spm->encode(bad, false, false)), bad);
}

TEST(Tokenizer, UnknownPreTokenizerNamesFileAndKnownOnes) {
  char tmpl[] = "/tmp/rz_tok_test_XXXXXX";
  int fd = mkstemp(tmpl);
  ASSERT_GE(fd, 0);
  close(fd);
  std::string path = tmpl;
  GgufWriter w;
  w.set_string("tokenizer.ggml.model", "gpt2")
      .set_string("tokenizer.ggml.pre", "no-such-pre")
      .set_string_array("tokenizer.ggml.tokens", {"a", "b", "ab"})
      .set_i32_array("tokenizer.ggml.token_type", {1, 1, 1})
      .set_string_array("tokenizer.ggml.merges", {"a b"});
  w.write(path);
  auto f = GgufFile::open(path);
  try {
    Tokenizer::from_gguf(*f);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find(path), std::string::npos) << m;
    EXPECT_NE(m.find("no-such-pre"), std::string::npos) << m;
    for (const char* k : {"gpt-2", "llama-bpe", "qwen2", "smollm", "starcoder", "deepseek-llm",
                          "deepseek-coder", "falcon", "mpt", "refact", "command-r", "olmo"})
      EXPECT_NE(m.find(k), std::string::npos) << k << " not listed in: " << m;
  }

  // Inconsistent arrays and unknown models are errors too.
  GgufWriter w2;
  w2.set_string("tokenizer.ggml.model", "gpt2")
      .set_string("tokenizer.ggml.pre", "gpt-2")
      .set_string_array("tokenizer.ggml.tokens", {"a", "b", "ab"})
      .set_i32_array("tokenizer.ggml.token_type", {1, 1})
      .set_string_array("tokenizer.ggml.merges", {"a b"});
  w2.write(path);
  EXPECT_THROW(Tokenizer::from_gguf(*GgufFile::open(path)), Error);
  GgufWriter w3;
  w3.set_string("tokenizer.ggml.model", "wordpiece")
      .set_string_array("tokenizer.ggml.tokens", {"a"});
  w3.write(path);
  EXPECT_THROW(Tokenizer::from_gguf(*GgufFile::open(path)), Error);

  // A good tiny file: "ab" merges.
  GgufWriter w4;
  w4.set_string("tokenizer.ggml.model", "gpt2")
      .set_string("tokenizer.ggml.pre", "gpt-2")
      .set_string_array("tokenizer.ggml.tokens", {"a", "b", "ab"})
      .set_i32_array("tokenizer.ggml.token_type", {1, 1, 1})
      .set_string_array("tokenizer.ggml.merges", {"a b"});
  w4.write(path);
  auto t = Tokenizer::from_gguf(*GgufFile::open(path));
  EXPECT_EQ(t->encode("abab", false, false), (std::vector<int32_t>{2, 2}));
  EXPECT_EQ(t->encode("aba", false, false), (std::vector<int32_t>{2, 0}));
  std::filesystem::remove(path);
}

TEST(Tokenizer, EveryKnownPreTokenizerCompiles) {
  for (const auto& name : tok::PreTokenizer::known_names()) {
    tok::VocabData d;
    d.source = "synthetic";
    d.model = "gpt2";
    d.pre = name;
    d.tokens = {"a"};
    d.types = {TokenType::Normal};
    d.merges = {"a a"};
    EXPECT_NO_THROW(tok::make_bpe_tokenizer(d)) << name;
  }
}

}  // namespace
}  // namespace rz
