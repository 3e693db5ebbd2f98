// API keys and CORS on the running server (tests/net/server_fixture.hpp): 401 without a key on
// the OpenAI API, /metrics and the WebSocket (by header or subprotocol), /health and the page
// open, --metrics-public; CORS preflights and responses for allowed origins, 403 for others.
#include <gtest/gtest.h>

#include "tests/net/server_fixture.hpp"

namespace rz::net {
namespace {

const std::string kBody = R"({"prompt":"Hi","max_tokens":2,"temperature":0})";

TEST_F(ServerTest, ApiKeysGuardTheApiTheWebSocketAndMetrics) {
  ServerConfig sc;
  sc.api_keys = {"key-one", "key-two"};
  start(sc);
  const std::string good = "Authorization: Bearer key-two\r\n";
  const std::string bad = "Authorization: Bearer key-three\r\n";
  HttpResult r = http_send(port_, "/v1/completions", kBody);
  EXPECT_EQ(r.status, 401) << r.body;
  EXPECT_NE(r.body.find("\"code\":\"invalid_api_key\""), std::string::npos) << r.body;
  EXPECT_NE(r.headers.find("WWW-Authenticate: Bearer"), std::string::npos) << r.headers;
  EXPECT_EQ(r.body.find("key-one"), std::string::npos);  // no hint of the keys
  EXPECT_EQ(http_send(port_, "/v1/completions", kBody, "POST", bad).status, 401);
  r = http_send(port_, "/v1/completions", kBody, "POST", good);
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(http_send(port_, "/v1/models", "", "GET").status, 401);
  EXPECT_EQ(http_send(port_, "/v1/models", "", "GET", good).status, 200);
  EXPECT_EQ(http_send(port_, "/metrics", "", "GET").status, 401);
  EXPECT_EQ(http_send(port_, "/metrics", "", "GET", good).status, 200);
  EXPECT_EQ(http_request(port_, "/health").status, 200);
  EXPECT_EQ(http_request(port_, "/").status, 200);

  EXPECT_EQ(WsClient::try_upgrade_auth(port_, "", "").first, 401);
  EXPECT_EQ(WsClient::try_upgrade_auth(port_, "Bearer nope", "").first, 401);
  EXPECT_EQ(WsClient::try_upgrade_auth(port_, "", "rz, rz-key.nope").first, 401);
  EXPECT_EQ(WsClient::try_upgrade_auth(port_, "Bearer key-one", "").first, 101);
  // A browser: the key as a subprotocol next to "rz", which the server selects.
  const auto [status, protocol] = WsClient::try_upgrade_auth(port_, "", "rz, rz-key.key-one");
  EXPECT_EQ(status, 101);
  EXPECT_EQ(protocol, "rz");
}

TEST_F(ServerTest, MetricsPublicLeavesOnlyMetricsOpen) {
  ServerConfig sc;
  sc.api_keys = {"k"};
  sc.metrics_public = true;
  start(sc);
  EXPECT_EQ(http_send(port_, "/metrics", "", "GET").status, 200);
  EXPECT_EQ(http_send(port_, "/v1/models", "", "GET").status, 401);
}

TEST_F(ServerTest, CorsFollowsTheAllowedOrigins) {
  ServerConfig sc;
  sc.allowed_origins = {"https://app.example"};
  start(sc);
  const std::string preflight =
      "Origin: https://app.example\r\nAccess-Control-Request-Method: POST\r\n"
      "Access-Control-Request-Headers: authorization, content-type, x-stainless-os\r\n";
  HttpResult r = http_send(port_, "/v1/chat/completions", "", "OPTIONS", preflight);
  EXPECT_EQ(r.status, 204) << r.headers;
  EXPECT_NE(r.headers.find("Access-Control-Allow-Origin: https://app.example"), std::string::npos)
      << r.headers;
  EXPECT_NE(r.headers.find("Access-Control-Allow-Headers: authorization, content-type, "
                           "x-stainless-os"),
            std::string::npos)
      << r.headers;
  EXPECT_NE(r.headers.find("Access-Control-Allow-Methods: GET, POST, OPTIONS"), std::string::npos);

  r = http_send(port_, "/v1/chat/completions", "", "OPTIONS",
                "Origin: https://evil.example\r\nAccess-Control-Request-Method: POST\r\n");
  EXPECT_EQ(r.status, 403) << r.headers;
  EXPECT_EQ(r.headers.find("Access-Control-Allow-Origin"), std::string::npos) << r.headers;

  // The requests themselves: allowed origin answered with the CORS header (streamed too); a
  // foreign one refused before anything runs; no Origin (not a browser) served as before.
  r = http_send(port_, "/v1/completions", kBody, "POST", "Origin: https://app.example\r\n");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.headers.find("Access-Control-Allow-Origin: https://app.example"), std::string::npos);
  r = http_send(port_, "/v1/completions", R"({"prompt":"Hi","max_tokens":2,"stream":true})",
                "POST", "Origin: https://app.example\r\n");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.headers.find("Access-Control-Allow-Origin: https://app.example"), std::string::npos);
  r = http_send(port_, "/v1/completions", kBody, "POST", "Origin: https://evil.example\r\n");
  EXPECT_EQ(r.status, 403) << r.body;
  EXPECT_NE(r.body.find("origin_not_allowed"), std::string::npos) << r.body;
  EXPECT_EQ(http_send(port_, "/v1/completions", kBody).status, 200);
  EXPECT_EQ(metric(metrics(), "rz_requests_started_total"), 3);
}

}  // namespace
}  // namespace rz::net
