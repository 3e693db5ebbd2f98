// The OpenAI-compatible HTTP API's requests: `POST /v1/chat/completions` and
// `POST /v1/completions` bodies parsed (simdjson, every field checked here at the edge) into an
// OpenAiRequest, which becomes one GenerateRequest per choice on the same engine as the
// WebSocket protocol; and the API's error shape. proto/openai_write.hpp writes the responses;
// net/openai_exchange.hpp drives one request; docs/openai.md is the user-facing description.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "proto/messages.hpp"
#include "proto/parse.hpp"  // ProtocolLimits

namespace rz::proto {

enum class ApiKind { chat, completion };

inline constexpr int kDefaultCompletionTokens = 16;  // /v1/completions without max_tokens

// One prompt of a completions request: text (tokenized by the server, with the model's BOS) or
// token ids (taken as they are).
struct CompletionPrompt {
  std::string text;
  std::vector<int32_t> tokens;  // non-empty: the prompt is these ids
  bool operator==(const CompletionPrompt&) const = default;
};

struct OpenAiRequest {
  ApiKind kind = ApiKind::chat;
  std::string model;  // as sent; "" when absent (the served model answers)
  // completions: one or more prompts (OpenAI's "prompt": a string, an array of strings, an
  // array of token ids or an array of such arrays), each with its n choices; prompts x n is at
  // most kMaxChoices (each choice is an engine request of the connection's session)
  std::vector<CompletionPrompt> prompts;
  std::vector<ChatMessage> messages;  // chat
  // Absent: 16 for completions; for chat, as many as the context leaves (up to the server's
  // max_tokens limit). max_completion_tokens wins over max_tokens when both are given.
  std::optional<int> max_tokens;
  // OpenAI's defaults: temperature 1, top_p 1, and rz's extensions off (top_k 0, min_p 0,
  // repetition_penalty 1). top_p 0 is taken as top_k 1 (the most likely token only).
  Sampling sampling{1.0f, 0, 1.0f, 0.0f, 1.0f, std::nullopt, 0.0f, 0.0f};
  std::vector<std::string> stop;
  bool ignore_eos = false;
  uint32_t timeout_ms = 0;  // rz's extension: the request's own time bound (0: the server's)
  int n = 1;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  // chat: "logprobs": true and "top_logprobs": K; completions: "logprobs": K.
  bool logprobs = false;
  int top_logprobs = 0;
};

// {"error": {"message", "type", "param", "code"}} with its HTTP status.
struct ApiError {
  int status = 400;
  std::string type = "invalid_request_error";
  std::string message;
  std::string param;  // the offending field's path; "" -> null
  std::string code;   // "" -> null
};

using OpenAiParse = std::variant<OpenAiRequest, ApiError>;

// Never throws for any input (allocation failure aside). Unknown fields are ignored.
OpenAiParse parse_openai_request(ApiKind kind, std::string_view body,
                                 const ProtocolLimits& limits = {});

// The engine requests of an OpenAI request: one GenerateRequest per prompt (chat: one), ids "0",
// "1", ..., each with the n choices (which the session runs as n engine requests; a given seed s
// becomes s + i for choice i) and the log-probabilities asked for. Prompt p's choice i is the
// response's choice p * n + i.
std::vector<GenerateRequest> to_generate_requests(const OpenAiRequest& r,
                                                  const ProtocolLimits& limits);

// The API error for an error frame of the engine (overloaded -> 503, context_length_exceeded ->
// 400 with that code, internal -> 500, ...).
ApiError api_error_of(const ErrorFrame& e);

}  // namespace rz::proto
