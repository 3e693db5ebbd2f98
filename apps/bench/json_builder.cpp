// rz bench's JSON writer (see json_builder.hpp).
#include "apps/bench/json_builder.hpp"

#include <charconv>
#include <cmath>

#include "proto/json_writer.hpp"

namespace rz::bench {

std::string json_number(double x) {
  if (!std::isfinite(x)) return "null";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, x);
  return std::string(buf, r.ptr);
}

void JsonBuilder::before_value() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (has_items_.empty()) return;  // the top-level value
  if (has_items_.back()) out_ += ',';
  has_items_.back() = true;
  out_ += '\n';
  out_.append(2 * has_items_.size(), ' ');
}

void JsonBuilder::close(char c) {
  const bool had = has_items_.back();
  has_items_.pop_back();
  if (had) {
    out_ += '\n';
    out_.append(2 * has_items_.size(), ' ');
  }
  out_ += c;
}

JsonBuilder& JsonBuilder::begin_object() {
  before_value();
  out_ += '{';
  has_items_.push_back(false);
  return *this;
}

JsonBuilder& JsonBuilder::end_object() {
  close('}');
  return *this;
}

JsonBuilder& JsonBuilder::begin_array() {
  before_value();
  out_ += '[';
  has_items_.push_back(false);
  return *this;
}

JsonBuilder& JsonBuilder::end_array() {
  close(']');
  return *this;
}

JsonBuilder& JsonBuilder::key(std::string_view k) {
  before_value();
  proto::append_json_string(out_, k);
  out_ += ": ";
  after_key_ = true;
  return *this;
}

JsonBuilder& JsonBuilder::value(std::string_view s) {
  before_value();
  proto::append_json_string(out_, s);
  return *this;
}

JsonBuilder& JsonBuilder::value(double x) {
  before_value();
  out_ += json_number(x);
  return *this;
}

JsonBuilder& JsonBuilder::value(int64_t x) {
  before_value();
  proto::append_int(out_, x);
  return *this;
}

JsonBuilder& JsonBuilder::value(uint64_t x) {
  before_value();
  proto::append_uint(out_, x);
  return *this;
}

JsonBuilder& JsonBuilder::value(bool b) {
  before_value();
  out_ += b ? "true" : "false";
  return *this;
}

JsonBuilder& JsonBuilder::null() {
  before_value();
  out_ += "null";
  return *this;
}

}  // namespace rz::bench
