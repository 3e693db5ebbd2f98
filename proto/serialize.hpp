// Writers for the protocol's frames as JSON text: the server's frames (token, done, error, pong),
// which net/ sends as WebSocket text frames, and the client's requests (generate, cancel, ping),
// for test clients and benchmarks. Every output is valid JSON whatever the strings hold: text
// that is not valid UTF-8 has its bad bytes replaced with U+FFFD (see json_writer.hpp).
#pragma once
#include <string>

#include "proto/messages.hpp"

namespace rz::proto {

// Server -> client. Keys are written in this order:
//   token: type, id, choice (n > 1 only), text, tokens, index, logprobs (when asked:
//          [{token, text, bytes, logprob, top_logprobs: [{token, text, bytes, logprob}]}])
//   done:  type, id, choice (n > 1 only), finish_reason, usage{prompt_tokens,
//          completion_tokens, cached_tokens}, timings{ttft_ms, total_ms}  (times with 1-3
//          decimals; ttft_ms null when absent)
//   error: type, id (left out when absent), choice (one choice's failure), code, message
//   pong:  type
void append_json(std::string& out, const TokenFrame& f);
void append_json(std::string& out, const DoneFrame& f);
void append_json(std::string& out, const ErrorFrame& f);
void append_json(std::string& out, const PongFrame& f);
void append_json(std::string& out, const ServerFrame& f);

// Client -> server. A generate request is written with every field (defaults included) except
// an absent seed; `prompt` or `messages`, whichever the request uses. No validation is done:
// an out-of-range value is written as it is (a NaN or infinite float as null).
void append_json(std::string& out, const GenerateRequest& r);
void append_json(std::string& out, const CancelRequest& r);
void append_json(std::string& out, const PingRequest& r);
void append_json(std::string& out, const ClientMessage& m);

template <class T>
std::string to_json(const T& v) {
  std::string out;
  append_json(out, v);
  return out;
}

}  // namespace rz::proto
