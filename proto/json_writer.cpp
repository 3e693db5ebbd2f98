// JSON string escaping with UTF-8 repair, and compact number formatting (see json_writer.hpp).
#include "proto/json_writer.hpp"

#include <charconv>
#include <cmath>

namespace rz::proto {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD in UTF-8

// Length of the well-formed UTF-8 sequence starting at s[i] (1..4) or, when there is none, minus
// the length of its maximal ill-formed subpart (-1..-3): the bytes that one U+FFFD replaces.
// Ranges from the Unicode standard's table of well-formed UTF-8 byte sequences.
int utf8_sequence(std::string_view s, std::size_t i) {
  auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return 1;
  int trail = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF)
    trail = 1;
  else if (c == 0xE0) {
    trail = 2;
    lo = 0xA0;
  } else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF)
    trail = 2;
  else if (c == 0xED) {
    trail = 2;
    hi = 0x9F;
  }  // no surrogates
  else if (c == 0xF0) {
    trail = 3;
    lo = 0x90;
  }  // no overlongs
  else if (c >= 0xF1 && c <= 0xF3)
    trail = 3;
  else if (c == 0xF4) {
    trail = 3;
    hi = 0x8F;
  }  // nothing past U+10FFFF
  else
    return -1;  // 80..C1, F5..FF
  int j = 1;
  for (; j <= trail; ++j) {
    if (i + j >= s.size()) break;
    auto b = static_cast<unsigned char>(s[i + j]);
    if (b < (j == 1 ? lo : 0x80) || b > (j == 1 ? hi : 0xBF)) break;
  }
  return j == trail + 1 ? trail + 1 : -j;
}

void append_escaped(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::size_t i = 0, run = 0;  // [run, i) is copied as is
  auto flush = [&] { out.append(s.data() + run, i - run); };
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {
      ++i;
      continue;
    }
    if (c >= 0x80) {
      int n = utf8_sequence(s, i);
      if (n > 0) {
        i += n;
        continue;
      }
      flush();
      out.append(kReplacement);
      i += -n;
      run = i;
      continue;
    }
    flush();
    switch (c) {
      case '"': out.append("\\\""); break;
      case '\\': out.append("\\\\"); break;
      case '\b': out.append("\\b"); break;
      case '\f': out.append("\\f"); break;
      case '\n': out.append("\\n"); break;
      case '\r': out.append("\\r"); break;
      case '\t': out.append("\\t"); break;
      default:
        out.append("\\u00");
        out.push_back(kHex[c >> 4]);
        out.push_back(kHex[c & 15]);
    }
    run = ++i;
  }
  flush();
}

}  // namespace

void append_json_string(std::string& out, std::string_view s) {
  out.reserve(out.size() + s.size() + 2);
  out.push_back('"');
  append_escaped(out, s);
  out.push_back('"');
}

std::string json_escape(std::string_view s) {
  std::string out;
  append_escaped(out, s);
  return out;
}

void append_ms(std::string& out, double ms) {
  if (!std::isfinite(ms)) {
    out.append("null");
    return;
  }
  char buf[400];  // fixed notation of the largest double with 3 decimals fits
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, ms, std::chars_format::fixed, 3);
  if (ec != std::errc()) {
    out.append("null");
    return;
  }
  // Trim trailing zeros of the 3 decimals, keeping at least one: 12.300 -> 12.3, 250.000 -> 250.0
  while (end[-1] == '0' && end[-2] != '.') --end;
  std::string_view text(buf, end - buf);
  if (text == "-0.0") text = "0.0";  // a tiny negative value rounded to zero
  out.append(text);
}

void append_uint(std::string& out, uint64_t v) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, end);
}

void append_int(std::string& out, int64_t v) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, end);
}

void append_float(std::string& out, float v) {
  if (!std::isfinite(v)) {
    out.append("null");
    return;
  }
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);  // shortest round trip
  out.append(buf, end);
}

void append_logprob(std::string& out, float v) {
  if (std::isfinite(v))
    append_float(out, v);
  else
    out.append("-9999.0");
}

uint64_t utf8_char_count(std::string_view s) {
  uint64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

void append_byte_array(std::string& out, std::string_view s) {
  out.push_back('[');
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i) out.push_back(',');
    append_uint(out, static_cast<unsigned char>(s[i]));
  }
  out.push_back(']');
}

}  // namespace rz::proto
