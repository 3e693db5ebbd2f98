// Typed field getters over simdjson's DOM (see json_fields.hpp).
#include "proto/json_fields.hpp"

#include <cfloat>
#include <limits>

namespace rz::proto {

using simdjson::dom::element;
using simdjson::dom::element_type;

void fail_field(ErrorCode code, const std::string& field, std::string_view what) {
  std::string m = field;
  m.append(": ").append(what);
  throw FieldError{code, std::move(m), field};
}

std::string_view json_type_name(element e) {
  switch (e.type()) {
    case element_type::ARRAY: return "array";
    case element_type::OBJECT: return "object";
    case element_type::INT64:
    case element_type::UINT64:
    case element_type::DOUBLE: return "number";
    case element_type::STRING: return "string";
    case element_type::BOOL: return "boolean";
    case element_type::NULL_VALUE: return "null";
  }
  return "value";
}

simdjson::dom::object parse_json_object(std::string_view text) {
  // One parser per thread, reused: it keeps its buffers between calls.
  thread_local simdjson::dom::parser parser;
  simdjson::padded_string padded(text.data(), text.size());
  element root;
  if (auto err = parser.parse(padded).get(root))
    throw FieldError{
        ErrorCode::bad_json, std::string("not valid JSON: ") + simdjson::error_message(err), {}};
  simdjson::dom::object obj;
  if (root.get_object().get(obj))
    throw FieldError{ErrorCode::bad_json,
                     "expected a JSON object, got " + std::string(json_type_name(root)),
                     {}};
  return obj;
}

void wrong_type(const std::string& field, std::string_view expected, element e) {
  fail_field(ErrorCode::bad_value, field,
             "expected " + std::string(expected) + ", got " + std::string(json_type_name(e)));
}

std::string_view get_string(element e, const std::string& field) {
  std::string_view s;
  if (e.get_string().get(s)) wrong_type(field, "a string", e);
  return s;
}

bool get_bool(element e, const std::string& field) {
  bool b = false;
  if (e.get_bool().get(b)) wrong_type(field, "a boolean", e);
  return b;
}

float get_float(element e, const std::string& field) {
  double d = 0;
  if (e.get_double().get(d)) wrong_type(field, "a number", e);
  if (d > double(FLT_MAX)) return std::numeric_limits<float>::infinity();
  if (d < -double(FLT_MAX)) return -std::numeric_limits<float>::infinity();
  const float f = float(d);
  // -0 and a negative below float's smallest denormal (-1e-310) too: a field's value has no sign
  // of zero (and writes back as 0)
  return f == 0.0f ? 0.0f : f;
}

namespace {
[[noreturn]] void out_of_range(const std::string& field, int64_t lo, int64_t hi) {
  fail_field(ErrorCode::bad_value, field,
             "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
}
}  // namespace

int64_t get_int(element e, const std::string& field, int64_t lo, int64_t hi) {
  switch (e.type()) {
    case element_type::INT64: {
      int64_t v = e.get_int64().value_unsafe();
      if (v < lo || v > hi) out_of_range(field, lo, hi);
      return v;
    }
    case element_type::UINT64:  // only values above INT64_MAX are stored as UINT64
      out_of_range(field, lo, hi);
    case element_type::DOUBLE:
      fail_field(ErrorCode::bad_value, field,
                 "expected an integer, got a number with a fraction or an exponent");
    default: wrong_type(field, "an integer", e);
  }
}

uint64_t get_uint64(element e, const std::string& field) {
  if (e.type() == element_type::UINT64) return e.get_uint64().value_unsafe();
  if (e.type() == element_type::INT64 && e.get_int64().value_unsafe() < 0)
    fail_field(ErrorCode::bad_value, field, "must be in [0, 18446744073709551615]");
  return uint64_t(get_int(e, field, 0, std::numeric_limits<int64_t>::max()));
}

namespace {
void add_stop(std::vector<std::string>& out, element e, const std::string& field,
              std::size_t max_bytes) {
  std::string_view s = get_string(e, field);
  if (s.empty()) fail_field(ErrorCode::bad_value, field, "must not be empty");
  if (s.size() > max_bytes)
    fail_field(ErrorCode::bad_value, field, "longer than " + std::to_string(max_bytes) + " bytes");
  out.emplace_back(s);
}
}  // namespace

std::vector<std::string> parse_stop_strings(element e, std::size_t max_n, std::size_t max_bytes) {
  std::vector<std::string> out;
  const auto too_many = [&] {
    fail_field(ErrorCode::bad_value, "stop", "more than " + std::to_string(max_n) + " strings");
  };
  if (e.is_string()) {
    if (max_n < 1) too_many();
    add_stop(out, e, "stop", max_bytes);
    return out;
  }
  simdjson::dom::array arr;
  if (e.get_array().get(arr)) wrong_type("stop", "a string or an array of strings", e);
  if (arr.size() > max_n) too_many();
  std::size_t i = 0;
  for (element s : arr) add_stop(out, s, "stop[" + std::to_string(i++) + "]", max_bytes);
  return out;
}

}  // namespace rz::proto
