// Added tokens matched in ordinary text: user-defined tokens (tokenizer.json "special": false)
// are cut out of any input, control tokens only with special parsing, and lstrip/rstrip swallow
// the whitespace beside a token. Golden ids from Hugging Face `tokenizers`
// (tests/golden/added_tokens_golden.json, written by make_added_tokens_golden.py) for real
// vocabularies of ../shared/testdata/vocab with tokens added, loaded from a GGUF file written
// here and, for byte-level BPE, from a tokenizer.json; and `rz tokenize` without --special.
#include <gtest/gtest.h>
#include <simdjson.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "formats/gguf_writer.hpp"
#include "tests/tokenizer/tokenizer_test_util.hpp"

namespace rz {
namespace {

namespace fs = std::filesystem;

using test::json_str;

struct AddedSpec {
  std::string content;
  bool special, lstrip, rstrip;
};

struct Case {
  std::string text, decoded;
  std::vector<int32_t> ids, ids_special;
};

struct GoldenVocab {
  std::string name, base;
  std::vector<std::string> loaders;
  std::vector<AddedSpec> added;
  std::vector<Case> cases;
};

std::vector<int32_t> int_list(simdjson::dom::element e) {
  std::vector<int32_t> v;
  for (int64_t x : e.get_array()) v.push_back(static_cast<int32_t>(x));
  return v;
}

std::vector<GoldenVocab> read_golden() {
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.load(RZ_SOURCE_DIR "/tests/golden/added_tokens_golden.json");
  std::vector<GoldenVocab> out;
  for (simdjson::dom::element v : doc["vocabs"].get_array()) {
    GoldenVocab g;
    g.name = std::string(std::string_view(v["name"]));
    g.base = std::string(std::string_view(v["base"]));
    for (simdjson::dom::element l : v["loaders"].get_array())
      g.loaders.emplace_back(std::string_view(l));
    for (simdjson::dom::element a : v["added"].get_array())
      g.added.push_back({std::string(std::string_view(a["content"])), bool(a["special"]),
                         bool(a["lstrip"]), bool(a["rstrip"])});
    for (simdjson::dom::element c : v["cases"].get_array())
      g.cases.push_back({std::string(std::string_view(c["text"])),
                         std::string(std::string_view(c["decoded"])), int_list(c["ids"]),
                         int_list(c["ids_special"])});
    out.push_back(std::move(g));
  }
  return out;
}

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/rz_tok_added_XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
};

// The base file's tokenizer keys with `added` appended (user-defined = type 4, control = 3).
void write_gguf(const GgufFile& base, const std::vector<AddedSpec>& added,
                const std::string& path) {
  GgufWriter w;
  for (const char* key : {"general.name", "tokenizer.ggml.model", "tokenizer.ggml.pre"})
    if (auto s = base.get_string(key)) w.set_string(key, *s);
  auto tokens = base.get_string_array("tokenizer.ggml.tokens");
  std::vector<int32_t> types;
  for (int64_t t : base.get_int_array("tokenizer.ggml.token_type"))
    types.push_back(static_cast<int32_t>(t));
  auto scores = base.get_float_array("tokenizer.ggml.scores");
  for (const AddedSpec& a : added) {
    tokens.push_back(a.content);
    types.push_back(a.special ? 3 : 4);
    if (!scores.empty()) scores.push_back(0.0f);
  }
  w.set_string_array("tokenizer.ggml.tokens", tokens)
      .set_i32_array("tokenizer.ggml.token_type", types);
  if (!scores.empty()) w.set_f32_array("tokenizer.ggml.scores", scores);
  auto merges = base.get_string_array("tokenizer.ggml.merges");
  if (!merges.empty()) w.set_string_array("tokenizer.ggml.merges", merges);
  for (const char* key : {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                          "tokenizer.ggml.unknown_token_id"})
    if (auto v = base.get_int(key)) w.set_i32(key, static_cast<int32_t>(*v));
  for (const char* key : {"tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token",
                          "tokenizer.ggml.add_space_prefix"})
    if (auto v = base.get_bool(key)) w.set_bool(key, *v);
  w.write(path);
}

// A GPT-2-style tokenizer.json with the base file's vocabulary and merges; its control tokens
// and `added` (ids from the base vocabulary's size on) as added_tokens, outside model.vocab.
std::string tokenizer_json(const GgufFile& base, const std::vector<AddedSpec>& added) {
  auto tokens = base.get_string_array("tokenizer.ggml.tokens");
  auto types = base.get_int_array("tokenizer.ggml.token_type");
  auto merges = base.get_string_array("tokenizer.ggml.merges");
  auto entry = [](size_t id, const std::string& content, bool special, bool lstrip, bool rstrip) {
    auto b = [](bool x) { return x ? std::string("true") : std::string("false"); };
    return "{\"id\": " + std::to_string(id) + ", \"content\": " + json_str(content) +
           ", \"single_word\": false, \"lstrip\": " + b(lstrip) + ", \"rstrip\": " + b(rstrip) +
           ", \"normalized\": " + b(!special) + ", \"special\": " + b(special) + "}";
  };
  std::string j = "{\"version\": \"1.0\", \"added_tokens\": [";
  std::string sep;
  for (size_t i = 0; i < tokens.size(); ++i)
    if (types[i] == 3) {
      j += sep + entry(i, tokens[i], true, false, false);
      sep = ", ";
    }
  for (size_t k = 0; k < added.size(); ++k) {
    const AddedSpec& a = added[k];
    j += sep + entry(tokens.size() + k, a.content, a.special, a.lstrip, a.rstrip);
    sep = ", ";
  }
  j += "], \"normalizer\": null, \"pre_tokenizer\": {\"type\": \"ByteLevel\", "
       "\"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": true}, "
       "\"post_processor\": null, \"decoder\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": "
       "\"BPE\", \"byte_fallback\": false, \"vocab\": {";
  for (size_t i = 0; i < tokens.size(); ++i)
    j += (i ? ", " : "") + json_str(tokens[i]) + ": " + std::to_string(i);
  j += "}, \"merges\": [";
  for (size_t i = 0; i < merges.size(); ++i) j += (i ? ", " : "") + json_str(merges[i]);
  return j + "]}}";
}

std::string ids_str(const std::vector<int32_t>& v) {
  std::string s;
  for (int32_t x : v) s += (s.empty() ? "" : " ") + std::to_string(x);
  return s;
}

class AddedTokens : public ::testing::Test {
 protected:
  void SetUp() override {
    RZ_REQUIRE_TEST_DATA(test::vocab_dir());
    vocabs_ = read_golden();
    ASSERT_EQ(vocabs_.size(), 4u);
  }

  // Every golden case of `v` through tokenizer `t` (built by `loader`).
  void check(const GoldenVocab& v, const Tokenizer& t, const std::string& loader) {
    int n = 0;
    for (const Case& c : v.cases) {
      std::string where = v.name + " (" + loader + "), text: '" + c.text + "'";
      EXPECT_EQ(ids_str(t.encode(c.text, false, false)), ids_str(c.ids)) << where;
      EXPECT_EQ(ids_str(t.encode(c.text, false, true)), ids_str(c.ids_special)) << where;
      EXPECT_EQ(t.decode(c.ids), c.decoded) << where;
      ++n;
    }
    EXPECT_GE(n, 9) << v.name;
  }

  std::vector<GoldenVocab> vocabs_;
};

TEST_F(AddedTokens, GgufMatchesHuggingFace) {
  int checked = 0;
  for (const GoldenVocab& v : vocabs_) {
    if (std::find(v.loaders.begin(), v.loaders.end(), "gguf") == v.loaders.end()) continue;
    std::string base = test::vocab_dir() + "/" + v.base;
    TempDir dir;
    std::string path = base;  // no tokens to add: the shared file itself (phi-3)
    if (!v.added.empty()) {
      path = dir.path + "/vocab.gguf";
      write_gguf(*GgufFile::open(base), v.added, path);
    }
    auto t = test::load_tokenizer(path);
    for (size_t k = 0; k < v.added.size(); ++k)
      EXPECT_EQ(t->token_type(t->n_vocab() - static_cast<int>(v.added.size() - k)),
                v.added[k].special ? TokenType::Control : TokenType::UserDefined);
    check(v, *t, "gguf");
    ++checked;
  }
  EXPECT_EQ(checked, 3);
}

TEST_F(AddedTokens, TokenizerJsonMatchesHuggingFace) {
  int checked = 0;
  for (const GoldenVocab& v : vocabs_) {
    if (std::find(v.loaders.begin(), v.loaders.end(), "tokenizer.json") == v.loaders.end())
      continue;
    TempDir dir;
    std::ofstream(dir.path + "/tokenizer.json")
        << tokenizer_json(*GgufFile::open(test::vocab_dir() + "/" + v.base), v.added);
    auto t = Tokenizer::from_hf_dir(dir.path);
    check(v, *t, "tokenizer.json");
    ++checked;
  }
  EXPECT_EQ(checked, 2);
}

// The user-defined token decodes to its text and survives a round trip in byte-level BPE.
TEST_F(AddedTokens, UserDefinedTokensRoundTrip) {
  const GoldenVocab& v = vocabs_[0];
  ASSERT_EQ(v.name, "gpt2-user");
  TempDir dir;
  write_gguf(*GgufFile::open(test::vocab_dir() + "/" + v.base), v.added, dir.path + "/v.gguf");
  auto t = test::load_tokenizer(dir.path + "/v.gguf");
  for (const Case& c : v.cases) {
    EXPECT_EQ(t->decode(t->encode(c.text, false, false)), c.text);
    StreamingDetokenizer sd(*t);
    std::string s;
    for (int32_t id : c.ids) s += sd.push(id);
    EXPECT_EQ(s + sd.flush(), c.text);
  }
}

// `rz tokenize` gets the behaviour from the tokenizer: no flag needed for user-defined tokens,
// --special still needed for control tokens.
TEST_F(AddedTokens, CliMatchesUserDefinedWithoutSpecial) {
  const GoldenVocab& v = vocabs_[0];
  ASSERT_EQ(v.name, "gpt2-user");
  TempDir dir;
  std::string model = dir.path + "/v.gguf";
  write_gguf(*GgufFile::open(test::vocab_dir() + "/" + v.base), v.added, model);
  {
    std::ofstream in(dir.path + "/in");
    for (const Case& c : v.cases) in << "{\"text\": " << json_str(c.text) << "}\n";
  }
  for (bool special : {false, true}) {
    std::string cmd = std::string(RZ_BIN) + " tokenize --model " + model + " --jsonl" +
                      (special ? " --special" : "") + " < " + dir.path + "/in > " + dir.path +
                      "/out 2>&1";
    int st = std::system(cmd.c_str());
    std::string out = test::read_all(dir.path + "/out");
    ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << out;
    std::string want;
    for (const Case& c : v.cases) {
      const auto& ids = special ? c.ids_special : c.ids;
      want += "{\"ids\": [";
      for (size_t i = 0; i < ids.size(); ++i) want += (i ? ", " : "") + std::to_string(ids[i]);
      want += "]}\n";
    }
    EXPECT_EQ(out, want) << (special ? "with --special" : "without --special");
  }
}

}  // namespace
}  // namespace rz
