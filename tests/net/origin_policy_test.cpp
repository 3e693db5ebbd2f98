// The Origin check of the WebSocket upgrade (net/origin_policy.hpp), as pure functions: the
// defaults bound to loopback and to another address, the allowed list, "*", and the parsing of
// --allowed-origins.
#include "net/origin_policy.hpp"

#include <gtest/gtest.h>

#include "formats/common.hpp"

namespace rz::net {
namespace {

TEST(OriginPolicy, NoOriginHeaderAlwaysPasses) {
  EXPECT_TRUE(origin_allowed("", "127.0.0.1:8080", {.allowed = {}, .loopback_bound = true}));
  EXPECT_TRUE(origin_allowed("", "example.com", {.allowed = {}, .loopback_bound = false}));
}

TEST(OriginPolicy, BoundToLoopbackOnlyLoopbackOriginsPass) {
  const OriginPolicy p{.allowed = {}, .loopback_bound = true};
  for (const char* ok : {"http://localhost:3000", "http://127.0.0.1:8080", "https://[::1]:1",
                         "http://LOCALHOST", "http://127.0.0.1"})
    EXPECT_TRUE(origin_allowed(ok, "127.0.0.1:8080", p)) << ok;
  for (const char* bad :
       {"http://evil.example", "null", "http://127.0.0.2:8080", "file://", "chrome-extension://abc",
        "ws://localhost:1", "http://localhost.evil.example", "http://localhost:80/path", "garbage"})
    EXPECT_FALSE(origin_allowed(bad, "127.0.0.1:8080", p)) << bad;
  // DNS rebinding: another site's name resolved to 127.0.0.1 sends its own name as Host.
  EXPECT_FALSE(origin_allowed("http://rebind.example:8080", "rebind.example:8080", p));
}

TEST(OriginPolicy, NotOnLoopbackTheServersOwnOriginPasses) {
  const OriginPolicy p{.allowed = {}, .loopback_bound = false};
  EXPECT_TRUE(origin_allowed("http://chat.example:8080", "chat.example:8080", p));
  EXPECT_TRUE(origin_allowed("https://Chat.Example", "chat.example", p));
  EXPECT_FALSE(origin_allowed("http://chat.example:8081", "chat.example:8080", p));
  EXPECT_FALSE(origin_allowed("http://evil.example", "chat.example", p));
  EXPECT_FALSE(origin_allowed("http://localhost:3000", "chat.example", p));
  EXPECT_FALSE(origin_allowed("http://chat.example", "", p));
}

TEST(OriginPolicy, AllowedListAndStar) {
  OriginPolicy p{.allowed = {"http://app.example:8000"}, .loopback_bound = true};
  EXPECT_TRUE(origin_allowed("http://app.example:8000", "127.0.0.1:8080", p));
  EXPECT_TRUE(origin_allowed("HTTP://APP.EXAMPLE:8000", "127.0.0.1:8080", p));
  EXPECT_FALSE(origin_allowed("http://app.example", "127.0.0.1:8080", p));
  EXPECT_TRUE(origin_allowed("http://localhost:1", "127.0.0.1:8080", p));  // still allowed
  p.allowed = {"*"};
  EXPECT_TRUE(origin_allowed("http://evil.example", "127.0.0.1:8080", p));
  EXPECT_TRUE(origin_allowed("null", "127.0.0.1:8080", p));
}

TEST(OriginPolicy, ParseOriginList) {
  EXPECT_EQ(parse_origin_list("http://A.example:8000/, https://b.example ,,"),
            (std::vector<std::string>{"http://a.example:8000", "https://b.example"}));
  EXPECT_EQ(parse_origin_list("*"), (std::vector<std::string>{"*"}));
  EXPECT_TRUE(parse_origin_list("").empty());
  for (const char* bad : {"example.com", "http://", "http://a.example/path", "http://a:b"})
    EXPECT_THROW(parse_origin_list(bad), Error) << bad;
}

TEST(OriginPolicy, LoopbackNames) {
  EXPECT_TRUE(is_loopback_name("localhost"));
  EXPECT_TRUE(is_loopback_name("[::1]"));
  EXPECT_FALSE(is_loopback_name("::1"));
  EXPECT_FALSE(is_loopback_name("localhost.localdomain"));
}

}  // namespace
}  // namespace rz::net
