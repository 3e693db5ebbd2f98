// Tests of net/auth.cpp: which paths need a key, where a key may come from (Bearer header,
// WebSocket subprotocol), the comparison, the subprotocol the server selects, and key files.
#include "net/auth.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "formats/common.hpp"

namespace rz::net {
namespace {

TEST(Auth, WhichPathsNeedAKey) {
  AuthPolicy none;
  EXPECT_FALSE(needs_key(none, "/v1/chat/completions"));
  AuthPolicy p{{"k1"}, false};
  for (const char* open : {"/health", "/", "/index.html"}) EXPECT_FALSE(needs_key(p, open)) << open;
  for (const char* locked : {"/v1/chat/completions", "/v1/completions", "/v1/models", "/v1/ws",
                             "/metrics", "/anything"})
    EXPECT_TRUE(needs_key(p, locked)) << locked;
  p.metrics_public = true;
  EXPECT_FALSE(needs_key(p, "/metrics"));
}

TEST(Auth, BearerAndSubprotocolKeys) {
  EXPECT_EQ(bearer_token("Bearer abc"), "abc");
  EXPECT_EQ(bearer_token("bearer  abc "), "abc");
  EXPECT_EQ(bearer_token("Basic abc"), std::nullopt);
  EXPECT_EQ(bearer_token(""), std::nullopt);
  EXPECT_EQ(subprotocol_key("rz, rz-key.s3cret"), "s3cret");
  EXPECT_EQ(subprotocol_key("rz"), std::nullopt);
  EXPECT_EQ(selected_subprotocol("rz-key.s3cret, rz"), "rz");  // never echo the key when rz is offered
  EXPECT_EQ(selected_subprotocol("rz-key.s3cret"), "rz-key.s3cret");
  EXPECT_EQ(selected_subprotocol(""), "");
  EXPECT_EQ(selected_subprotocol("chat"), "");
}

TEST(Auth, KeysMatchExactlyAndAnyOfThem) {
  const std::vector<std::string> keys = {"alpha-1", "beta-22"};
  EXPECT_TRUE(key_matches("alpha-1", keys));
  EXPECT_TRUE(key_matches("beta-22", keys));
  for (const char* wrong : {"", "alpha-", "alpha-12", "Alpha-1", "beta-2", "beta-222", "x"})
    EXPECT_FALSE(key_matches(wrong, keys)) << wrong;
  EXPECT_FALSE(key_matches("alpha-1", {}));
  AuthPolicy p{keys, false};
  EXPECT_TRUE(authorized(p, "/v1/models", "Bearer beta-22"));
  EXPECT_FALSE(authorized(p, "/v1/models", "Bearer beta-2"));
  EXPECT_FALSE(authorized(p, "/v1/models", ""));
  EXPECT_TRUE(authorized(p, "/v1/ws", "", "rz, rz-key.alpha-1"));
  EXPECT_FALSE(authorized(p, "/v1/ws", "", "rz, rz-key.alpha-2"));
  EXPECT_TRUE(authorized(p, "/health", ""));
}

TEST(Auth, KeyFilesAndKeyCharacters) {
  const auto path = std::filesystem::temp_directory_path() / "rz_auth_test_keys";
  {
    std::ofstream(path) << "# keys\n\n  first-key  \nsecond\r\n";
  }
  EXPECT_EQ(read_key_file(path.string()), (std::vector<std::string>{"first-key", "second"}));
  {
    std::ofstream(path) << "# nothing\n";
  }
  EXPECT_THROW(read_key_file(path.string()), Error);
  {
    std::ofstream(path) << "has space\n";
  }
  EXPECT_THROW(read_key_file(path.string()), Error);
  std::filesystem::remove(path);
  EXPECT_THROW(read_key_file(path.string()), Error);
  EXPECT_THROW(check_key("", "--api-key"), Error);
  EXPECT_THROW(check_key("a,b", "--api-key"), Error);
  EXPECT_NO_THROW(check_key("sk-ABC_123.xyz", "--api-key"));
}

}  // namespace
}  // namespace rz::net
