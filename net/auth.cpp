// API keys (see auth.hpp).
#include "net/auth.hpp"

#include <fstream>

#include "formats/common.hpp"

namespace rz::net {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = char(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = char(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

// Calls f(token) for each comma-separated token of a header value, trimmed.
template <class F>
void for_each_token(std::string_view list, F&& f) {
  while (!list.empty()) {
    const auto comma = list.find(',');
    f(trim(list.substr(0, comma)));
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
}

}  // namespace

bool needs_key(const AuthPolicy& p, std::string_view path) {
  if (p.keys.empty()) return false;
  if (path == "/health" || path == "/" || path == "/index.html") return false;
  if (path == "/metrics") return !p.metrics_public;
  return true;
}

std::optional<std::string_view> bearer_token(std::string_view authorization) {
  authorization = trim(authorization);
  const auto space = authorization.find(' ');
  if (space == std::string_view::npos || !iequals(authorization.substr(0, space), "bearer"))
    return std::nullopt;
  return trim(authorization.substr(space + 1));
}

std::optional<std::string_view> subprotocol_key(std::string_view protocols) {
  std::optional<std::string_view> key;
  for_each_token(protocols, [&](std::string_view t) {
    if (!key && t.substr(0, kKeyProtocolPrefix.size()) == kKeyProtocolPrefix)
      key = t.substr(kKeyProtocolPrefix.size());
  });
  return key;
}

std::string selected_subprotocol(std::string_view protocols) {
  std::string chosen;
  bool rz = false;
  for_each_token(protocols, [&](std::string_view t) {
    if (t == "rz") rz = true;
    if (chosen.empty() && t.substr(0, kKeyProtocolPrefix.size()) == kKeyProtocolPrefix)
      chosen = std::string(t);
  });
  return rz ? std::string("rz") : chosen;
}

bool key_matches(std::string_view given, const std::vector<std::string>& keys) {
  unsigned found = 0;
  for (const std::string& k : keys) {
    // Over the configured key's length whatever was given: the time says nothing about the guess.
    unsigned diff = given.size() != k.size() ? 1u : 0u;
    for (std::size_t i = 0; i < k.size(); ++i) {
      const unsigned char g = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
      diff |= g ^ static_cast<unsigned char>(k[i]);
    }
    found |= diff == 0 ? 1u : 0u;
  }
  return found != 0;
}

bool authorized(const AuthPolicy& p, std::string_view path, std::string_view authorization,
                std::string_view ws_protocols) {
  if (!needs_key(p, path)) return true;
  if (auto k = bearer_token(authorization); k && key_matches(*k, p.keys)) return true;
  if (auto k = subprotocol_key(ws_protocols); k && key_matches(*k, p.keys)) return true;
  return false;
}

void check_key(std::string_view key, std::string_view where) {
  if (key.empty()) throw Error(std::string(where) + ": an API key must not be empty");
  for (char c : key)
    if (c <= ' ' || c > '~' || c == ',')
      throw Error(std::string(where) +
                  ": an API key may hold visible ASCII characters only (no spaces or commas)");
}

std::vector<std::string> read_key_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot read the API key file");
  std::vector<std::string> keys;
  std::string line;
  while (std::getline(in, line)) {
    const std::string_view t = trim(line);
    if (t.empty() || t.front() == '#') continue;
    check_key(t, path);
    keys.emplace_back(t);
  }
  if (keys.empty()) throw Error(path + ": holds no API key");
  return keys;
}

}  // namespace rz::net
