// rz-wsbench's command line: the flags, their defaults and checks, and the server URL. Header-only
// and free of networking (tests/net/wsbench_options_test.cpp). Every mistake a user can make
// throws rz::Error with one line naming the flag ("--rate: must be a number > 0").
#pragma once
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "formats/common.hpp"

namespace rz::wsbench {

// An inclusive range of integers; "N" is the range N:N.
struct IntRange {
  int64_t min = 0;
  int64_t max = 0;
  bool operator==(const IntRange&) const = default;
};

// The server's URL: ws://HOST[:PORT][/PATH] for the WebSocket (--api ws), or
// http://HOST[:PORT][/BASE] for the OpenAI API (--api openai). HOST may be a name, an IPv4 address
// or a bracketed IPv6 address ([::1]); PORT defaults to 80; PATH defaults to /v1/ws, the server's
// WebSocket endpoint; BASE is the API's base path as OpenAI clients take it, /v1 by default (also
// for "/"), without a trailing '/'; requests go to BASE/completions or BASE/chat/completions.
struct WsUrl {
  std::string host;  // without brackets
  std::string port;  // decimal
  std::string path;  // starts with '/' (http: the base path, "" only for none)
  std::string text;  // as given, for messages
};

namespace detail {

// The part after "SCHEME://": the authority and path of `u` (host, port, path as given).
inline void parse_authority(std::string_view s, std::string_view scheme, WsUrl& u,
                            std::string& path) {
  auto bad = [&](const std::string& why) { return Error(u.text + ": " + why); };
  std::string_view rest = s.substr(scheme.size());
  const std::size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  path = slash == std::string_view::npos ? "" : std::string(rest.substr(slash));
  if (authority.find('@') != std::string_view::npos) throw bad("user info is not supported");
  std::string_view port;
  if (!authority.empty() && authority.front() == '[') {
    const std::size_t close = authority.find(']');
    if (close == std::string_view::npos) throw bad("unterminated '[' in the host");
    u.host = std::string(authority.substr(1, close - 1));
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') throw bad("expected ':PORT' after ']'");
      port = after.substr(1);
      if (port.empty()) throw bad("empty port");
    }
  } else {
    const std::size_t colon = authority.rfind(':');
    if (colon != std::string_view::npos) {
      if (authority.find(':') != colon)
        throw bad("an IPv6 host must be in brackets: " + std::string(scheme) + "[::1]:PORT");
      port = authority.substr(colon + 1);
      if (port.empty()) throw bad("empty port");
      authority = authority.substr(0, colon);
    }
    u.host = std::string(authority);
  }
  if (u.host.empty()) throw bad("no host");
  if (port.empty()) {
    u.port = "80";
  } else {
    if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string_view::npos)
      throw bad("port must be a number from 1 to 65535");
    const long p = std::strtol(std::string(port).c_str(), nullptr, 10);
    if (p < 1 || p > 65535) throw bad("port must be a number from 1 to 65535");
    u.port = std::to_string(p);
  }
}

}  // namespace detail

inline WsUrl parse_ws_url(std::string_view s) {
  WsUrl u;
  u.text = std::string(s);
  constexpr std::string_view kScheme = "ws://";
  if (s.substr(0, 6) == "wss://")
    throw Error(u.text + ": wss:// (TLS) is not supported; use ws://");
  if (s.substr(0, kScheme.size()) != kScheme)
    throw Error(u.text + ": expected a ws://HOST:PORT/PATH URL");
  detail::parse_authority(s, kScheme, u, u.path);
  if (u.path.empty()) u.path = "/v1/ws";
  return u;
}

// http://HOST:PORT/BASE, the OpenAI API's base URL (see WsUrl).
inline WsUrl parse_http_url(std::string_view s) {
  WsUrl u;
  u.text = std::string(s);
  constexpr std::string_view kScheme = "http://";
  if (s.substr(0, 8) == "https://")
    throw Error(u.text + ": https:// (TLS) is not supported; use http://");
  if (s.substr(0, kScheme.size()) != kScheme)
    throw Error(u.text + ": expected an http://HOST:PORT/v1 URL (the API's base)");
  detail::parse_authority(s, kScheme, u, u.path);
  if (const std::size_t q = u.path.find_first_of("?#"); q != std::string::npos)
    throw Error(u.text + ": the API's base URL takes no query or fragment");
  while (!u.path.empty() && u.path.back() == '/') u.path.pop_back();
  if (u.path.empty()) u.path = "/v1";
  return u;
}

// Which protocol the benchmark speaks: rz's WebSocket (docs/protocol.md) or OpenAI's HTTP API
// with server-sent events (docs/openai.md).
enum class Api { ws, openai };

inline constexpr std::string_view kDefaultWsUrl = "ws://127.0.0.1:8080/v1/ws";
inline constexpr std::string_view kDefaultHttpUrl = "http://127.0.0.1:8080/v1";

struct Options {
  Api api = Api::ws;
  WsUrl url = parse_ws_url(kDefaultWsUrl);  // --api openai: parse_http_url, kDefaultHttpUrl
  std::optional<std::string> api_key;       // sent as Authorization: Bearer KEY
  std::optional<std::string> model;         // --api openai: the request's "model" (else none)
  int64_t connections = 1;                  // WebSocket connections (openai: keep-alive HTTP ones)
  std::optional<double> rate;               // requests/s (open loop, Poisson); absent: closed loop
  std::optional<int64_t> requests;          // total requests to issue
  std::optional<double> duration_s;         // stop issuing after this many seconds
  IntRange prompt_tokens{64, 64};           // words in a prompt (about one token each)
  IntRange max_tokens{64, 64};              // max_tokens of each request
  uint64_t seed = 0;                        // prompts, lengths and arrival times derive from it
  float temperature = 0.0f;
  bool ignore_eos = true;
  bool chat = false;       // send "messages" (chat template) instead of "prompt"
  double timeout_s = 0.0;  // hard bound on the run (after connecting)
  double connect_timeout_s = 10.0;
  bool json = false;
  bool help = false;
};

inline constexpr int64_t kDefaultRequests = 100;
inline constexpr double kDefaultTimeoutS = 600.0;
inline constexpr double kDrainS = 60.0;  // default timeout with --duration: duration + this

inline std::string usage() {
  return R"(usage: rz-wsbench [flags]
Load generator for the rz server: its WebSocket protocol (docs/protocol.md) or, with --api openai,
its OpenAI-compatible HTTP API streamed as server-sent events (docs/openai.md). Prints TTFT, ITL,
TPOT and end-to-end latency (mean, p50, p90, p99), throughput and errors by code, measured the
same way over either.

flags:
  --api ws|openai        ws (default): generate frames over WebSockets at /v1/ws; openai: POST
                         /v1/completions (/v1/chat/completions with --chat) with "stream": true
                         over keep-alive HTTP connections, one request at a time on each
  --url URL              server endpoint: ws://HOST:PORT/PATH (default ws://127.0.0.1:8080/v1/ws;
                         path defaults to /v1/ws); with --api openai the API's base URL
                         http://HOST:PORT/v1 (default http://127.0.0.1:8080/v1)
  --api-key KEY          send Authorization: Bearer KEY (the WebSocket upgrade, or every API
                         request); default: the RZ_API_KEY environment variable when set
  --model NAME           --api openai: the requests' "model" (default: none; rz serves its model
                         whatever they name)
  --connections N        connections (default 1)
  --rate R               open loop: Poisson arrivals at R requests/s, spread round-robin over the
                         connections (ws: several in flight per connection; openai: an arrival
                         that finds every connection busy opens one more); without it, closed loop:
                         each connection sends a request, waits for its end, sends the next
  --requests N           total requests (default 100 when --duration is not given either)
  --duration S           stop issuing requests after S seconds (in-flight ones finish)
  --prompt-tokens N|A:B  prompt length in words of about one token each (default 64)
  --max-tokens N|A:B     max_tokens per request (default 64); A:B draws uniformly per request
  --seed N               seed of prompts, lengths and arrival times (default 0)
  --temperature T        sampling temperature (default 0: greedy)
  --no-ignore-eos        let the end-of-sequence token end a request (ignore_eos is on by default)
  --chat                 send the prompt as one user message (chat template) instead of raw text
  --timeout S            hard bound on the run after connecting (default 600, or duration + 60);
                         requests still running then are counted as errors "timeout"
  --connect-timeout S    bound on connecting each connection (default 10)
  --json                 print one JSON object instead of the table
  --help                 show this help
)";
}

namespace detail {

inline int64_t parse_int(const std::string& flag, const std::string& v, int64_t lo, int64_t hi) {
  if (v.empty() || v.find_first_not_of("-0123456789") != std::string::npos)
    throw Error(flag + ": expected an integer, got '" + v + "'");
  errno = 0;
  char* end = nullptr;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (errno == ERANGE || *end != '\0') throw Error(flag + ": expected an integer, got '" + v + "'");
  if (x < lo || x > hi)
    throw Error(flag + ": must be from " + std::to_string(lo) + " to " + std::to_string(hi));
  return x;
}

inline uint64_t parse_u64(const std::string& flag, const std::string& v) {
  if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos)
    throw Error(flag + ": expected a non-negative integer, got '" + v + "'");
  errno = 0;
  const unsigned long long x = std::strtoull(v.c_str(), nullptr, 10);
  if (errno == ERANGE) throw Error(flag + ": " + v + " is beyond 64 bits");
  return x;
}

inline double parse_number(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  const double x = v.empty() ? NAN : std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !std::isfinite(x))
    throw Error(flag + ": expected a finite number, got '" + v + "'");
  return x;
}

inline IntRange parse_range(const std::string& flag, const std::string& v, int64_t lo, int64_t hi) {
  const std::size_t colon = v.find(':');
  IntRange r;
  if (colon == std::string::npos) {
    r.min = r.max = parse_int(flag, v, lo, hi);
  } else {
    r.min = parse_int(flag, v.substr(0, colon), lo, hi);
    r.max = parse_int(flag, v.substr(colon + 1), lo, hi);
    if (r.min > r.max) throw Error(flag + ": range " + v + " has MIN > MAX");
  }
  return r;
}

}  // namespace detail

// A key must fit in a header (and, for browsers, a subprotocol token): visible ASCII without
// spaces or commas, the rule of `rz serve --api-key` (net/auth.hpp).
inline void check_api_key(const std::string& where, std::string_view key) {
  if (key.empty()) throw Error(where + ": an API key must not be empty");
  for (char c : key)
    if (c <= ' ' || c > '~' || c == ',')
      throw Error(where +
                  ": an API key may hold visible ASCII characters only (no spaces or commas)");
}

// Parses the arguments after the program name. --help sets `help` and stops checking.
inline Options parse_args(const std::vector<std::string>& args) {
  Options o;
  std::optional<double> timeout;
  std::optional<std::string> url;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    std::string flag = a, value;
    bool has_inline = false;
    if (const std::size_t eq = a.find('='); a.rfind("--", 0) == 0 && eq != std::string::npos) {
      flag = a.substr(0, eq);
      value = a.substr(eq + 1);
      has_inline = true;
    }
    auto take = [&]() -> std::string {
      if (has_inline) return value;
      if (i + 1 >= args.size()) throw Error(flag + ": missing value");
      return args[++i];
    };
    auto no_value = [&]() {
      if (has_inline) throw Error(flag + ": takes no value");
    };
    using namespace detail;
    if (flag == "--help" || flag == "-h") {
      o.help = true;
      return o;
    } else if (flag == "--api") {
      const std::string v = take();
      if (v == "ws")
        o.api = Api::ws;
      else if (v == "openai")
        o.api = Api::openai;
      else
        throw Error(flag + ": expected ws or openai, got '" + v + "'");
    } else if (flag == "--url") {
      url = take();
    } else if (flag == "--api-key") {
      const std::string v = take();
      check_api_key(flag, v);
      o.api_key = v;
    } else if (flag == "--model") {
      const std::string v = take();
      if (v.empty()) throw Error(flag + ": must not be empty");
      o.model = v;
    } else if (flag == "--connections" || flag == "-c") {
      o.connections = parse_int(flag, take(), 1, 100000);
    } else if (flag == "--rate") {
      const double r = parse_number(flag, take());
      if (!(r > 0)) throw Error(flag + ": must be a number > 0");
      o.rate = r;
    } else if (flag == "--requests" || flag == "-n") {
      o.requests = parse_int(flag, take(), 1, int64_t{1} << 40);
    } else if (flag == "--duration") {
      const double d = parse_number(flag, take());
      if (!(d > 0)) throw Error(flag + ": must be a number of seconds > 0");
      o.duration_s = d;
    } else if (flag == "--prompt-tokens") {
      o.prompt_tokens = parse_range(flag, take(), 1, 1 << 20);
    } else if (flag == "--max-tokens") {
      o.max_tokens = parse_range(flag, take(), 1, 1 << 20);
    } else if (flag == "--seed") {
      o.seed = parse_u64(flag, take());
    } else if (flag == "--temperature") {
      const double t = parse_number(flag, take());
      if (t < 0) throw Error(flag + ": must be >= 0");
      o.temperature = static_cast<float>(t);
    } else if (flag == "--no-ignore-eos") {
      no_value();
      o.ignore_eos = false;
    } else if (flag == "--chat") {
      no_value();
      o.chat = true;
    } else if (flag == "--timeout") {
      const double t = parse_number(flag, take());
      if (!(t > 0)) throw Error(flag + ": must be a number of seconds > 0");
      timeout = t;
    } else if (flag == "--connect-timeout") {
      const double t = parse_number(flag, take());
      if (!(t > 0)) throw Error(flag + ": must be a number of seconds > 0");
      o.connect_timeout_s = t;
    } else if (flag == "--json") {
      no_value();
      o.json = true;
    } else if (a.rfind('-', 0) == 0) {
      throw Error(flag + ": unknown flag (see --help)");
    } else {
      throw Error(a + ": unexpected argument (the URL goes after --url)");
    }
  }
  if (o.api == Api::openai) {
    if (url && url->rfind("ws", 0) == 0)
      throw Error("--url: --api openai takes the API's base URL, http://HOST:PORT/v1, not " + *url);
    o.url = parse_http_url(url ? *url : std::string(kDefaultHttpUrl));
  } else {
    if (url && url->rfind("http", 0) == 0)
      throw Error("--url: " + *url +
                  " is an HTTP URL: the WebSocket needs ws://HOST:PORT/PATH (or use --api openai)");
    o.url = parse_ws_url(url ? *url : std::string(kDefaultWsUrl));
  }
  if (o.model && o.api != Api::openai) throw Error("--model: only with --api openai");
  if (!o.requests && !o.duration_s) o.requests = kDefaultRequests;
  o.timeout_s = timeout ? *timeout : o.duration_s ? *o.duration_s + kDrainS : kDefaultTimeoutS;
  return o;
}

// The key from the environment (RZ_API_KEY, as `rz serve` reads it) when --api-key was not given;
// `env_key` is getenv's answer (null: unset; empty: as if unset).
inline void key_from_environment(Options& o, const char* env_key) {
  if (o.api_key || !env_key || !*env_key) return;
  check_api_key("RZ_API_KEY", env_key);
  o.api_key = env_key;
}

}  // namespace rz::wsbench
