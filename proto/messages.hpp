// The WebSocket protocol's typed messages: what a client asks (generate, cancel, ping) and what
// the server answers (token, done, error, pong). proto/parse.cpp turns a client's JSON text frame
// into one of these at the network edge and proto/serialize.cpp writes the server's frames, so
// JSON never travels past net/. docs/protocol.md is the user-facing description of every field.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "tokenizer/chat_template.hpp"  // rz::ChatMessage {role, content} (header-only use)

namespace rz::proto {

// ---- client -> server ---------------------------------------------------------------------------

// Sampling settings of one request. The defaults are the CLI's (rz generate) and are what a
// request gets for every field it leaves out (or sends as null). proto/sampling_params.hpp turns
// this into the executor's rz::SamplingParams (whose own defaults mean "off", not these).
struct Sampling {
  float temperature = 0.7f;         // >= 0, finite; 0: greedy
  int top_k = 40;                   // >= 0; 0: off
  float top_p = 0.95f;              // (0, 1]; 1: off
  float min_p = 0.05f;              // [0, 1]; 0: off
  float repetition_penalty = 1.0f;  // > 0, finite; 1: off
  std::optional<uint64_t> seed;     // absent: the server draws a random seed
  float presence_penalty = 0.0f;    // [-2, 2]; 0: off (OpenAI's; over the generated tokens)
  float frequency_penalty = 0.0f;   // [-2, 2]; 0: off
  // OpenAI's logit_bias (the HTTP API only): (token id, bias in [-100, 100]) sorted by id, each
  // id once, at most kMaxLogitBiasEntries; the session refuses ids outside the vocabulary.
  std::vector<std::pair<int32_t, float>> logit_bias{};
};
inline constexpr int kMaxLogitBiasEntries = 1024;  // rz::kMaxLogitBias

inline constexpr int kDefaultMaxTokens = 256;
inline constexpr int kMaxChoices = 16;      // "n" at most
inline constexpr int kMaxTopLogprobs = 20;  // "logprobs" at most (rz::kMaxLogprobs)

// {"type":"generate", ...}. Exactly one of `prompt` / `messages` was given: `prompt` is raw text
// (encoded as is), `messages` goes through the model's chat template.
struct GenerateRequest {
  std::string id;                      // non-empty, unique among the connection's live requests
  std::optional<std::string> prompt;   // non-empty when present
  std::vector<ChatMessage> messages;   // non-empty when prompt is absent
  int max_tokens = kDefaultMaxTokens;  // [1, ProtocolLimits::max_tokens]
  Sampling sampling;
  std::vector<std::string> stop;  // stop strings; each non-empty
  bool ignore_eos = false;        // true: keep going past the end-of-sequence token
  // Choices: n independent generations of the prompt, numbered 0..n-1 in their frames. With a
  // seed s, choice i samples with seed s + i.
  int n = 1;  // [1, kMaxChoices]
  // < 0: no log-probabilities; k in [0, kMaxTopLogprobs]: each token's, with the k most likely.
  int logprobs = -1;
  // A bound on the request's wall time from its arrival, in milliseconds; 0: none (the server's
  // --request-timeout still applies, and the smaller of the two wins). Past it the request ends
  // with finish_reason "timeout", keeping the tokens it was sent, or, when no token was sent yet,
  // with an error of code timeout.
  uint32_t timeout_ms = 0;
  // Not on the wire: max_tokens is only an upper bound, lowered to what the context leaves after
  // the prompt (the HTTP API's chat requests without max_tokens).
  bool fit_max_tokens = false;
  // Not on the wire: the prompt as token ids (the HTTP API's token-array prompts), taken as they
  // are (no BOS added); non-empty instead of prompt and messages.
  std::vector<int32_t> prompt_tokens;

  bool is_chat() const { return !prompt.has_value() && prompt_tokens.empty(); }
};

// {"type":"cancel","id":"r1"}
struct CancelRequest {
  std::string id;
};

// {"type":"ping"}
struct PingRequest {};

using ClientMessage = std::variant<GenerateRequest, CancelRequest, PingRequest>;

// ---- server -> client ---------------------------------------------------------------------------

enum class ErrorCode {
  bad_json,                 // the frame is not JSON, not a JSON object, or repeats a key it uses
  unknown_type,             // "type" names no known message
  missing_field,            // a required field is absent (or null)
  bad_value,                // a field has the wrong JSON type or is out of range
  duplicate_id,             // a generate reuses the id of a request still running on this
                            // connection (that request goes on)
  unknown_id,               // a cancel names no running request of this connection
  too_large,                // the frame is longer than ProtocolLimits::max_frame_bytes
  context_length_exceeded,  // prompt tokens + max_tokens do not fit the model's context
  overloaded,               // the server cannot take the request now (queue or per-connection
                            // limit full)
  slow_consumer,            // the client did not read its frames fast enough; the request ended
  internal,                 // a bug or a failure on the server's side
  timeout,                  // the request's time bound ran out before its first token
};

inline constexpr ErrorCode kAllErrorCodes[] = {
    ErrorCode::bad_json,      ErrorCode::unknown_type,
    ErrorCode::missing_field, ErrorCode::bad_value,
    ErrorCode::duplicate_id,  ErrorCode::unknown_id,
    ErrorCode::too_large,     ErrorCode::context_length_exceeded,
    ErrorCode::overloaded,    ErrorCode::slow_consumer,
    ErrorCode::internal,      ErrorCode::timeout,
};

constexpr std::string_view to_string(ErrorCode c) {
  switch (c) {
    case ErrorCode::bad_json: return "bad_json";
    case ErrorCode::unknown_type: return "unknown_type";
    case ErrorCode::missing_field: return "missing_field";
    case ErrorCode::bad_value: return "bad_value";
    case ErrorCode::duplicate_id: return "duplicate_id";
    case ErrorCode::unknown_id: return "unknown_id";
    case ErrorCode::too_large: return "too_large";
    case ErrorCode::context_length_exceeded: return "context_length_exceeded";
    case ErrorCode::overloaded: return "overloaded";
    case ErrorCode::slow_consumer: return "slow_consumer";
    case ErrorCode::internal: return "internal";
    case ErrorCode::timeout: return "timeout";
  }
  return "internal";
}

constexpr std::optional<ErrorCode> error_code_from_string(std::string_view s) {
  for (ErrorCode c : kAllErrorCodes)
    if (to_string(c) == s) return c;
  return std::nullopt;
}

enum class FinishReason {
  stop,       // end-of-sequence token or a stop string
  length,     // max_tokens reached
  cancelled,  // the client cancelled (or closed the connection)
  timeout,    // the request's time bound (timeout_ms, --request-timeout) ran out
};

constexpr std::string_view to_string(FinishReason r) {
  switch (r) {
    case FinishReason::stop: return "stop";
    case FinishReason::length: return "length";
    case FinishReason::cancelled: return "cancelled";
    case FinishReason::timeout: return "timeout";
  }
  return "stop";
}

// One alternative of a token's log-probabilities: the id, its text (the token's bytes, which may
// be part of a UTF-8 sequence) and its log-probability under the model (-inf possible).
struct TopLogprob {
  int32_t token = 0;
  std::string text;
  float logprob = 0.0f;
};
// A generated token's log-probability and the most likely alternatives, best first.
struct TokenLogprob {
  int32_t token = 0;
  std::string text;
  float logprob = 0.0f;
  std::vector<TopLogprob> top;
};

// {"type":"token","id":"r1","text":"Hel","tokens":[9906],"index":0}
// Several tokens may be coalesced into one frame; `index` counts the tokens generated before
// this frame, so the next frame's index is this index + tokens.size(). `text` is the text these
// tokens completed (it can be empty while a UTF-8 sequence or a possible stop string is held back).
struct TokenFrame {
  std::string id;
  std::string text;
  std::vector<int32_t> tokens;
  uint64_t index = 0;
  std::optional<int> choice;           // set when the request has n > 1 choices
  std::vector<TokenLogprob> logprobs;  // one per token when the request asked for them
};

struct Usage {
  uint64_t prompt_tokens = 0;
  uint64_t completion_tokens = 0;
  uint64_t cached_tokens = 0;  // prompt tokens whose KV came from the prefix cache
};

struct Timings {
  std::optional<double> ttft_ms;  // time to first token; absent (null) when none was generated
  double total_ms = 0.0;          // from the request's arrival to its end
};

// {"type":"done","id":"r1","finish_reason":"stop","usage":{...},"timings":{...}}
struct DoneFrame {
  std::string id;
  FinishReason finish_reason = FinishReason::stop;
  Usage usage;
  Timings timings;
  std::optional<int> choice;  // set when the request has n > 1 choices (one done frame each)
};

// {"type":"error","id":"r1","code":"bad_value","message":"..."}; `id` is absent when the error
// cannot be tied to a request (unparseable frame, ping, ...). The parser's ProtocolError is the
// same struct: it becomes the error frame as it is.
struct ErrorFrame {
  ErrorFrame() = default;
  ErrorFrame(ErrorCode c, std::string m, std::optional<std::string> i = std::nullopt,
             std::optional<int> ch = std::nullopt)
      : code(c), message(std::move(m)), id(std::move(i)), choice(ch) {}

  ErrorCode code = ErrorCode::internal;
  std::string message;
  std::optional<std::string> id;
  std::optional<int> choice;  // the one choice of an n > 1 request that failed
};
using ProtocolError = ErrorFrame;

// {"type":"pong"}
struct PongFrame {};

using ServerFrame = std::variant<TokenFrame, DoneFrame, ErrorFrame, PongFrame>;

}  // namespace rz::proto
