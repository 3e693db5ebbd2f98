// Who may use the server: API keys (`--api-key`) and the CORS answers of the HTTP API. Pure
// functions, no Boost; net/http_session.cpp applies them, tests/net/auth_test.cpp tests them.
//
//   /health, the page at /, CORS preflights (OPTIONS)          open
//   /metrics                                                   a key, unless --metrics-public
//   /v1/* (OpenAI API) and the WebSocket upgrade at /v1/ws     a key
//   a key: "Authorization: Bearer KEY"; on the WebSocket also the subprotocol "rz-key.KEY"
//          (browsers cannot set headers there), next to "rz", which the server selects
//   missing or wrong: 401 and nothing else (no hint which keys exist)
//
// Keys are compared in time that depends on the configured keys' lengths only, never on how much
// of a guess matched; they are never logged.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rz::net {

struct AuthPolicy {
  std::vector<std::string> keys;  // empty: no key needed anywhere
  bool metrics_public = false;    // /metrics without a key
};

// What a path needs.
bool needs_key(const AuthPolicy& p, std::string_view path);

// The key of an Authorization header ("Bearer KEY", the scheme in any letter case); nothing
// when the header is absent or of another scheme.
std::optional<std::string_view> bearer_token(std::string_view authorization);

// The key offered as a WebSocket subprotocol "rz-key.KEY" in a Sec-WebSocket-Protocol header
// (comma-separated tokens); nothing when none is.
std::optional<std::string_view> subprotocol_key(std::string_view protocols);
inline constexpr std::string_view kKeyProtocolPrefix = "rz-key.";

// The subprotocol the server answers with: "rz" when offered, else the key token itself when
// that was the only way the key came (a browser insists on one of its offers); "" for none.
std::string selected_subprotocol(std::string_view protocols);

// `given` equals one of `keys`. Runs over every key whatever matches.
bool key_matches(std::string_view given, const std::vector<std::string>& keys);

// Whether a request with these headers may go on: no key needed, or one of them carries a
// configured key.
bool authorized(const AuthPolicy& p, std::string_view path, std::string_view authorization,
                std::string_view ws_protocols = {});

// Reads keys from a file: one per line, blank lines and lines starting with '#' skipped,
// surrounding whitespace trimmed. Throws rz::Error naming the file when it cannot be read or
// holds no key, or a key has characters other than visible ASCII.
std::vector<std::string> read_key_file(const std::string& path);
// Throws rz::Error when a key is empty or has characters other than visible ASCII (a key must
// fit in a header and a subprotocol token).
void check_key(std::string_view key, std::string_view where);

}  // namespace rz::net
