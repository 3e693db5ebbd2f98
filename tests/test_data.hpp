// Tests that need the shared test data (../shared/testdata: the vocab files with llama.cpp's
// tokenizer test vectors, the GPT-2 vocabulary for rz synth). Where it is missing they skip,
// naming the path, except under CI (environment variable CI = "true", which CI systems set):
// there missing data fails the test, so that coverage cannot vanish silently.
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace rz::test {

enum class TestData { present, skip, fail };

// `ci`: the value of the CI environment variable (null when unset).
inline bool missing_data_fails(const char* ci) {
  return ci != nullptr && std::string(ci) == "true";
}
inline TestData check_test_data(const std::string& path, const char* ci) {
  if (std::filesystem::exists(path)) return TestData::present;
  return missing_data_fails(ci) ? TestData::fail : TestData::skip;
}
inline TestData check_test_data(const std::string& path) {
  return check_test_data(path, std::getenv("CI"));
}

}  // namespace rz::test

// In a test body (or SetUp): data known to be missing at `path`. Fails under CI=true, else skips.
#define RZ_MISSING_TEST_DATA(path)                                                     \
  do {                                                                                 \
    const std::string rz_td_path_ = (path);                                            \
    if (::rz::test::missing_data_fails(std::getenv("CI")))                             \
      FAIL() << "test data missing (CI=true: a failure, not a skip): " << rz_td_path_; \
    GTEST_SKIP() << "test data missing: " << rz_td_path_;                              \
  } while (0)

// In a test body (or SetUp): returns from it unless `path` exists (see RZ_MISSING_TEST_DATA).
#define RZ_REQUIRE_TEST_DATA(path)                                                \
  do {                                                                            \
    const std::string rz_td_req_ = (path);                                        \
    if (::rz::test::check_test_data(rz_td_req_) != ::rz::test::TestData::present) \
      RZ_MISSING_TEST_DATA(rz_td_req_);                                           \
  } while (0)
