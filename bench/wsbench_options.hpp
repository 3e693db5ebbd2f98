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

// ws://HOST[:PORT][/PATH]. HOST may be a name, an IPv4 address or a bracketed IPv6 address
// ([::1]); PORT defaults to 80; PATH defaults to /v1/ws, the server's WebSocket endpoint.
struct WsUrl {
  std::string host;  // without brackets
  std::string port;  // decimal
  std::string path;  // starts with '/'
  std::string text;  // as given, for messages
};

inline WsUrl parse_ws_url(std::string_view s) {
  const std::string text(s);
  auto bad = [&](const std::string& why) { return Error(text + ": " + why); };
  constexpr std::string_view kScheme = "ws://";
  if (s.substr(0, 6) == "wss://") throw bad("wss:// (TLS) is not supported; use ws://");
  if (s.substr(0, kScheme.size()) != kScheme) throw bad("expected a ws://HOST:PORT/PATH URL");
  std::string_view rest = s.substr(kScheme.size());
  const std::size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  WsUrl u;
  u.text = text;
  u.path = slash == std::string_view::npos ? "/v1/ws" : std::string(rest.substr(slash));
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
        throw bad("an IPv6 host must be in brackets: ws://[::1]:PORT");
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
  return u;
}

struct Options {
  WsUrl url = parse_ws_url("ws://127.0.0.1:8080/v1/ws");
  int64_t connections = 1;           // WebSocket connections
  std::optional<double> rate;        // requests/s (open loop, Poisson); absent: closed loop
  std::optional<int64_t> requests;   // total requests to issue
  std::optional<double> duration_s;  // stop issuing after this many seconds
  IntRange prompt_tokens{64, 64};    // words in a prompt (about one token each)
  IntRange max_tokens{64, 64};       // max_tokens of each request
  uint64_t seed = 0;                 // prompts, lengths and arrival times derive from it
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
Load generator for the rz server's WebSocket protocol (docs/protocol.md). Prints TTFT, ITL, TPOT
and end-to-end latency (mean, p50, p90, p99), throughput and errors by code.

flags:
  --url URL              server endpoint (default ws://127.0.0.1:8080/v1/ws; path defaults to /v1/ws)
  --connections N        WebSocket connections (default 1)
  --rate R               open loop: Poisson arrivals at R requests/s, spread round-robin over the
                         connections (several in flight per connection); without it, closed loop:
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

// Parses the arguments after the program name. --help sets `help` and stops checking.
inline Options parse_args(const std::vector<std::string>& args) {
  Options o;
  std::optional<double> timeout;
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
    } else if (flag == "--url") {
      o.url = parse_ws_url(take());
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
  if (!o.requests && !o.duration_s) o.requests = kDefaultRequests;
  o.timeout_s = timeout ? *timeout : o.duration_s ? *o.duration_s + kDrainS : kDefaultTimeoutS;
  return o;
}

}  // namespace rz::wsbench
