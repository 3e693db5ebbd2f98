// The shared-test-data guard (tests/test_data.hpp): present data runs the test; missing
// data skips it with the path, or fails it when CI=true.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "tests/test_data.hpp"

namespace rz::test {
namespace {

const std::string kPresent = RZ_SOURCE_DIR "/tests/golden/cpu_tiny_qwen2.gguf";
const std::string kMissing = RZ_SOURCE_DIR "/tests/golden/no-such-file.gguf";

TEST(TestData, CheckFollowsPathAndCi) {
  for (const char* ci : {static_cast<const char*>(nullptr), "", "false", "1", "true"})
    EXPECT_EQ(check_test_data(kPresent, ci), TestData::present) << (ci ? ci : "(unset)");
  EXPECT_EQ(check_test_data(kMissing, nullptr), TestData::skip);
  EXPECT_EQ(check_test_data(kMissing, ""), TestData::skip);
  EXPECT_EQ(check_test_data(kMissing, "false"), TestData::skip);
  EXPECT_EQ(check_test_data(kMissing, "true"), TestData::fail);
}

bool g_reached = false;
void needs(const std::string& path) {
  g_reached = false;
  RZ_REQUIRE_TEST_DATA(path);
  g_reached = true;
}

// Runs needs(path) with CI set to `ci` (null: unset), collecting what it reported.
std::vector<::testing::TestPartResult> run_needs(const std::string& path, const char* ci) {
  const char* old = std::getenv("CI");
  const std::string saved = old ? old : "";
  if (ci)
    setenv("CI", ci, 1);
  else
    unsetenv("CI");
  ::testing::TestPartResultArray results;
  {
    ::testing::ScopedFakeTestPartResultReporter rep(
        ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &results);
    needs(path);
  }
  if (old)
    setenv("CI", saved.c_str(), 1);
  else
    unsetenv("CI");
  std::vector<::testing::TestPartResult> out;
  for (int i = 0; i < results.size(); ++i) out.push_back(results.GetTestPartResult(i));
  return out;
}

TEST(TestData, MacroSkipsOrFailsOnMissingData) {
  auto present = run_needs(kPresent, "true");
  EXPECT_TRUE(present.empty());
  EXPECT_TRUE(g_reached);

  auto skipped = run_needs(kMissing, nullptr);
  EXPECT_FALSE(g_reached);
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_TRUE(skipped[0].skipped());
  EXPECT_NE(std::string(skipped[0].message()).find(kMissing), std::string::npos)
      << skipped[0].message();

  auto failed = run_needs(kMissing, "true");
  EXPECT_FALSE(g_reached);
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_TRUE(failed[0].fatally_failed());
  EXPECT_NE(std::string(failed[0].message()).find(kMissing), std::string::npos)
      << failed[0].message();
}

}  // namespace
}  // namespace rz::test
