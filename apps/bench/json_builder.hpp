// A small JSON writer for rz bench's --json output (bench_json.cpp): objects and arrays with
// commas and two-space indentation kept for the caller, strings escaped by proto/json_writer.hpp
// (always valid JSON whatever bytes they hold), numbers in their shortest round-trip form, and
// null for NaN and infinities (JSON has no such numbers).
//
//   JsonBuilder j;
//   j.begin_object();
//   j.key("name").value("pp512");
//   j.key("batches").begin_array().value(1).value(4).end_array();
//   j.end_object();
//   j.str()  ->  {\n  "name": "pp512",\n  "batches": [\n    1,\n    4\n  ]\n}
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace rz::bench {

class JsonBuilder {
 public:
  JsonBuilder& begin_object();
  JsonBuilder& end_object();
  JsonBuilder& begin_array();
  JsonBuilder& end_array();
  JsonBuilder& key(std::string_view k);  // inside an object, before its value
  JsonBuilder& value(std::string_view s);
  JsonBuilder& value(const char* s) { return value(std::string_view(s)); }
  JsonBuilder& value(double x);  // NaN, inf -> null
  JsonBuilder& value(int64_t x);
  JsonBuilder& value(uint64_t x);
  JsonBuilder& value(int x) { return value(static_cast<int64_t>(x)); }
  JsonBuilder& value(bool b);
  JsonBuilder& null();
  const std::string& str() const { return out_; }

 private:
  void before_value();  // the comma and newline before an element, or nothing after a key
  void close(char c);

  std::string out_;
  std::vector<bool> has_items_;  // per open container: whether it holds an element yet
  bool after_key_ = false;
};

// The shortest decimal text that reads back as `x` (std::to_chars), or "null" when not finite.
std::string json_number(double x);

}  // namespace rz::bench
