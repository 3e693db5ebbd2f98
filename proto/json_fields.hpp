// Reading typed fields out of a simdjson DOM object, shared by the parsers of the WebSocket
// protocol (proto/parse.cpp) and of the OpenAI-compatible HTTP API (proto/openai_parse.cpp):
// each known key looked up once (a repeated one caught), and typed getters whose errors name the
// field ("max_tokens: must be in [1, 4096]"). Errors are thrown as FieldError; each parser turns
// it into its own error shape.
#pragma once
#include <simdjson.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "proto/messages.hpp"

namespace rz::proto {

struct FieldError {
  ErrorCode code;
  std::string message;  // starts with the field's path and ": "
  std::string field;    // the field's path ("messages[2].role"); empty when none
};

[[noreturn]] void fail_field(ErrorCode code, const std::string& field, std::string_view what);

std::string_view json_type_name(simdjson::dom::element e);

// Parses `text` as one JSON object with this thread's reused parser; the object stays valid until
// the thread's next call. Throws FieldError (bad_json, no field) when it is not JSON or not an
// object.
simdjson::dom::object parse_json_object(std::string_view text);
[[noreturn]] void wrong_type(const std::string& field, std::string_view expected,
                             simdjson::dom::element e);

std::string_view get_string(simdjson::dom::element e, const std::string& field);
bool get_bool(simdjson::dom::element e, const std::string& field);
// A JSON number as a float; values past float's range become infinite, so that range checks on
// the float reject them; -0 becomes 0.
float get_float(simdjson::dom::element e, const std::string& field);
// A JSON integer (no fraction, no exponent) within [lo, hi].
int64_t get_int(simdjson::dom::element e, const std::string& field, int64_t lo, int64_t hi);
// The whole uint64 range (a seed).
uint64_t get_uint64(simdjson::dom::element e, const std::string& field);

// "stop": a string or an array of strings, each non-empty and within max_bytes, at most max_n.
std::vector<std::string> parse_stop_strings(simdjson::dom::element e, std::size_t max_n,
                                            std::size_t max_bytes);

// The known keys of one JSON object: the first value of each, and whether it was repeated. A
// repeat is an error (bad_json) only for a key that is read; unknown keys are ignored.
template <std::size_t N>
class Fields {
 public:
  Fields(simdjson::dom::object obj, const std::array<std::string_view, N>& names,
         std::string prefix = "")
      : names_(names), prefix_(std::move(prefix)) {
    for (auto kv : obj) {
      for (std::size_t k = 0; k < N; ++k) {
        if (kv.key != names_[k]) continue;
        if (present_[k])
          repeated_[k] = true;
        else {
          present_[k] = true;
          value_[k] = kv.value;
        }
        break;
      }
    }
  }
  // The field's path as errors name it.
  std::string path(int k) const { return prefix_ + std::string(names_[k]); }
  // The value, or nothing when the key is absent or null. A repeated key fails with bad_json.
  std::optional<simdjson::dom::element> get(int k) const {
    if (repeated_[k]) fail_field(ErrorCode::bad_json, path(k), "duplicate key");
    if (!present_[k] || value_[k].is_null()) return std::nullopt;
    return value_[k];
  }
  // The same without failing: for recovering a field of an object that is wrong elsewhere.
  std::optional<simdjson::dom::element> peek(int k) const {
    if (repeated_[k] || !present_[k] || value_[k].is_null()) return std::nullopt;
    return value_[k];
  }

 private:
  const std::array<std::string_view, N>& names_;
  std::string prefix_;
  std::array<bool, N> present_{};
  std::array<bool, N> repeated_{};
  std::array<simdjson::dom::element, N> value_{};
};

}  // namespace rz::proto
