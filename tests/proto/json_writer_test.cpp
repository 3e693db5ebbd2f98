// Tests of proto/json_writer.cpp: string escaping (checked against the JSON grammar by hand and by
// reading the output back with simdjson), UTF-8 repair (against the Unicode standard's worked
// example and against CPython's decoder on random bytes), and number formatting.
#include "proto/json_writer.hpp"

#include <gtest/gtest.h>
#include <simdjson.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

namespace rz::proto {
namespace {

using namespace std::string_literals;

const std::string kFffd = "\xEF\xBF\xBD";

// The string a JSON reader (simdjson) gets back from the literal we write; fails on invalid JSON.
std::string read_back(std::string_view s) {
  std::string lit;
  append_json_string(lit, s);
  simdjson::dom::parser parser;
  simdjson::padded_string padded(lit);
  std::string_view out;
  auto err = parser.parse(padded).get_string().get(out);
  EXPECT_EQ(err, simdjson::SUCCESS) << simdjson::error_message(err) << " for " << lit;
  return std::string(out);
}

TEST(ProtoJsonWriter, EscapesQuotesBackslashAndControls) {
  EXPECT_EQ(json_escape("plain text / slash"), "plain text / slash");
  EXPECT_EQ(json_escape("say \"hi\""), "say \\\"hi\\\"");
  EXPECT_EQ(json_escape("a\\b"), "a\\\\b");
  EXPECT_EQ(json_escape("\n\r\t\b\f"), "\\n\\r\\t\\b\\f");
  EXPECT_EQ(json_escape("\0"s), "\\u0000");
  EXPECT_EQ(json_escape("\x01\x1f\x0b"), "\\u0001\\u001f\\u000b");
  EXPECT_EQ(json_escape("\x7f"), "\x7f");  // DEL is allowed raw in JSON
  std::string lit;
  append_json_string(lit, "x\"y");
  EXPECT_EQ(lit, "\"x\\\"y\"");
}

TEST(ProtoJsonWriter, EveryByteBelow0x80ReadsBack) {
  for (int c = 0; c < 0x80; ++c) {
    std::string s = "<";
    s += char(c);
    s += ">";
    EXPECT_EQ(read_back(s), s) << "byte " << c;
  }
}

TEST(ProtoJsonWriter, ValidUtf8PassesThroughUnchanged) {
  for (std::string s :
       {"caf\xC3\xA9"s, "\xE4\xBD\xA0\xE5\xA5\xBD"s, "\xF0\x9F\x98\x80\xF0\x9F\x91\x8D"s,
        "\xC2\x80"s,          // U+0080
        "\xDF\xBF"s,          // U+07FF
        "\xE0\xA0\x80"s,      // U+0800
        "\xED\x9F\xBF"s,      // U+D7FF
        "\xEE\x80\x80"s,      // U+E000
        "\xEF\xBF\xBF"s,      // U+FFFF
        "\xF0\x90\x80\x80"s,  // U+10000
        "\xF4\x8F\xBF\xBF"s,  // U+10FFFF
        "\xE2\x80\xA8"s}) {   // U+2028 (valid raw in JSON)
    EXPECT_EQ(json_escape(s), s);
    EXPECT_EQ(read_back(s), s);
  }
}

TEST(ProtoJsonWriter, InvalidUtf8BecomesReplacementCharacters) {
  // The Unicode standard's example of "substitution of maximal subparts" (chapter 3, U+FFFD
  // substitution): 61 F1 80 80 E1 80 C2 62 80 63 80 BF 64 -> a FFFD FFFD FFFD b FFFD c FFFD FFFD d.
  EXPECT_EQ(json_escape("\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64"),
            "a" + kFffd + kFffd + kFffd + "b" + kFffd + "c" + kFffd + kFffd + "d");
  struct Case {
    std::string in;
    int fffd;
  };
  for (const Case& c : std::vector<Case>{
           {"\x80", 1},              // lone continuation byte
           {"\xC0\x80", 2},          // overlong NUL: C0 is never a lead byte
           {"\xC1\xBF", 2},          // overlong
           {"\xE0\x80\x80", 3},      // overlong: E0 needs A0..BF next
           {"\xED\xA0\x80", 3},      // UTF-16 surrogate D800
           {"\xF0\x80\x80\x80", 4},  // overlong: F0 needs 90..BF next
           {"\xF4\x90\x80\x80", 4},  // past U+10FFFF
           {"\xF5\x80\x80\x80", 4},  // F5 is never a lead byte
           {"\xFF", 1},
           {"\xFE", 1},
           {"\xF0\x9F\x98", 1},      // emoji cut short at the end
           {"\xE2\x82", 1},          // euro sign cut short
           {"\xC3", 1},              // e-acute cut short
           {"\xF0\x9F\x98\x41", 1},  // cut short before an ASCII byte, which is kept
       }) {
    std::string out = json_escape(c.in);
    std::string expected;
    for (int i = 0; i < c.fffd; ++i) expected += kFffd;
    if (c.in.back() == 'A') expected += "A";
    EXPECT_EQ(out, expected) << "input of " << c.in.size() << " bytes";
    EXPECT_EQ(read_back(c.in), expected);
  }
  // A bad byte right before something that needs escaping.
  EXPECT_EQ(json_escape("\xFF\"\xFF\n"), kFffd + "\\\"" + kFffd + "\\n");
}

std::string to_hex(std::string_view s) {
  static const char* d = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out += d[c >> 4];
    out += d[c & 15];
  }
  return out;
}

TEST(ProtoJsonWriter, RandomBytesMatchPythonsReplaceDecoder) {
  const std::string python = RZ_SOURCE_DIR "/.venv/bin/python";
  const std::string script = RZ_SOURCE_DIR "/tests/proto/utf8_replace_reference.py";
  if (!std::filesystem::exists(python)) FAIL() << python << " is missing: run scripts/setup.sh";
  // Random strings over a byte alphabet rich in lead and continuation bytes and boundaries.
  const unsigned char alphabet[] = {'a',  '"',  '\\', '\n', 0x00, 0x1f, 0x7f, 0x80, 0x8f, 0x90,
                                    0x9f, 0xa0, 0xbf, 0xc0, 0xc1, 0xc2, 0xdf, 0xe0, 0xe1, 0xec,
                                    0xed, 0xee, 0xef, 0xf0, 0xf1, 0xf3, 0xf4, 0xf5, 0xfe, 0xff};
  std::mt19937 rng(1234);
  std::vector<std::string> inputs;
  for (int i = 0; i < 3000; ++i) {
    std::string s(1 + rng() % 12, '\0');
    for (char& c : s) c = char(alphabet[rng() % sizeof alphabet]);
    inputs.push_back(s);
  }
  auto dir =
      std::filesystem::temp_directory_path() / ("rz_proto_utf8_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  {
    std::ofstream in(dir / "in.txt");
    for (const auto& s : inputs) in << to_hex(s) << "\n";
  }
  std::string cmd = "'" + python + "' '" + script + "' < '" + (dir / "in.txt").string() + "' > '" +
                    (dir / "out.txt").string() + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream out(dir / "out.txt");
  std::size_t n = 0;
  for (std::string line; std::getline(out, line); ++n) {
    ASSERT_LT(n, inputs.size());
    // Python decodes; we escape, then simdjson unescapes: the two texts must agree.
    EXPECT_EQ(to_hex(read_back(inputs[n])), line) << "input " << to_hex(inputs[n]);
  }
  EXPECT_EQ(n, inputs.size());
  std::filesystem::remove_all(dir);
}

std::string ms(double v) {
  std::string out;
  append_ms(out, v);
  return out;
}

TEST(ProtoJsonWriter, MillisecondsWithOneToThreeDecimals) {
  EXPECT_EQ(ms(12.3), "12.3");
  EXPECT_EQ(ms(250.1), "250.1");
  EXPECT_EQ(ms(250.0), "250.0");
  EXPECT_EQ(ms(0.0), "0.0");
  EXPECT_EQ(ms(0.125), "0.125");
  EXPECT_EQ(ms(1.5), "1.5");
  EXPECT_EQ(ms(1.25), "1.25");
  EXPECT_EQ(ms(1.23456), "1.235");
  EXPECT_EQ(ms(99.99996), "100.0");
  EXPECT_EQ(ms(1e-9), "0.0");
  EXPECT_EQ(ms(-1e-9), "0.0");
  EXPECT_EQ(ms(1234567.891), "1234567.891");
  EXPECT_EQ(ms(NAN), "null");
  EXPECT_EQ(ms(INFINITY), "null");
  EXPECT_EQ(ms(-INFINITY), "null");
  // Always a JSON number (or null) whatever the magnitude.
  for (double v : {1e300, -5.5, 3e-4, 123456789.0}) {
    std::string s = "[";
    s += ms(v);
    s += "]";
    simdjson::dom::parser p;
    simdjson::padded_string ps(s);
    double d = 0;
    ASSERT_EQ(p.parse(ps).at(0).get_double().get(d), simdjson::SUCCESS) << s;
    EXPECT_NEAR(d, v, 0.0005 + std::abs(v) * 1e-15) << s;
  }
}

TEST(ProtoJsonWriter, IntegersAndFloats) {
  std::string out;
  append_uint(out, 0);
  out += ' ';
  append_uint(out, UINT64_MAX);
  out += ' ';
  append_int(out, INT64_MIN);
  out += ' ';
  append_float(out, 0.7f);
  out += ' ';
  append_float(out, 40.0f);
  out += ' ';
  append_float(out, NAN);
  EXPECT_EQ(out, "0 18446744073709551615 -9223372036854775808 0.7 40 null");
  // The shortest text reads back as the same float.
  std::mt19937 rng(7);
  for (int i = 0; i < 2000; ++i) {
    uint32_t bits = rng();
    float f;
    std::memcpy(&f, &bits, sizeof f);
    if (!std::isfinite(f)) continue;
    std::string s;
    append_float(s, f);
    EXPECT_EQ(std::strtof(s.c_str(), nullptr), f) << s;
  }
}

}  // namespace
}  // namespace rz::proto
