// Tests of bench/wsbench_options.hpp: rz-wsbench's flags (defaults, ranges, --flag=value, the
// derived defaults of --requests and --timeout, --api and its URLs, --api-key and RZ_API_KEY) and
// its ws:// and http:// URL parsing, including the one-line errors a user sees.
#include "bench/wsbench_options.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace rz::wsbench {
namespace {

Options parse(std::vector<std::string> args) { return parse_args(args); }

std::string error_of(std::vector<std::string> args) {
  try {
    parse_args(args);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(WsbenchOptions, Defaults) {
  const Options o = parse({});
  EXPECT_EQ(o.url.host, "127.0.0.1");
  EXPECT_EQ(o.url.port, "8080");
  EXPECT_EQ(o.url.path, "/v1/ws");
  EXPECT_EQ(o.connections, 1);
  EXPECT_FALSE(o.rate.has_value());
  ASSERT_TRUE(o.requests.has_value());
  EXPECT_EQ(*o.requests, kDefaultRequests);
  EXPECT_FALSE(o.duration_s.has_value());
  EXPECT_EQ(o.prompt_tokens, (IntRange{64, 64}));
  EXPECT_EQ(o.max_tokens, (IntRange{64, 64}));
  EXPECT_EQ(o.temperature, 0.0f);
  EXPECT_TRUE(o.ignore_eos);
  EXPECT_FALSE(o.json);
  EXPECT_EQ(o.timeout_s, kDefaultTimeoutS);
  EXPECT_EQ(o.api, Api::ws);
  EXPECT_FALSE(o.api_key.has_value());
  EXPECT_FALSE(o.model.has_value());
}

TEST(WsbenchOptions, EveryFlag) {
  const Options o = parse({"--url",
                           "ws://example.com:9000/x",
                           "--connections",
                           "8",
                           "--rate",
                           "2.5",
                           "--requests=40",
                           "--duration",
                           "30",
                           "--prompt-tokens",
                           "16:128",
                           "--max-tokens",
                           "7",
                           "--seed",
                           "18446744073709551615",
                           "--temperature",
                           "0.8",
                           "--no-ignore-eos",
                           "--chat",
                           "--json",
                           "--connect-timeout",
                           "3"});
  EXPECT_EQ(o.url.host, "example.com");
  EXPECT_EQ(o.url.port, "9000");
  EXPECT_EQ(o.url.path, "/x");
  EXPECT_EQ(o.connections, 8);
  EXPECT_EQ(*o.rate, 2.5);
  EXPECT_EQ(*o.requests, 40);
  EXPECT_EQ(*o.duration_s, 30.0);
  EXPECT_EQ(o.prompt_tokens, (IntRange{16, 128}));
  EXPECT_EQ(o.max_tokens, (IntRange{7, 7}));
  EXPECT_EQ(o.seed, 18446744073709551615ull);
  EXPECT_FLOAT_EQ(o.temperature, 0.8f);
  EXPECT_FALSE(o.ignore_eos);
  EXPECT_TRUE(o.chat);
  EXPECT_TRUE(o.json);
  EXPECT_EQ(o.connect_timeout_s, 3.0);
  EXPECT_EQ(o.timeout_s, 30.0 + kDrainS);  // duration + drain when --timeout is not given
}

TEST(WsbenchOptions, DurationAloneLeavesRequestsUnboundedAndTimeoutWins) {
  const Options o = parse({"--duration", "5"});
  EXPECT_FALSE(o.requests.has_value());
  EXPECT_EQ(o.timeout_s, 5.0 + kDrainS);
  EXPECT_EQ(parse({"--duration", "5", "--timeout", "2"}).timeout_s, 2.0);
  EXPECT_EQ(parse({"--timeout=9"}).timeout_s, 9.0);
}

TEST(WsbenchOptions, HelpStopsParsing) {
  EXPECT_TRUE(parse({"--help", "--bogus"}).help);
  EXPECT_TRUE(parse({"-h"}).help);
  EXPECT_NE(usage().find("--prompt-tokens"), std::string::npos);
  EXPECT_NE(usage().find("--api ws|openai"), std::string::npos);
  EXPECT_NE(usage().find("--api-key KEY"), std::string::npos);
}

TEST(WsbenchOptions, Errors) {
  EXPECT_EQ(error_of({"--bogus"}), "--bogus: unknown flag (see --help)");
  EXPECT_EQ(error_of({"ws://h:1"}), "ws://h:1: unexpected argument (the URL goes after --url)");
  EXPECT_EQ(error_of({"--connections"}), "--connections: missing value");
  EXPECT_EQ(error_of({"--connections", "0"}), "--connections: must be from 1 to 100000");
  EXPECT_EQ(error_of({"--connections", "2x"}), "--connections: expected an integer, got '2x'");
  EXPECT_EQ(error_of({"--rate", "0"}), "--rate: must be a number > 0");
  EXPECT_EQ(error_of({"--rate", "-1"}), "--rate: must be a number > 0");
  EXPECT_EQ(error_of({"--rate", "fast"}), "--rate: expected a finite number, got 'fast'");
  EXPECT_EQ(error_of({"--rate", "inf"}), "--rate: expected a finite number, got 'inf'");
  EXPECT_EQ(error_of({"--duration", "0"}), "--duration: must be a number of seconds > 0");
  EXPECT_EQ(error_of({"--prompt-tokens", "9:3"}), "--prompt-tokens: range 9:3 has MIN > MAX");
  EXPECT_EQ(error_of({"--prompt-tokens", "0"}), "--prompt-tokens: must be from 1 to 1048576");
  EXPECT_EQ(error_of({"--max-tokens", "4:"}), "--max-tokens: expected an integer, got ''");
  EXPECT_EQ(error_of({"--seed", "-1"}), "--seed: expected a non-negative integer, got '-1'");
  EXPECT_EQ(error_of({"--seed", "18446744073709551616"}),
            "--seed: 18446744073709551616 is beyond 64 bits");
  EXPECT_EQ(error_of({"--temperature", "-0.5"}), "--temperature: must be >= 0");
  EXPECT_EQ(error_of({"--json=1"}), "--json: takes no value");
  EXPECT_EQ(error_of({"--requests", "99999999999999999999"}),
            "--requests: expected an integer, got '99999999999999999999'");
}

TEST(WsbenchOptions, OpenAiApiAndKeys) {
  Options o = parse({"--api", "openai"});
  EXPECT_EQ(o.api, Api::openai);
  EXPECT_EQ(o.url.text, "http://127.0.0.1:8080/v1");
  EXPECT_EQ(o.url.host, "127.0.0.1");
  EXPECT_EQ(o.url.port, "8080");
  EXPECT_EQ(o.url.path, "/v1");
  // --url before or after --api; the base path as given, without a trailing '/'
  o = parse({"--url", "http://[::1]:9000/api/v1/", "--api=openai", "--model", "m", "--api-key",
             "k-1.2_3~"});
  EXPECT_EQ(o.url.host, "::1");
  EXPECT_EQ(o.url.port, "9000");
  EXPECT_EQ(o.url.path, "/api/v1");
  EXPECT_EQ(*o.model, "m");
  EXPECT_EQ(*o.api_key, "k-1.2_3~");
  EXPECT_EQ(parse({"--api", "openai", "--url", "http://h"}).url.path, "/v1");
  EXPECT_EQ(parse({"--api", "openai", "--url", "http://h/"}).url.port, "80");
  EXPECT_EQ(parse({"--api", "openai", "--url", "http://h/"}).url.path, "/v1");
  // ws takes a key too (sent on the upgrade)
  EXPECT_EQ(*parse({"--api", "ws", "--api-key", "abc"}).api_key, "abc");

  EXPECT_EQ(error_of({"--api", "grpc"}), "--api: expected ws or openai, got 'grpc'");
  EXPECT_EQ(
      error_of({"--api", "openai", "--url", "ws://h:1/v1/ws"}),
      "--url: --api openai takes the API's base URL, http://HOST:PORT/v1, not ws://h:1/v1/ws");
  EXPECT_EQ(error_of({"--url", "http://h:1/v1"}),
            "--url: http://h:1/v1 is an HTTP URL: the WebSocket needs ws://HOST:PORT/PATH (or use "
            "--api openai)");
  EXPECT_EQ(error_of({"--api", "openai", "--url", "https://h/v1"}),
            "https://h/v1: https:// (TLS) is not supported; use http://");
  EXPECT_EQ(error_of({"--api", "openai", "--url", "h:1"}),
            "h:1: expected an http://HOST:PORT/v1 URL (the API's base)");
  EXPECT_EQ(error_of({"--api", "openai", "--url", "http://h/v1?x=1"}),
            "http://h/v1?x=1: the API's base URL takes no query or fragment");
  EXPECT_EQ(error_of({"--api", "openai", "--url", "http://::1/v1"}),
            "http://::1/v1: an IPv6 host must be in brackets: http://[::1]:PORT");
  EXPECT_EQ(error_of({"--api-key", ""}), "--api-key: an API key must not be empty");
  EXPECT_EQ(error_of({"--api-key", "a b"}),
            "--api-key: an API key may hold visible ASCII characters only (no spaces or commas)");
  EXPECT_EQ(error_of({"--api-key", "a,b"}),
            "--api-key: an API key may hold visible ASCII characters only (no spaces or commas)");
  EXPECT_EQ(error_of({"--model", "m"}), "--model: only with --api openai");
  EXPECT_EQ(error_of({"--api", "openai", "--model", ""}), "--model: must not be empty");
}

TEST(WsbenchOptions, KeyFromTheEnvironmentUnlessGiven) {
  Options o = parse({});
  key_from_environment(o, nullptr);
  EXPECT_FALSE(o.api_key.has_value());
  key_from_environment(o, "");
  EXPECT_FALSE(o.api_key.has_value());
  key_from_environment(o, "from-env");
  EXPECT_EQ(*o.api_key, "from-env");
  o = parse({"--api-key", "from-flag"});
  key_from_environment(o, "from-env");
  EXPECT_EQ(*o.api_key, "from-flag");
  Options bad = parse({});
  try {
    key_from_environment(bad, "two words");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "RZ_API_KEY: an API key may hold visible ASCII characters only (no spaces or "
              "commas)");
  }
}

TEST(WsbenchOptions, Urls) {
  WsUrl u = parse_ws_url("ws://localhost:8080");
  EXPECT_EQ(u.host, "localhost");
  EXPECT_EQ(u.port, "8080");
  EXPECT_EQ(u.path, "/v1/ws");  // no path: the server's endpoint
  u = parse_ws_url("ws://10.0.0.1/");
  EXPECT_EQ(u.port, "80");
  EXPECT_EQ(u.path, "/");
  u = parse_ws_url("ws://[::1]:7000/v1/ws?x=1");
  EXPECT_EQ(u.host, "::1");
  EXPECT_EQ(u.port, "7000");
  EXPECT_EQ(u.path, "/v1/ws?x=1");
  u = parse_ws_url("ws://[fe80::1]");
  EXPECT_EQ(u.host, "fe80::1");
  EXPECT_EQ(u.port, "80");
  EXPECT_EQ(parse_ws_url("ws://h:007").port, "7");
}

TEST(WsbenchOptions, BadUrls) {
  auto err = [](const char* s) {
    try {
      parse_ws_url(s);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_EQ(err("http://h:1/v1/ws"), "http://h:1/v1/ws: expected a ws://HOST:PORT/PATH URL");
  EXPECT_EQ(err("wss://h/v1/ws"), "wss://h/v1/ws: wss:// (TLS) is not supported; use ws://");
  EXPECT_EQ(err("ws://"), "ws://: no host");
  EXPECT_EQ(err("ws://:80/"), "ws://:80/: no host");
  EXPECT_EQ(err("ws://h:/"), "ws://h:/: empty port");
  EXPECT_EQ(err("ws://h:0"), "ws://h:0: port must be a number from 1 to 65535");
  EXPECT_EQ(err("ws://h:65536"), "ws://h:65536: port must be a number from 1 to 65535");
  EXPECT_EQ(err("ws://h:8o"), "ws://h:8o: port must be a number from 1 to 65535");
  EXPECT_EQ(err("ws://::1:80"), "ws://::1:80: an IPv6 host must be in brackets: ws://[::1]:PORT");
  EXPECT_EQ(err("ws://[::1"), "ws://[::1: unterminated '[' in the host");
  EXPECT_EQ(err("ws://[::1]x"), "ws://[::1]x: expected ':PORT' after ']'");
  EXPECT_EQ(err("ws://u@h:1"), "ws://u@h:1: user info is not supported");
  EXPECT_EQ(error_of({"--url", "localhost:8080"}),
            "localhost:8080: expected a ws://HOST:PORT/PATH URL");
}

}  // namespace
}  // namespace rz::wsbench
