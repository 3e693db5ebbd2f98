// Parsing of a client's WebSocket text frame into a typed request (proto/messages.hpp), with
// every field's type and range checked here, at the edge. Uses simdjson's DOM API (which checks
// the whole frame, UTF-8 included, before anything is read from it).
#pragma once
#include <cstddef>
#include <string_view>
#include <variant>

#include "proto/messages.hpp"

namespace rz::proto {

// Bounds on what one frame may ask for; the server may tighten them (max_tokens from the
// model's context length, for one). docs/protocol.md lists the defaults.
struct ProtocolLimits {
  std::size_t max_frame_bytes = 1 << 20;  // longer frames get too_large without being parsed
  std::size_t max_id_bytes = 128;         // "id" length in bytes
  int max_tokens = 4096;                  // upper bound of "max_tokens" (its default is capped too)
  std::size_t max_stop = 8;               // number of stop strings
  std::size_t max_stop_bytes = 128;       // length of one stop string in bytes
  std::size_t max_messages = 256;         // number of chat messages
};

// Either a request or the error to send back. The error's id is set whenever the frame is a JSON
// object whose "id" is a valid id (a non-empty string within max_id_bytes, given once), even if
// something else in the frame is wrong, so that the error can be tied to the request.
using ParseResult = std::variant<GenerateRequest, CancelRequest, PingRequest, ProtocolError>;

// Never throws for any input (allocation failure aside). The codes it can produce: too_large,
// bad_json, unknown_type, missing_field, bad_value.
ParseResult parse_client_message(std::string_view frame, const ProtocolLimits& limits = {});

inline bool is_error(const ParseResult& r) { return std::holds_alternative<ProtocolError>(r); }

}  // namespace rz::proto
