// The Origin check of the WebSocket upgrade (see origin_policy.hpp).
#include "net/origin_policy.hpp"

#include <algorithm>
#include <cctype>

#include "formats/common.hpp"

namespace rz::net {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

struct Parsed {
  std::string scheme, host, port;  // lower-case; port "" when absent
};

// scheme://host[:port] with host a name, an IPv4 address or a bracketed IPv6 address; no path.
bool parse_origin(std::string_view o, Parsed& p) {
  const auto sep = o.find("://");
  if (sep == std::string_view::npos || sep == 0) return false;
  p.scheme = lower(o.substr(0, sep));
  std::string_view rest = o.substr(sep + 3);
  if (rest.empty()) return false;
  std::string_view host = rest, port;
  if (rest.front() == '[') {
    const auto close = rest.find(']');
    if (close == std::string_view::npos) return false;
    host = rest.substr(0, close + 1);
    std::string_view after = rest.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return false;
      port = after.substr(1);
    }
  } else if (const auto colon = rest.rfind(':'); colon != std::string_view::npos) {
    host = rest.substr(0, colon);
    port = rest.substr(colon + 1);
  }
  if (host.empty() || host.find_first_of("/?#@ ") != std::string_view::npos) return false;
  if (rest.find_first_of("/?#") != std::string_view::npos) return false;
  if (!std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return false;
  if (rest.back() == ':') return false;  // "host:" with an empty port
  p.host = lower(host);
  p.port = std::string(port);
  return true;
}

}  // namespace

bool is_loopback_name(std::string_view host) {
  const std::string h = lower(host);
  return h == "localhost" || h == "127.0.0.1" || h == "[::1]";
}

bool origin_allowed(std::string_view origin, std::string_view host, const OriginPolicy& policy) {
  origin = trim(origin);
  if (origin.empty()) return true;  // not sent by a browser
  const std::string o = lower(origin);
  for (const std::string& a : policy.allowed)
    if (a == "*" || lower(a) == o) return true;
  Parsed p;
  if (!parse_origin(o, p)) return false;  // "null" (sandboxed frames, files) and garbage
  if (p.scheme != "http" && p.scheme != "https") return false;
  if (policy.loopback_bound) return is_loopback_name(p.host);
  const std::string own = lower(trim(host));
  if (own.empty()) return false;
  return (p.port.empty() ? p.host : p.host + ":" + p.port) == own;
}

std::vector<std::string> parse_origin_list(std::string_view list) {
  std::vector<std::string> out;
  while (!list.empty()) {
    const auto comma = list.find(',');
    std::string_view item = trim(list.substr(0, comma));
    list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
    while (!item.empty() && item.back() == '/') item.remove_suffix(1);
    if (item.empty()) continue;
    Parsed p;
    if (item != "*" && !parse_origin(item, p))
      throw Error("--allowed-origins: '" + std::string(item) +
                  "' is not an origin (scheme://host[:port], or * for all)");
    out.emplace_back(item == "*" ? std::string("*") : lower(item));
  }
  return out;
}

}  // namespace rz::net
