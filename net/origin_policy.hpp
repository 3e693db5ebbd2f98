// Which web pages may open the WebSocket at /v1/ws: the check of a browser's Origin header on the
// upgrade request (net/server.cpp refuses a foreign origin with HTTP 403 before the upgrade).
// Without it any page the user opens could drive a local server from the user's browser.
// Pure functions, no Boost; unit-tested in tests/net/origin_policy_test.cpp.
//
//   no Origin header (not a browser)           allowed
//   an origin in `allowed` (or "*" there)      allowed
//   bound to loopback: http(s)://localhost, 127.0.0.1 or [::1], any port      allowed
//   not bound to loopback: the server's own origin, http(s)://<Host header>   allowed
//   anything else ("null", other sites)        refused
//
// Bound to loopback, the Host header is not trusted as "own origin": a page on another site
// whose name was made to resolve to 127.0.0.1 (DNS rebinding) sends a Host of its own name.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace rz::net {

struct OriginPolicy {
  std::vector<std::string> allowed;  // exact origins ("http://example.com:8080"); "*": all
  bool loopback_bound = false;       // the server listens on a loopback address
};

// `origin`: the Origin header ("" when absent); `host`: the Host header.
bool origin_allowed(std::string_view origin, std::string_view host, const OriginPolicy& policy);

// "localhost", "127.0.0.1" and "[::1]" (any letter case), without a port.
bool is_loopback_name(std::string_view host);

// Splits a comma-separated list ("http://a.example, https://b.example:8443") into origins,
// dropping blanks and a trailing '/'; throws rz::Error on an entry that is not "*" or
// scheme://host[:port].
std::vector<std::string> parse_origin_list(std::string_view list);

}  // namespace rz::net
