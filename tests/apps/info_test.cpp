// `rz info` end to end: runs the built binary ($RZ_BIN, set by CTest; else RZ_BINARY_DIR/rz) on
// the default model, on tiny GGUF and safetensors models, and on bad files. A failure must exit 1
// with one line on stderr naming the file and the cause, and print nothing on stdout.
#include <gtest/gtest.h>

#include <algorithm>

#include <cstdlib>
#include <filesystem>

#include "tests/apps/cli_test_util.hpp"
#include "tests/formats/model_test_files.hpp"

namespace rz {
namespace {

namespace fs = std::filesystem;
using test::CommandResult;
using test::TempDir;
const std::string kModel = RZ_SOURCE_DIR "/models/SmolLM2-135M-Instruct.Q4_1.gguf";

using test::rz_bin;

CommandResult rz_info(const std::string& args) {
  return test::run_command(test::shell_quote(rz_bin()) + " info " + args);
}

class InfoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(rz_bin())) FAIL() << "missing " << rz_bin() << " (build the rz target)";
  }
};

// A failed run: exit 1, nothing on stdout, one line on stderr with the path and the cause.
void expect_failure(const std::string& path, const std::string& cause) {
  CommandResult r = rz_info("--model " + test::shell_quote(path));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err.rfind("rz info: error: " + path, 0), 0u) << r.err;  // PATH: or PATH/config.json:
  EXPECT_NE(r.err.find(cause), std::string::npos) << "expected '" << cause << "' in: " << r.err;
  ASSERT_FALSE(r.err.empty());
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "more than one line: " << r.err;
}

TEST_F(InfoTest, DefaultModel) {
  if (!fs::exists(kModel)) FAIL() << "missing " << kModel << ": run scripts/setup.sh";
  CommandResult r = rz_info("--model " + test::shell_quote(kModel));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  const std::string& o = r.out;
  // SmolLM2-135M-Instruct Q4_1 as its model card and the project brief describe it.
  for (const char* want :
       {"format gguf v3",         "architecture: llama",    "n_vocab         49152",
        "n_embd          576",    "n_layer         30",     "n_head          9",
        "n_head_kv       3",      "head_dim        64",     "n_ff            1536",
        "rope_theta      100000", "tied_embeddings true",   "qkv_bias        false",
        "rope_neox       false",  "tensors: 272 ",          "Q8_0          1 tensors",
        "model           gpt2",   "pre             smollm", "vocab size      49152",
        "add_bos         false",  "chat template: chatml",  "<|im_start|>"})
    EXPECT_NE(o.find(want), std::string::npos) << "missing '" << want << "' in:\n" << o;
  EXPECT_NE(o.find(std::to_string(fs::file_size(kModel)) + " bytes"), std::string::npos) << o;
  EXPECT_EQ(o.find("blk.0.attn_q.weight"), std::string::npos) << "listed without --tensors";

  r = rz_info("--tensors --model " + test::shell_quote(kModel));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("blk.29.ffn_down.weight"), std::string::npos);
  EXPECT_NE(r.out.find("token_embd.weight"), std::string::npos);
  EXPECT_NE(r.out.find("[1536, 576]"), std::string::npos);
  EXPECT_NE(r.out.find("[576, 49152]"), std::string::npos);
}

TEST_F(InfoTest, TinyModels) {
  TempDir d;
  test::TinyDims dm;
  test::tiny_gguf(dm, "qwen2", true, true).write(d.file("tiny.gguf"));
  CommandResult r = rz_info("--tensors --model " + test::shell_quote(d.file("tiny.gguf")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("architecture: qwen2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("qkv_bias        true"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("blk.1.attn_q.bias"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("chat template: none"), std::string::npos) << r.out;

  d.write("config.json", test::tiny_config_json(dm));
  write_safetensors(d.file("model.safetensors"), test::tiny_safetensors(dm));
  r = rz_info("--model " + test::shell_quote(d.path()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("format safetensors"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rope_neox       true"), std::string::npos) << r.out;
  const size_t f32 = r.out.find("  F32 ");
  ASSERT_NE(f32, std::string::npos) << r.out;
  const std::string count =
      " " + std::to_string(test::tiny_weights(dm, false, false).size()) + " tensors";
  EXPECT_EQ(r.out.find(count, f32), r.out.find_first_not_of(' ', f32 + 5) - 1) << count << " in:\n"
                                                                               << r.out;
}

TEST_F(InfoTest, BadFiles) {
  TempDir d;
  expect_failure(d.file("missing.gguf"), "no such file");
  expect_failure(d.write("notes.txt", "hello\n"), "not a GGUF file");
  expect_failure(d.write("empty.gguf", ""), "empty");
  test::TinyDims dm;
  GgufWriter w = test::tiny_gguf(dm);
  w.write(d.file("cut.gguf"), w.bytes().size() - 100);
  expect_failure(d.file("cut.gguf"), "truncated");
  test::tiny_gguf(dm, "falcon").write(d.file("falcon.gguf"));
  expect_failure(d.file("falcon.gguf"), "unsupported architecture 'falcon'");
  test::TinyDims wide{40, 128, 1, 2, 1, 96};  // head_dim 64: rope_freqs holds 32 factors
  GgufWriter q = test::tiny_gguf(wide);
  q.add_tensor_raw("rope_freqs.weight", 9 /* Q8_1 */, {32}, std::vector<uint8_t>(36, 0));
  q.write(d.file("q81.gguf"));
  expect_failure(d.file("q81.gguf"), "tensor 'rope_freqs.weight' has type Q8_1");
  GgufWriter v = test::tiny_gguf(dm);
  v.set_version(7);
  v.write(d.file("v7.gguf"));
  expect_failure(d.file("v7.gguf"), "unsupported GGUF version 7");
  expect_failure(d.path(), "no *.safetensors files");
}

// Each architecture is named with what it departs from the Llama block in; one it does not run
// gives one line naming it and the ones it does.
TEST_F(InfoTest, Architectures) {
  const std::string tiny = RZ_SOURCE_DIR "/tests/golden/hf_tiny/";
  struct Case {
    std::string model;
    std::vector<std::string> lines;
  };
  const Case cases[] = {
      {"qwen3.gguf", {"architecture: qwen3", "qk_norm         true"}},
      {"phi3",
       {"architecture: phi3", "fused tensors   attn_qkv [q; k; v], ffn_up [gate; up]",
        "sliding_window  24 tokens, 2 of 2 layers\n"}},
      {"gemma3.gguf",
       {"architecture: gemma3", "sliding_window  16 tokens, 6 of 7 layers (global: 5)",
        "rope_theta_swa  10000 (sliding layers)", "activation      gelu (tanh)",
        "embd_scale      8", "post_norms      true"}},
      {"gemma3_variant",
       {"architecture: gemma3", "sliding_window  12 tokens, 2 of 4 layers (global: 0 3)",
        "logit_softcap   3", "norm weights    + 1 at load", "rope_scaling    linear (factor 4"}},
  };
  for (const Case& c : cases) {
    CommandResult r = rz_info("--model " + test::shell_quote(tiny + c.model));
    ASSERT_EQ(r.exit_code, 0) << c.model << ": " << r.err;
    for (const std::string& l : c.lines)
      EXPECT_NE(r.out.find(l), std::string::npos) << c.model << ": no '" << l << "' in\n" << r.out;
  }
  TempDir d;
  test::TinyDims dm;
  test::tiny_gguf(dm, "gemma2").write(d.file("gemma2.gguf"));
  CommandResult r = rz_info("--model " + test::shell_quote(d.file("gemma2.gguf")));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("unsupported architecture 'gemma2' (rz runs llama, qwen2, mistral, qwen3, "
                       "phi3, gemma3)"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

TEST_F(InfoTest, Flags) {
  CommandResult r = rz_info("--help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("--model FILE"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--tensors"), std::string::npos) << r.out;
  r = rz_info("");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("--model"), std::string::npos) << r.err;
  r = rz_info("--bogus");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out, "");
}

}  // namespace
}  // namespace rz
