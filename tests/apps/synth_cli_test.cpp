// `rz synth` end to end: the built binary writes a tiny synthetic model that `rz info` and
// `rz generate` then load; bad flags give one error line and exit 1.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "tests/apps/cli_test_util.hpp"
#include "tests/formats/model_test_files.hpp"
#include "tests/test_data.hpp"

namespace rz {
namespace {

namespace fs = std::filesystem;
using test::CommandResult;
using test::TempDir;

using test::rz_bin;
CommandResult rz(const std::string& args) { return test::run_rz(args); }

TEST(SynthCli, TinyModelLoadsAndGenerates) {
  ASSERT_TRUE(fs::exists(rz_bin())) << "missing " << rz_bin();
  const std::string vocab = RZ_SOURCE_DIR "/../shared/testdata/vocab/ggml-vocab-gpt-2.gguf";
  RZ_REQUIRE_TEST_DATA(vocab);
  TempDir dir;
  const std::string out = dir.path() + "/tiny.gguf";
  CommandResult s = rz("synth --shape tiny --format q4_k_m --seed 3 --vocab " +
                       test::shell_quote(vocab) + " --out " + test::shell_quote(out));
  ASSERT_EQ(s.exit_code, 0) << s.err;
  ASSERT_TRUE(fs::exists(out));

  CommandResult info = rz("info --model " + test::shell_quote(out));
  ASSERT_EQ(info.exit_code, 0) << info.err;
  for (const char* want : {"architecture: llama", "n_layer         2", "n_embd          256",
                           "Q4_K", "Q6_K", "model           gpt2"})
    EXPECT_NE(info.out.find(want), std::string::npos) << "missing '" << want << "' in:\n"
                                                      << info.out;

  CommandResult gen = rz("generate --model " + test::shell_quote(out) +
                         " --prompt 'Hello world' --temperature 0 --max-tokens 4 --ignore-eos");
  EXPECT_EQ(gen.exit_code, 0) << gen.err;
  EXPECT_NE(gen.err.find("4 generated"), std::string::npos) << gen.err;
}

TEST(SynthCli, BadInputIsOneErrorLine) {
  ASSERT_TRUE(fs::exists(rz_bin())) << "missing " << rz_bin();
  for (const char* args : {"synth --shape nope --format f16 --out /tmp/x.gguf",
                           "synth --shape tiny --format q9 --out /tmp/x.gguf",
                           "synth --shape tiny --format f16 --out /nonexistent-dir/x.gguf"}) {
    CommandResult r = rz(args);
    EXPECT_EQ(r.exit_code, 1) << args << ": " << r.err;
    EXPECT_EQ(r.out, "") << args;
    ASSERT_FALSE(r.err.empty()) << args;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << args << ": more than one line: " << r.err;
  }
}

}  // namespace
}  // namespace rz
