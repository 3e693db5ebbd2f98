// Client frame parsing: simdjson DOM -> GenerateRequest / CancelRequest / PingRequest, or the
// ProtocolError to send back. The checks run in a fixed order (size, JSON, "id" recovery, "type",
// "id", then the generate fields in the order docs/protocol.md lists them); the first failure is
// the one reported.
#include "proto/parse.hpp"

#include <simdjson.h>

#include <algorithm>
#include <array>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

namespace rz::proto {
namespace {

using simdjson::dom::element;
using simdjson::dom::element_type;

// Thrown inside this file only; parse_client_message turns it into a ProtocolError.
struct Failure {
  ErrorCode code;
  std::string message;
};

[[noreturn]] void fail(ErrorCode code, std::string message) {
  throw Failure{code, std::move(message)};
}

std::string_view type_name(element e) {
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

[[noreturn]] void wrong_type(const std::string& field, std::string_view expected, element e) {
  fail(ErrorCode::bad_value,
       field + ": expected " + std::string(expected) + ", got " + std::string(type_name(e)));
}

// The keys this parser reads, so that each is looked up once and a repeated one is caught.
enum Key : int {
  kType,
  kId,
  kPrompt,
  kMessages,
  kMaxTokens,
  kTemperature,
  kTopK,
  kTopP,
  kMinP,
  kRepetitionPenalty,
  kSeed,
  kStop,
  kIgnoreEos,
  kRole,
  kContent,
  kKeyCount
};
constexpr std::array<std::string_view, kKeyCount> kKeyNames = {
    "type",        "id",    "prompt",     "messages", "max_tokens",
    "temperature", "top_k", "top_p",      "min_p",    "repetition_penalty",
    "seed",        "stop",  "ignore_eos", "role",     "content"};

// The known keys of one JSON object: the first value of each, and whether it was repeated.
// A repeat is an error only for a key that is read (unknown keys are ignored, repeated or not).
class Fields {
 public:
  explicit Fields(simdjson::dom::object obj) {
    for (auto kv : obj) {
      for (int k = 0; k < kKeyCount; ++k) {
        if (kv.key != kKeyNames[k]) continue;
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
  // The value, or nothing when the key is absent or null. A repeated key fails with bad_json.
  std::optional<element> get(Key k, const std::string& field) const {
    if (repeated_[k]) fail(ErrorCode::bad_json, "duplicate key \"" + field + "\"");
    if (!present_[k] || value_[k].is_null()) return std::nullopt;
    return value_[k];
  }
  std::optional<element> get(Key k) const { return get(k, std::string(kKeyNames[k])); }
  // The same without failing: for recovering the id of a frame that is wrong elsewhere.
  std::optional<element> peek(Key k) const {
    if (repeated_[k] || !present_[k] || value_[k].is_null()) return std::nullopt;
    return value_[k];
  }

 private:
  std::array<bool, kKeyCount> present_{};
  std::array<bool, kKeyCount> repeated_{};
  std::array<element, kKeyCount> value_{};
};

std::string_view get_string(element e, const std::string& field) {
  std::string_view s;
  if (e.get_string().get(s)) wrong_type(field, "a string", e);
  return s;
}

// A JSON number as the float the sampler will use; values past float's range become infinite so
// that the range checks (which are all on the float) reject them.
float get_float(element e, const std::string& field) {
  double d = 0;
  if (e.get_double().get(d)) wrong_type(field, "a number", e);
  if (d > double(FLT_MAX)) return std::numeric_limits<float>::infinity();
  if (d < -double(FLT_MAX)) return -std::numeric_limits<float>::infinity();
  return float(d);
}

// A JSON integer (no fraction, no exponent) within [lo, hi].
[[noreturn]] void out_of_range(const std::string& field, int64_t lo, int64_t hi) {
  std::string m = field;
  m.append(": must be in [").append(std::to_string(lo)).append(", ");
  m.append(std::to_string(hi)).append("]");
  fail(ErrorCode::bad_value, std::move(m));
}

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
      fail(ErrorCode::bad_value, field +
                                     ": expected an integer, got a number with a fraction "
                                     "or an exponent");
    default: wrong_type(field, "an integer", e);
  }
}

std::string checked_id(element e, const ProtocolLimits& limits) {
  std::string_view id = get_string(e, "id");
  if (id.empty()) fail(ErrorCode::bad_value, "id: must not be empty");
  if (id.size() > limits.max_id_bytes)
    fail(ErrorCode::bad_value, "id: longer than " + std::to_string(limits.max_id_bytes) + " bytes");
  return std::string(id);
}

std::optional<std::string> recover_id(const Fields& f, const ProtocolLimits& limits) {
  std::optional<element> e = f.peek(kId);
  if (!e) return std::nullopt;
  std::string_view id;
  if (e->get_string().get(id) || id.empty() || id.size() > limits.max_id_bytes) return std::nullopt;
  return std::string(id);
}

std::string required_id(const Fields& f, const ProtocolLimits& limits) {
  std::optional<element> e = f.get(kId);
  if (!e) fail(ErrorCode::missing_field, "id: required");
  return checked_id(*e, limits);
}

std::vector<ChatMessage> parse_messages(element e, const ProtocolLimits& limits) {
  simdjson::dom::array arr;
  if (e.get_array().get(arr)) wrong_type("messages", "an array", e);
  if (arr.size() == 0) fail(ErrorCode::bad_value, "messages: must not be empty");
  if (arr.size() > limits.max_messages)
    fail(ErrorCode::bad_value,
         "messages: more than " + std::to_string(limits.max_messages) + " messages");
  std::vector<ChatMessage> out;
  out.reserve(arr.size());
  std::size_t i = 0;
  for (element m : arr) {
    std::string at = "messages[" + std::to_string(i++) + "]";
    simdjson::dom::object obj;
    if (m.get_object().get(obj)) wrong_type(at, "an object", m);
    Fields f(obj);
    std::optional<element> role = f.get(kRole, at + ".role");
    if (!role) fail(ErrorCode::missing_field, at + ".role: required");
    std::string_view r = get_string(*role, at + ".role");
    if (r != "system" && r != "user" && r != "assistant")
      fail(ErrorCode::bad_value, at + ".role: must be \"system\", \"user\" or \"assistant\"");
    std::optional<element> content = f.get(kContent, at + ".content");
    if (!content) fail(ErrorCode::missing_field, at + ".content: required");
    std::string_view c = get_string(*content, at + ".content");
    out.push_back(ChatMessage{std::string(r), std::string(c)});
  }
  return out;
}

void add_stop(std::vector<std::string>& out, element e, const std::string& field,
              const ProtocolLimits& limits) {
  std::string_view s = get_string(e, field);
  if (s.empty()) fail(ErrorCode::bad_value, field + ": must not be empty");
  if (s.size() > limits.max_stop_bytes)
    fail(ErrorCode::bad_value,
         field + ": longer than " + std::to_string(limits.max_stop_bytes) + " bytes");
  out.emplace_back(s);
}

// "stop": a string or an array of strings.
std::vector<std::string> parse_stop(element e, const ProtocolLimits& limits) {
  std::vector<std::string> out;
  if (e.is_string()) {
    if (limits.max_stop < 1)
      fail(ErrorCode::bad_value, "stop: more than " + std::to_string(limits.max_stop) + " strings");
    add_stop(out, e, "stop", limits);
    return out;
  }
  simdjson::dom::array arr;
  if (e.get_array().get(arr)) wrong_type("stop", "a string or an array of strings", e);
  if (arr.size() > limits.max_stop)
    fail(ErrorCode::bad_value, "stop: more than " + std::to_string(limits.max_stop) + " strings");
  std::size_t i = 0;
  for (element s : arr) add_stop(out, s, "stop[" + std::to_string(i++) + "]", limits);
  return out;
}

GenerateRequest parse_generate(const Fields& f, const ProtocolLimits& limits) {
  GenerateRequest req;
  req.id = required_id(f, limits);

  std::optional<element> prompt = f.get(kPrompt);
  std::optional<element> messages = f.get(kMessages);
  if (prompt && messages)
    fail(ErrorCode::bad_value, "prompt, messages: give one of them, not both");
  if (!prompt && !messages) fail(ErrorCode::missing_field, "prompt or messages: required");
  if (prompt) {
    std::string_view p = get_string(*prompt, "prompt");
    if (p.empty()) fail(ErrorCode::bad_value, "prompt: must not be empty");
    req.prompt = std::string(p);
  } else {
    req.messages = parse_messages(*messages, limits);
  }

  req.max_tokens = std::min(kDefaultMaxTokens, limits.max_tokens);
  if (auto e = f.get(kMaxTokens))
    req.max_tokens = int(get_int(*e, "max_tokens", 1, limits.max_tokens));

  Sampling& s = req.sampling;
  if (auto e = f.get(kTemperature)) {
    s.temperature = get_float(*e, "temperature");
    if (!(s.temperature >= 0.0f) || !std::isfinite(s.temperature))
      fail(ErrorCode::bad_value, "temperature: must be a finite number >= 0");
  }
  if (auto e = f.get(kTopK))
    s.top_k = int(get_int(*e, "top_k", 0, std::numeric_limits<int32_t>::max()));
  if (auto e = f.get(kTopP)) {
    s.top_p = get_float(*e, "top_p");
    if (!(s.top_p > 0.0f && s.top_p <= 1.0f))
      fail(ErrorCode::bad_value, "top_p: must be in (0, 1]");
  }
  if (auto e = f.get(kMinP)) {
    s.min_p = get_float(*e, "min_p");
    if (!(s.min_p >= 0.0f && s.min_p <= 1.0f))
      fail(ErrorCode::bad_value, "min_p: must be in [0, 1]");
  }
  if (auto e = f.get(kRepetitionPenalty)) {
    s.repetition_penalty = get_float(*e, "repetition_penalty");
    if (!(s.repetition_penalty > 0.0f) || !std::isfinite(s.repetition_penalty))
      fail(ErrorCode::bad_value, "repetition_penalty: must be a finite number > 0");
  }
  if (auto e = f.get(kSeed)) {
    // The whole uint64 range (values above INT64_MAX arrive as UINT64); the error names it.
    if (e->type() == element_type::UINT64) {
      s.seed = e->get_uint64().value_unsafe();
    } else if (e->type() == element_type::INT64 && e->get_int64().value_unsafe() < 0) {
      fail(ErrorCode::bad_value, "seed: must be in [0, 18446744073709551615]");
    } else {
      s.seed = uint64_t(get_int(*e, "seed", 0, std::numeric_limits<int64_t>::max()));
    }
  }

  if (auto e = f.get(kStop)) req.stop = parse_stop(*e, limits);
  if (auto e = f.get(kIgnoreEos)) {
    bool b = false;
    if (e->get_bool().get(b)) wrong_type("ignore_eos", "a boolean", *e);
    req.ignore_eos = b;
  }
  return req;
}

ParseResult parse_object(simdjson::dom::object obj, const ProtocolLimits& limits,
                         std::optional<std::string>& id_out) {
  Fields f(obj);
  id_out = recover_id(f, limits);
  std::optional<element> type = f.get(kType);
  if (!type) fail(ErrorCode::missing_field, "type: required");
  std::string_view t = get_string(*type, "type");
  if (t == "generate") return parse_generate(f, limits);
  if (t == "cancel") return CancelRequest{required_id(f, limits)};
  if (t == "ping") return PingRequest{};
  std::string shown(t.substr(0, 64));
  fail(ErrorCode::unknown_type,
       "type: unknown message type \"" + shown + "\" (expected generate, cancel or ping)");
}

}  // namespace

ParseResult parse_client_message(std::string_view frame, const ProtocolLimits& limits) {
  if (frame.size() > limits.max_frame_bytes)
    return ProtocolError{ErrorCode::too_large,
                         "frame of " + std::to_string(frame.size()) +
                             " bytes exceeds the limit of " +
                             std::to_string(limits.max_frame_bytes) + " bytes",
                         std::nullopt};
  // One parser per thread, reused: it keeps its buffers between frames.
  thread_local simdjson::dom::parser parser;
  simdjson::padded_string padded(frame.data(), frame.size());
  element root;
  if (auto err = parser.parse(padded).get(root))
    return ProtocolError{ErrorCode::bad_json,
                         std::string("not valid JSON: ") + simdjson::error_message(err),
                         std::nullopt};
  simdjson::dom::object obj;
  if (root.get_object().get(obj))
    return ProtocolError{ErrorCode::bad_json,
                         "expected a JSON object, got " + std::string(type_name(root)),
                         std::nullopt};
  std::optional<std::string> id;
  try {
    return parse_object(obj, limits, id);
  } catch (Failure& f) {
    return ProtocolError{f.code, std::move(f.message), std::move(id)};
  }
}

}  // namespace rz::proto
