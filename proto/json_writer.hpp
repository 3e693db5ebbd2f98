// Small JSON writing primitives for the server's frames (proto/serialize.cpp): string literals
// that are always valid JSON whatever bytes they are given, and compact numbers.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace rz::proto {

// Appends `s` as a JSON string literal, quotes included. '"' and '\\' are escaped; control
// characters U+0000..U+001F become \b \f \n \r \t or \u00XX; valid UTF-8 passes through as is;
// each maximal ill-formed subsequence of bytes becomes one U+FFFD (the Unicode standard's
// "substitution of maximal subparts", which is also what Python's errors="replace" does).
void append_json_string(std::string& out, std::string_view s);

// The same rules without the quotes; for tests and for callers that build a literal in parts.
std::string json_escape(std::string_view s);

// Appends a duration in milliseconds with 1 to 3 decimals (12.3, 250.0, 0.125); rounds to the
// nearest microsecond; a NaN or infinite value is written as null.
void append_ms(std::string& out, double ms);

void append_uint(std::string& out, uint64_t v);
void append_int(std::string& out, int64_t v);

// Appends the shortest decimal text that reads back as the same float (0.7f -> 0.7); a NaN or
// infinite value is written as null.
void append_float(std::string& out, float v);

// A log-probability: as append_float, but -inf (probability 0) is written as -9999.0, the value
// OpenAI-compatible servers use, since JSON has no infinity.
void append_logprob(std::string& out, float v);

// Characters (code points) of UTF-8 text, a stray byte counting as one.
uint64_t utf8_char_count(std::string_view s);

// The bytes of `s` as a JSON array of integers 0..255 ([104,105]).
void append_byte_array(std::string& out, std::string_view s);

}  // namespace rz::proto
