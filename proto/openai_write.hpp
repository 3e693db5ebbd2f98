// JSON of the OpenAI-compatible API's answers (see proto/openai.hpp): whole responses
// (chat.completion, text_completion), streamed chunks as server-sent events, the model list and
// the error shape. Every string goes through append_json_string, so the output is valid JSON
// whatever the model generated.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "proto/openai.hpp"

namespace rz::proto {

// What every chunk and response of one request repeats.
struct ResponseMeta {
  ApiKind kind = ApiKind::chat;
  std::string id;       // "chatcmpl-..." / "cmpl-..."
  int64_t created = 0;  // Unix seconds
  std::string model;    // the served model's name
};

struct ApiUsage {
  uint64_t prompt_tokens = 0;
  uint64_t completion_tokens = 0;
  uint64_t cached_tokens = 0;  // prompt_tokens_details.cached_tokens
};

// The log-probabilities of some tokens of one choice (a chunk's or the whole choice's), for
// requests that asked for them. Chat writes {"content":[{token, logprob, bytes, top_logprobs}],
// "refusal":null}; completions {"tokens", "token_logprobs", "top_logprobs" (one {text: logprob}
// object per token), "text_offset"}, the offsets counted in characters from text_offset, where
// these tokens start in the choice's text. -inf is written as -9999.0.
struct LogprobsPart {
  const std::vector<TokenLogprob>* items = nullptr;
  uint64_t text_offset = 0;
};

struct ChoiceResult {
  std::string text;
  std::string finish_reason;                          // "stop", "length", ...
  std::optional<std::vector<TokenLogprob>> logprobs;  // when asked for
};

// {"error":{"message":...,"type":...,"param":...|null,"code":...|null}}
std::string error_json(const ApiError& e);

// One server-sent event: "data: " + json + "\n\n".
void append_sse(std::string& out, std::string_view json);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

// A streamed chunk of choice `index`. Chat: delta {role?, content?}; completions: text (content,
// "" when absent; role unused). finish_reason null when absent. with_usage_null: add
// "usage":null (stream_options.include_usage asks for it on every chunk but the last).
// logprobs: the chunk's tokens' (null when not given).
std::string chunk_json(const ResponseMeta& m, int index, std::optional<std::string_view> role,
                       std::optional<std::string_view> content,
                       std::optional<std::string_view> finish_reason, bool with_usage_null,
                       const LogprobsPart& logprobs = {});
// The last chunk of stream_options.include_usage: no choices, the usage.
std::string usage_chunk_json(const ResponseMeta& m, const ApiUsage& u);

// The whole response of stream: false.
std::string response_json(const ResponseMeta& m, const std::vector<ChoiceResult>& choices,
                          const ApiUsage& u);

// GET /v1/models: the list of one model.
std::string models_json(std::string_view model, int64_t created);
// GET /v1/models/{model}: the model object itself.
std::string model_json(std::string_view model, int64_t created);

}  // namespace rz::proto
