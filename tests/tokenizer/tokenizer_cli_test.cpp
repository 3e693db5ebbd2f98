// `rz tokenize` end to end: the JSON-lines interface external checks use (ids equal the Hugging
// Face golden ids, one output line per input in order, --special and --add-special) and its
// error on a malformed line.
#include <gtest/gtest.h>
#include <simdjson.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tests/tokenizer/tokenizer_test_util.hpp"

namespace rz {
namespace {

namespace fs = std::filesystem;

using test::json_str;

struct CliRun {
  int code;
  std::string out, err;
};

CliRun run_rz(const std::string& args, const std::string& stdin_text) {
  char tmpl[] = "/tmp/rz_tok_cli_XXXXXX";
  std::string dir = mkdtemp(tmpl);
  std::ofstream(dir + "/in") << stdin_text;
  std::string cmd =
      std::string(RZ_BIN) + " " + args + " < " + dir + "/in > " + dir + "/out 2> " + dir + "/err";
  int st = std::system(cmd.c_str());
  CliRun r{WIFEXITED(st) ? WEXITSTATUS(st) : -1, test::read_all(dir + "/out"),
           test::read_all(dir + "/err")};
  fs::remove_all(dir);
  return r;
}

class TokenizeCli : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(RZ_BIN)) << RZ_BIN << " not built (cmake --build ... --target rz)";
    model_ = test::smollm2_path();
    ASSERT_TRUE(fs::exists(model_)) << model_ << " missing: run scripts/setup.sh";
  }
  std::string model_;
};

std::vector<std::vector<int64_t>> parse_ids(const std::string& out) {
  std::vector<std::vector<int64_t>> res;
  simdjson::dom::parser p;
  size_t start = 0;
  for (size_t nl; (nl = out.find('\n', start)) != std::string::npos; start = nl + 1) {
    std::string line = out.substr(start, nl - start);
    std::vector<int64_t> ids;
    for (int64_t x : p.parse(line)["ids"].get_array()) ids.push_back(x);
    res.push_back(ids);
  }
  EXPECT_EQ(start, out.size()) << "output does not end with a newline";
  return res;
}

TEST_F(TokenizeCli, JsonlMatchesGoldenIds) {
  simdjson::dom::parser parser;
  simdjson::dom::element golden =
      parser.load(RZ_SOURCE_DIR "/tests/golden/smollm2_tokenizer_golden.json");
  std::string in;
  std::vector<std::vector<int64_t>> want, want_special;
  for (simdjson::dom::element c : golden["cases"].get_array()) {
    in += "{\"text\": " + json_str(std::string_view(c["text"])) + "}\n";
    want.emplace_back();
    for (int64_t x : c["ids"].get_array()) want.back().push_back(x);
    want_special.emplace_back();
    for (int64_t x : c["ids_special"].get_array()) want_special.back().push_back(x);
  }
  CliRun plain = run_rz("tokenize --model " + model_ + " --jsonl", in);
  ASSERT_EQ(plain.code, 0) << plain.err;
  EXPECT_EQ(parse_ids(plain.out), want);
  CliRun special = run_rz("tokenize --model " + model_ + " --jsonl --special", in);
  ASSERT_EQ(special.code, 0) << special.err;
  EXPECT_EQ(parse_ids(special.out), want_special);
  // SmolLM2's metadata adds no BOS/EOS, so --add-special changes nothing here.
  CliRun add = run_rz("tokenize --model " + model_ + " --jsonl --add-special --special", in);
  EXPECT_EQ(parse_ids(add.out), want_special);
}

TEST_F(TokenizeCli, AddSpecialAddsBosForSentencePiece) {
  std::string spm = test::vocab_dir() + "/ggml-vocab-llama-spm.gguf";
  RZ_REQUIRE_TEST_DATA(spm);
  CliRun r =
      run_rz("tokenize --model " + spm + " --jsonl --add-special", "{\"text\": \"Hello\"}\n");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("{\"ids\": [1, ", 0), 0u) << r.out;
  CliRun r2 = run_rz("tokenize --model " + spm + " --jsonl", "{\"text\": \"Hello\"}\n");
  EXPECT_EQ(r2.out.find("[1, "), std::string::npos) << r2.out;
}

TEST_F(TokenizeCli, MalformedLineNamesItsNumber) {
  CliRun r = run_rz("tokenize --model " + model_ + " --jsonl",
                    "{\"text\": \"ok\"}\n{\"text\": 3}\n{\"text\": \"never reached\"}\n");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("line 2"), std::string::npos) << r.err;
  EXPECT_EQ(parse_ids(r.out).size(), 1u);  // the first line was answered before the error
  CliRun bad = run_rz("tokenize --model " + model_ + " --jsonl", "not json\n");
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("line 1"), std::string::npos) << bad.err;
}

TEST_F(TokenizeCli, TextAndPieces) {
  CliRun r = run_rz("tokenize --model " + model_ + " --text 'Hello world'", "");
  ASSERT_EQ(r.code, 0) << r.err;
  auto t = test::load_tokenizer(model_);
  auto ids = t->encode("Hello world", false, false);
  std::string want;
  for (int32_t id : ids) want += (want.empty() ? "" : " ") + std::to_string(id);
  EXPECT_EQ(r.out, want + "\n");
  CliRun p = run_rz("tokenize --model " + model_ + " --text 'Hello world' --pieces", "");
  EXPECT_NE(p.out.find("\" world\""), std::string::npos) << p.out;
  CliRun missing = run_rz("tokenize --model /nonexistent.gguf --text x", "");
  EXPECT_EQ(missing.code, 1);
  EXPECT_NE(missing.err.find("/nonexistent.gguf"), std::string::npos) << missing.err;
}

}  // namespace
}  // namespace rz
