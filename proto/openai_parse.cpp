// OpenAI request bodies -> OpenAiRequest (see openai.hpp). Checks run in a fixed order; the
// first failure is the one reported, naming the field as OpenAI's "param".
#include <simdjson.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <limits>

#include "proto/json_fields.hpp"
#include "proto/openai.hpp"

namespace rz::proto {
namespace {

using simdjson::dom::element;

enum Key : int {
  kModel,
  kMessages,
  kPrompt,
  kMaxTokens,
  kMaxCompletionTokens,
  kTemperature,
  kTopP,
  kTopK,
  kMinP,
  kRepetitionPenalty,
  kSeed,
  kStop,
  kIgnoreEos,
  kTimeoutMs,
  kN,
  kStream,
  kStreamOptions,
  kIncludeUsage,
  kPresencePenalty,
  kFrequencyPenalty,
  kLogitBias,
  kLogprobs,
  kTopLogprobs,
  kEcho,
  kSuffix,
  kBestOf,
  kTools,
  kFunctions,
  kResponseFormat,
  kType,
  kRole,
  kContent,
  kText,
  kKeyCount
};
constexpr std::array<std::string_view, kKeyCount> kKeyNames = {"model",
                                                               "messages",
                                                               "prompt",
                                                               "max_tokens",
                                                               "max_completion_tokens",
                                                               "temperature",
                                                               "top_p",
                                                               "top_k",
                                                               "min_p",
                                                               "repetition_penalty",
                                                               "seed",
                                                               "stop",
                                                               "ignore_eos",
                                                               "timeout_ms",
                                                               "n",
                                                               "stream",
                                                               "stream_options",
                                                               "include_usage",
                                                               "presence_penalty",
                                                               "frequency_penalty",
                                                               "logit_bias",
                                                               "logprobs",
                                                               "top_logprobs",
                                                               "echo",
                                                               "suffix",
                                                               "best_of",
                                                               "tools",
                                                               "functions",
                                                               "response_format",
                                                               "type",
                                                               "role",
                                                               "content",
                                                               "text"};

using KeyFields = proto::Fields<kKeyCount>;

[[noreturn]] void bad(const std::string& field, std::string_view what) {
  fail_field(ErrorCode::bad_value, field, what);
}
// what: a plural subject ("tool messages"), the message "<what> are not supported by this server".
[[noreturn]] void unsupported(const std::string& field, std::string_view what) {
  fail_field(ErrorCode::bad_value, field, std::string(what) + " are not supported by this server");
}

// A message's content: a string, or an array of {"type":"text","text":...} parts (joined with
// newlines); null for an assistant message is empty text.
std::string parse_content(element e, const std::string& at, bool null_ok) {
  if (e.is_null()) {
    if (null_ok) return {};
    fail_field(ErrorCode::missing_field, at, "required");
  }
  if (e.is_string()) return std::string(get_string(e, at));
  simdjson::dom::array parts;
  if (e.get_array().get(parts)) wrong_type(at, "a string or an array of content parts", e);
  std::string out;
  std::size_t i = 0;
  for (element part : parts) {
    const std::string p = at + "[" + std::to_string(i++) + "]";
    simdjson::dom::object obj;
    if (part.get_object().get(obj)) wrong_type(p, "an object", part);
    KeyFields f(obj, kKeyNames, p + ".");
    auto type = f.get(kType);
    if (!type) fail_field(ErrorCode::missing_field, f.path(kType), "required");
    const std::string_view t = get_string(*type, f.path(kType));
    if (t != "text")
      unsupported(f.path(kType), "\"" + std::string(t.substr(0, 32)) + "\" content parts");
    auto text = f.get(kText);
    if (!text) fail_field(ErrorCode::missing_field, f.path(kText), "required");
    if (!out.empty()) out.push_back('\n');
    out.append(get_string(*text, f.path(kText)));
  }
  return out;
}

// OpenAI's logit_bias: {"<token id>": bias, ...}, ids as decimal strings, biases in [-100, 100],
// at most kMaxLogitBiasEntries; sorted by id, biases of 0 left out. (Whether the ids are in the
// model's vocabulary is the session's check: only it knows the vocabulary.)
std::vector<std::pair<int32_t, float>> parse_logit_bias(element e) {
  simdjson::dom::object obj;
  if (e.get_object().get(obj)) wrong_type("logit_bias", "an object", e);
  if (obj.size() > std::size_t(kMaxLogitBiasEntries))
    bad("logit_bias", "more than " + std::to_string(kMaxLogitBiasEntries) + " entries");
  std::vector<std::pair<int32_t, float>> out;
  for (auto [key, value] : obj) {
    const std::string shown = "\"" + std::string(key.substr(0, 32)) + "\"";
    int32_t id = -1;
    const char* end = key.data() + key.size();
    if (const auto r = std::from_chars(key.data(), end, id);
        r.ec != std::errc{} || r.ptr != end || id < 0)
      bad("logit_bias", "the key " + shown + " is not a token id (a decimal integer)");
    const float v = get_float(value, "logit_bias");
    if (!std::isfinite(v) || v < -100.0f || v > 100.0f)
      bad("logit_bias", "the bias of " + shown + " must be in [-100, 100]");
    out.emplace_back(id, v);
  }
  std::sort(out.begin(), out.end());
  for (std::size_t i = 1; i < out.size(); ++i)
    if (out[i].first == out[i - 1].first)
      bad("logit_bias", "token id " + std::to_string(out[i].first) + " is given twice");
  std::erase_if(out, [](const auto& b) { return b.second == 0.0f; });
  return out;
}

std::vector<ChatMessage> parse_messages(element e, const ProtocolLimits& limits) {
  simdjson::dom::array arr;
  if (e.get_array().get(arr)) wrong_type("messages", "an array", e);
  if (arr.size() == 0) bad("messages", "must not be empty");
  if (arr.size() > limits.max_messages)
    bad("messages", "more than " + std::to_string(limits.max_messages) + " messages");
  std::vector<ChatMessage> out;
  std::size_t i = 0;
  for (element m : arr) {
    const std::string at = "messages[" + std::to_string(i++) + "]";
    simdjson::dom::object obj;
    if (m.get_object().get(obj)) wrong_type(at, "an object", m);
    KeyFields f(obj, kKeyNames, at + ".");
    auto role = f.get(kRole);
    if (!role) fail_field(ErrorCode::missing_field, f.path(kRole), "required");
    std::string r(get_string(*role, f.path(kRole)));
    if (r == "developer") r = "system";  // OpenAI's newer name for the system role
    if (r == "tool" || r == "function") unsupported(f.path(kRole), "tool messages");
    if (r != "system" && r != "user" && r != "assistant")
      bad(f.path(kRole), "must be \"system\", \"developer\", \"user\" or \"assistant\"");
    std::string content;
    if (auto c = f.peek(kContent); c || r != "assistant") {
      auto v = f.get(kContent);
      if (!v) fail_field(ErrorCode::missing_field, f.path(kContent), "required");
      content = parse_content(*v, f.path(kContent), false);
    }
    out.push_back(ChatMessage{std::move(r), std::move(content)});
  }
  return out;
}

// A token-id prompt: an array of integers in [0, 2^31 - 1] (the vocabulary is checked where the
// model is known, in the session), non-empty.
CompletionPrompt token_prompt(simdjson::dom::array arr, const std::string& at) {
  CompletionPrompt p;
  if (arr.size() == 0) bad(at, "must not be empty");
  p.tokens.reserve(arr.size());
  std::size_t i = 0;
  for (element t : arr)
    p.tokens.push_back(int32_t(
        get_int(t, at + "[" + std::to_string(i++) + "]", 0, std::numeric_limits<int32_t>::max())));
  return p;
}

// "prompt": a string, an array of strings, an array of token ids, or an array of arrays of token
// ids (OpenAI's four forms); at most kMaxChoices prompts, each non-empty.
std::vector<CompletionPrompt> parse_prompts(element e) {
  const auto text = [](element t, const std::string& at) {
    CompletionPrompt p;
    p.text = std::string(get_string(t, at));
    if (p.text.empty()) bad(at, "must not be empty");
    return p;
  };
  if (e.is_string()) return {text(e, "prompt")};
  simdjson::dom::array arr;
  if (e.get_array().get(arr))
    wrong_type("prompt", "a string, an array of strings or an array of token ids", e);
  if (arr.size() == 0) bad("prompt", "must not be empty");
  const element first = arr.at(0).value_unsafe();
  if (first.is_int64() || first.is_uint64() || first.is_double())
    return {token_prompt(arr, "prompt")};
  if (arr.size() > std::size_t(kMaxChoices))
    bad("prompt", "at most " + std::to_string(kMaxChoices) + " prompts");
  std::vector<CompletionPrompt> out;
  std::size_t i = 0;
  for (element item : arr) {
    const std::string at = "prompt[" + std::to_string(i++) + "]";
    simdjson::dom::array ids;
    if (item.is_string())
      out.push_back(text(item, at));
    else if (!item.get_array().get(ids))
      out.push_back(token_prompt(ids, at));
    else
      wrong_type(at, "a string or an array of token ids", item);
  }
  return out;
}

// A number in [lo, hi] ((lo, hi] when lo_open); `range` is that interval as the error shows it.
float ranged_float(const KeyFields& f, int k, float lo, float hi, std::string_view range,
                   bool lo_open = false) {
  const float v = get_float(*f.get(k), f.path(k));
  if (!std::isfinite(v) || (lo_open ? v <= lo : v < lo) || v > hi)
    bad(f.path(k), "must be in " + std::string(range));
  return v;
}

OpenAiRequest parse_request(ApiKind kind, const KeyFields& f, const ProtocolLimits& limits) {
  OpenAiRequest r;
  r.kind = kind;
  if (auto e = f.get(kModel)) r.model = std::string(get_string(*e, "model"));

  if (kind == ApiKind::chat) {
    auto m = f.get(kMessages);
    if (!m) fail_field(ErrorCode::missing_field, "messages", "required");
    r.messages = parse_messages(*m, limits);
  } else {
    auto p = f.get(kPrompt);
    if (!p) fail_field(ErrorCode::missing_field, "prompt", "required");
    r.prompts = parse_prompts(*p);
  }

  for (int k : {kMaxTokens, kMaxCompletionTokens})
    if (auto e = f.get(k)) r.max_tokens = int(get_int(*e, f.path(k), 1, limits.max_tokens));

  Sampling& s = r.sampling;
  if (f.get(kTemperature)) s.temperature = ranged_float(f, kTemperature, 0.0f, 2.0f, "[0, 2]");
  if (f.get(kTopP)) {
    s.top_p = ranged_float(f, kTopP, 0.0f, 1.0f, "[0, 1]");
    if (s.top_p == 0.0f) s.top_p = 1.0f, s.top_k = 1;
  }
  if (auto e = f.get(kTopK)) {
    // OpenAI-style clients send -1 for "off".
    const int64_t k = get_int(*e, "top_k", -1, std::numeric_limits<int32_t>::max());
    if (s.top_k != 1) s.top_k = int(std::max<int64_t>(k, 0));
  }
  if (f.get(kMinP)) s.min_p = ranged_float(f, kMinP, 0.0f, 1.0f, "[0, 1]");
  if (f.get(kRepetitionPenalty))
    s.repetition_penalty = ranged_float(f, kRepetitionPenalty, 0.0f, 1e6f, "(0, 1e6]", true);
  if (auto e = f.get(kSeed)) {
    // OpenAI's seed is a signed integer: a negative one is taken modulo 2^64.
    if (e->type() == simdjson::dom::element_type::INT64)
      s.seed = static_cast<uint64_t>(e->get_int64().value_unsafe());
    else
      s.seed = get_uint64(*e, "seed");
  }

  if (auto e = f.get(kStop))
    r.stop = parse_stop_strings(*e, limits.max_stop, limits.max_stop_bytes);
  if (auto e = f.get(kIgnoreEos)) r.ignore_eos = get_bool(*e, "ignore_eos");
  if (auto e = f.get(kTimeoutMs))
    r.timeout_ms = uint32_t(get_int(*e, "timeout_ms", 1, std::numeric_limits<int32_t>::max()));
  if (auto e = f.get(kN)) r.n = int(get_int(*e, "n", 1, kMaxChoices));
  if (r.prompts.size() * std::size_t(r.n) > std::size_t(kMaxChoices))
    bad("n", "the prompts times n must be at most " + std::to_string(kMaxChoices) + " (" +
                 std::to_string(r.prompts.size()) + " prompts)");
  if (auto e = f.get(kStream)) r.stream = get_bool(*e, "stream");
  if (auto e = f.get(kStreamOptions)) {
    simdjson::dom::object obj;
    if (e->get_object().get(obj)) wrong_type("stream_options", "an object", *e);
    KeyFields o(obj, kKeyNames, "stream_options.");
    if (auto u = o.get(kIncludeUsage)) r.include_usage = get_bool(*u, o.path(kIncludeUsage));
  }
  if (f.get(kPresencePenalty))
    s.presence_penalty = ranged_float(f, kPresencePenalty, -2.0f, 2.0f, "[-2, 2]");
  if (f.get(kFrequencyPenalty))
    s.frequency_penalty = ranged_float(f, kFrequencyPenalty, -2.0f, 2.0f, "[-2, 2]");
  if (auto e = f.get(kLogitBias)) s.logit_bias = parse_logit_bias(*e);
  if (kind == ApiKind::chat) {
    if (auto e = f.get(kLogprobs)) r.logprobs = get_bool(*e, "logprobs");
    if (auto e = f.get(kTopLogprobs)) {
      r.top_logprobs = int(get_int(*e, "top_logprobs", 0, kMaxTopLogprobs));
      if (!r.logprobs) bad("top_logprobs", "needs \"logprobs\": true");
    }
  } else {
    if (auto e = f.get(kLogprobs)) {
      r.top_logprobs = int(get_int(*e, "logprobs", 0, kMaxTopLogprobs));
      r.logprobs = true;
    }
    if (auto e = f.get(kEcho); e && get_bool(*e, "echo"))
      unsupported("echo", "echoed prompts (echo: true)");
    if (auto e = f.get(kSuffix); e && !get_string(*e, "suffix").empty())
      unsupported("suffix", "suffixes");
    if (auto e = f.get(kBestOf); e && get_int(*e, "best_of", 1, kMaxChoices) != r.n)
      unsupported("best_of", "best_of values other than n");
  }
  for (int k : {kTools, kFunctions}) {
    auto e = f.get(k);
    simdjson::dom::array arr;
    if (e && (e->get_array().get(arr) || arr.size() > 0))
      unsupported(f.path(k), "tools and functions");
  }
  if (auto e = f.get(kResponseFormat)) {
    simdjson::dom::object obj;
    if (e->get_object().get(obj)) wrong_type("response_format", "an object", *e);
    KeyFields o(obj, kKeyNames, "response_format.");
    auto t = o.get(kType);
    if (t && get_string(*t, o.path(kType)) != "text")
      unsupported(o.path(kType), "response formats other than \"text\"");
  }
  return r;
}

}  // namespace

OpenAiParse parse_openai_request(ApiKind kind, std::string_view body,
                                 const ProtocolLimits& limits) {
  if (body.size() > limits.max_frame_bytes)
    return ApiError{413, "invalid_request_error",
                    "the body of " + std::to_string(body.size()) + " bytes exceeds the limit of " +
                        std::to_string(limits.max_frame_bytes) + " bytes",
                    "", "too_large"};
  try {
    KeyFields f(parse_json_object(body), kKeyNames);
    return parse_request(kind, f, limits);
  } catch (FieldError& e) {
    return ApiError{400, "invalid_request_error", std::move(e.message), std::move(e.field),
                    std::string(to_string(e.code))};
  }
}

std::vector<GenerateRequest> to_generate_requests(const OpenAiRequest& r,
                                                  const ProtocolLimits& limits) {
  GenerateRequest g;
  if (r.kind == ApiKind::chat) g.messages = r.messages;
  if (r.max_tokens) {
    g.max_tokens = *r.max_tokens;
  } else if (r.kind == ApiKind::completion) {
    g.max_tokens = std::min(kDefaultCompletionTokens, limits.max_tokens);
  } else {
    g.max_tokens = limits.max_tokens;
    g.fit_max_tokens = true;
  }
  g.sampling = r.sampling;
  g.stop = r.stop;
  g.ignore_eos = r.ignore_eos;
  g.timeout_ms = r.timeout_ms;
  g.n = r.n;
  g.logprobs = r.logprobs ? r.top_logprobs : -1;
  std::vector<GenerateRequest> out;
  if (r.kind == ApiKind::chat) {
    g.id = "0";
    out.push_back(std::move(g));
    return out;
  }
  for (std::size_t i = 0; i < r.prompts.size(); ++i) {
    GenerateRequest one = g;
    one.id = std::to_string(i);
    if (r.prompts[i].tokens.empty())
      one.prompt = r.prompts[i].text;
    else
      one.prompt_tokens = r.prompts[i].tokens;
    out.push_back(std::move(one));
  }
  return out;
}

ApiError api_error_of(const ErrorFrame& e) {
  ApiError a;
  a.message = e.message;
  a.code = std::string(to_string(e.code));
  switch (e.code) {
    case ErrorCode::overloaded:
      a.status = 503;
      a.type = "server_error";
      break;
    case ErrorCode::internal:
    case ErrorCode::slow_consumer:
      a.status = 500;
      a.type = "server_error";
      break;
    case ErrorCode::too_large: a.status = 413; break;
    case ErrorCode::timeout:  // the request's own time bound, or the server's, ran out
      a.status = 408;
      a.type = "timeout_error";
      break;
    default: a.status = 400; break;
  }
  if (const auto colon = e.message.find(": ");
      e.code == ErrorCode::bad_value && colon != std::string::npos && e.message.find(' ') > colon)
    a.param = e.message.substr(0, colon);
  return a;
}

}  // namespace rz::proto
