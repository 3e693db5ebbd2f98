// Client frame parsing: simdjson DOM -> GenerateRequest / CancelRequest / PingRequest, or the
// ProtocolError to send back. The checks run in a fixed order (size, JSON, "id" recovery, "type",
// "id", then the generate fields in the order docs/protocol.md lists them); the first failure is
// the one reported.
#include "proto/parse.hpp"

#include "proto/json_fields.hpp"

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

[[noreturn]] void fail(ErrorCode code, std::string message) {
  throw FieldError{code, std::move(message), {}};
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
  kPresencePenalty,
  kFrequencyPenalty,
  kLogprobs,
  kN,
  kTimeoutMs,
  kRole,
  kContent,
  kKeyCount
};
constexpr std::array<std::string_view, kKeyCount> kKeyNames = {"type",
                                                               "id",
                                                               "prompt",
                                                               "messages",
                                                               "max_tokens",
                                                               "temperature",
                                                               "top_k",
                                                               "top_p",
                                                               "min_p",
                                                               "repetition_penalty",
                                                               "seed",
                                                               "stop",
                                                               "ignore_eos",
                                                               "presence_penalty",
                                                               "frequency_penalty",
                                                               "logprobs",
                                                               "n",
                                                               "timeout_ms",
                                                               "role",
                                                               "content"};

using KeyFields = proto::Fields<kKeyCount>;

std::string checked_id(element e, const ProtocolLimits& limits) {
  std::string_view id = get_string(e, "id");
  if (id.empty()) fail(ErrorCode::bad_value, "id: must not be empty");
  if (id.size() > limits.max_id_bytes)
    fail(ErrorCode::bad_value, "id: longer than " + std::to_string(limits.max_id_bytes) + " bytes");
  return std::string(id);
}

std::optional<std::string> recover_id(const KeyFields& f, const ProtocolLimits& limits) {
  std::optional<element> e = f.peek(kId);
  if (!e) return std::nullopt;
  std::string_view id;
  if (e->get_string().get(id) || id.empty() || id.size() > limits.max_id_bytes) return std::nullopt;
  return std::string(id);
}

std::string required_id(const KeyFields& f, const ProtocolLimits& limits) {
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
    KeyFields f(obj, kKeyNames, at + ".");
    std::optional<element> role = f.get(kRole);
    if (!role) fail(ErrorCode::missing_field, at + ".role: required");
    std::string_view r = get_string(*role, at + ".role");
    if (r != "system" && r != "user" && r != "assistant")
      fail(ErrorCode::bad_value, at + ".role: must be \"system\", \"user\" or \"assistant\"");
    std::optional<element> content = f.get(kContent);
    if (!content) fail(ErrorCode::missing_field, at + ".content: required");
    std::string_view c = get_string(*content, at + ".content");
    out.push_back(ChatMessage{std::string(r), std::string(c)});
  }
  return out;
}

// presence_penalty / frequency_penalty: absent or null is 0 (off); OpenAI's range.
float penalty_field(std::optional<element> e, const char* name) {
  if (!e) return 0.0f;
  const float v = get_float(*e, name);
  if (!(v >= -2.0f && v <= 2.0f))
    fail(ErrorCode::bad_value, std::string(name) + ": must be in [-2, 2]");
  return v;
}

GenerateRequest parse_generate(const KeyFields& f, const ProtocolLimits& limits) {
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
  if (auto e = f.get(kSeed)) s.seed = get_uint64(*e, "seed");

  if (auto e = f.get(kStop))
    req.stop = parse_stop_strings(*e, limits.max_stop, limits.max_stop_bytes);
  if (auto e = f.get(kIgnoreEos)) req.ignore_eos = get_bool(*e, "ignore_eos");
  s.presence_penalty = penalty_field(f.get(kPresencePenalty), "presence_penalty");
  s.frequency_penalty = penalty_field(f.get(kFrequencyPenalty), "frequency_penalty");
  if (auto e = f.get(kLogprobs)) req.logprobs = int(get_int(*e, "logprobs", 0, kMaxTopLogprobs));
  if (auto e = f.get(kN)) req.n = int(get_int(*e, "n", 1, kMaxChoices));
  if (auto e = f.get(kTimeoutMs))
    req.timeout_ms = uint32_t(get_int(*e, "timeout_ms", 1, std::numeric_limits<int32_t>::max()));
  return req;
}

ParseResult parse_object(simdjson::dom::object obj, const ProtocolLimits& limits,
                         std::optional<std::string>& id_out) {
  KeyFields f(obj, kKeyNames);
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
  std::optional<std::string> id;
  try {
    return parse_object(parse_json_object(frame), limits, id);
  } catch (FieldError& f) {
    return ProtocolError{f.code, std::move(f.message), std::move(id)};
  }
}

}  // namespace rz::proto
