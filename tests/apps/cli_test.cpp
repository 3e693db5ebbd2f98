// Tests for the rz subcommands' flag parser (apps/cli.hpp).
#include "apps/cli.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "formats/common.hpp"
#include "tests/apps/cli_test_util.hpp"

namespace {

using rz::test::Argv;

rz::cli::Flags make() {
  rz::cli::Flags f("demo", "a demo command");
  f.opt("model", "FILE", "model file")
      .opt("max-tokens", "N", "how many", "16")
      .sw("chat", "chat mode");
  return f;
}

TEST(CliFlags, ParsesValuesSwitchesAndDefaults) {
  auto f = make();
  Argv a({"--model", "m.gguf", "--chat"});
  int code = -1;
  ASSERT_TRUE(f.parse(a.argc(), a.argv(), code));
  EXPECT_EQ(f.str("model"), "m.gguf");
  EXPECT_TRUE(f.has("chat"));
  EXPECT_FALSE(f.has("max-tokens"));
  EXPECT_EQ(f.integer("max-tokens"), 16);
}

TEST(CliFlags, AcceptsEqualsForm) {
  auto f = make();
  Argv a({"--max-tokens=7"});
  int code = -1;
  ASSERT_TRUE(f.parse(a.argc(), a.argv(), code));
  EXPECT_EQ(f.integer("max-tokens"), 7);
}

TEST(CliFlags, RejectsUnknownFlagsAndMissingValues) {
  int code = -1;
  {
    auto f = make();
    Argv a({"--nope"});
    EXPECT_FALSE(f.parse(a.argc(), a.argv(), code));
    EXPECT_EQ(code, 2);
  }
  {
    auto f = make();
    Argv a({"--model"});
    code = -1;
    EXPECT_FALSE(f.parse(a.argc(), a.argv(), code));
    EXPECT_EQ(code, 2);
  }
  {
    auto f = make();
    Argv a({"stray"});
    code = -1;
    EXPECT_FALSE(f.parse(a.argc(), a.argv(), code));
    EXPECT_EQ(code, 2);
  }
}

TEST(CliFlags, HelpListsEveryFlag) {
  auto f = make();
  std::string h = f.help();
  for (const char* name : {"--model FILE", "--max-tokens N", "--chat", "--help", "(default: 16)"})
    EXPECT_NE(h.find(name), std::string::npos) << name;
  Argv a({"--help"});
  int code = -1;
  testing::internal::CaptureStdout();
  EXPECT_FALSE(f.parse(a.argc(), a.argv(), code));
  EXPECT_EQ(testing::internal::GetCapturedStdout(), h);
  EXPECT_EQ(code, 0);
}

TEST(CliFlags, MalformedNumbersAreErrors) {
  auto f = make();
  Argv a({"--max-tokens", "12x"});
  int code = -1;
  ASSERT_TRUE(f.parse(a.argc(), a.argv(), code));
  EXPECT_THROW(f.integer("max-tokens"), rz::Error);
  EXPECT_THROW(f.number("max-tokens"), rz::Error);
}

}  // namespace
