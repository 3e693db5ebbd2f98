// rz-wsbench's reading of the server's frames (token, done, error, pong; docs/protocol.md) with
// simdjson's DOM API. Only what the benchmark needs is read: ids, token counts, index, usage,
// finish reason, error code; the token text is not. Header-only
// (tests/net/wsbench_frames_test.cpp feeds it frames written by proto/serialize.cpp).
#pragma once
#include <simdjson.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace rz::wsbench {

struct ServerFrameInfo {
  enum class Kind { token, done, error, pong };
  Kind kind = Kind::pong;
  std::optional<std::string> id;  // absent on pong and on an error not tied to a request
  // token
  uint64_t n_tokens = 0;  // len(tokens)
  uint64_t index = 0;
  // done
  std::string finish_reason;
  uint64_t prompt_tokens = 0;
  uint64_t completion_tokens = 0;
  std::optional<double> server_ttft_ms;  // timings.ttft_ms (null: absent)
  // error
  std::string code;
  std::string message;
};

// Parses `text` as one JSON object (valid until the parser's next parse); false with `why` set
// when it is not JSON or not an object.
inline bool parse_json_object(simdjson::dom::parser& parser, std::string_view text,
                              simdjson::dom::object& obj, std::string& why) {
  simdjson::dom::element doc;
  if (auto err = parser.parse(text.data(), text.size()).get(doc)) {
    why = std::string("not JSON: ") + simdjson::error_message(err);
    return false;
  }
  if (doc.get_object().get(obj)) {
    why = "not a JSON object";
    return false;
  }
  return true;
}

// Reads one text frame. Returns false with `why` set when it is not a frame of the protocol
// (bad JSON, unknown type, a required field missing or of the wrong type).
inline bool parse_server_frame(simdjson::dom::parser& parser, std::string_view text,
                               ServerFrameInfo& out, std::string& why) {
  using namespace simdjson;
  out = ServerFrameInfo{};
  dom::object obj;
  if (!parse_json_object(parser, text, obj, why)) return false;
  std::string_view type;
  if (obj["type"].get_string().get(type)) {
    why = "no string \"type\"";
    return false;
  }
  auto get_str = [&](const char* key, std::string& dst) {
    std::string_view v;
    if (obj[key].get_string().get(v)) return false;
    dst.assign(v);
    return true;
  };
  std::string id;
  const bool has_id = get_str("id", id);
  if (has_id) out.id = std::move(id);

  if (type == "token") {
    out.kind = ServerFrameInfo::Kind::token;
    dom::array tokens;
    if (!has_id || obj["tokens"].get_array().get(tokens) ||
        obj["index"].get_uint64().get(out.index)) {
      why = "token frame without id, tokens or index";
      return false;
    }
    out.n_tokens = tokens.size();
    return true;
  }
  if (type == "done") {
    out.kind = ServerFrameInfo::Kind::done;
    dom::object usage;
    if (!has_id || !get_str("finish_reason", out.finish_reason) ||
        obj["usage"].get_object().get(usage) ||
        usage["prompt_tokens"].get_uint64().get(out.prompt_tokens) ||
        usage["completion_tokens"].get_uint64().get(out.completion_tokens)) {
      why = "done frame without id, finish_reason or usage";
      return false;
    }
    double ttft = 0.0;
    if (!obj.at_pointer("/timings/ttft_ms").get_double().get(ttft)) out.server_ttft_ms = ttft;
    return true;
  }
  if (type == "error") {
    out.kind = ServerFrameInfo::Kind::error;
    if (!get_str("code", out.code)) {
      why = "error frame without code";
      return false;
    }
    get_str("message", out.message);
    return true;
  }
  if (type == "pong") {
    out.kind = ServerFrameInfo::Kind::pong;
    return true;
  }
  why = "unknown frame type '" + std::string(type) + "'";
  return false;
}

}  // namespace rz::wsbench
