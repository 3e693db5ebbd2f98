// rz-wsbench's reading of an OpenAI streamed response (`--api openai`, docs/openai.md): the
// server-sent-events framing of the body (SseParser), the reading of one event's JSON
// (parse_openai_event), and one request's stream from its first body byte to its end
// (OpenAiStream), which turns the events into the same per-request record as the WebSocket's
// frames (FrameArrival's, finish reason, usage) so that both transports are measured alike.
// Header-only and free of networking (tests/net/wsbench_sse_test.cpp).
//
// Token counting. A WebSocket token frame says how many tokens it carries; an OpenAI content
// chunk does not. Each content chunk (a non-empty delta.content / text) carries at least one token
// (the server sends one only for a token frame whose text is non-empty), and the usage chunk
// (stream_options.include_usage) gives the request's completion_tokens. So every content chunk
// counts as one token, and the tokens beyond the number of content chunks (tokens whose text the
// server held back, released with a later chunk) are counted with the last content chunk, or
// with the finish chunk when no content came at all. A request's token count is then exactly
// its usage, and its ITL values still number (tokens - 1) and sum to (last content chunk - first
// content chunk), as on the WebSocket (bench/wsbench_stats.hpp).
#pragma once
#include <simdjson.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "bench/wsbench_frames.hpp"  // parse_json_object
#include "bench/wsbench_stats.hpp"

namespace rz::wsbench {

// Splits a text/event-stream body into events, by the WHATWG HTML rules ("Server-sent events",
// interpreting an event stream): lines end with CRLF, LF or CR; a line "data: X" (one space after
// the colon dropped) appends X and a newline to the event's data; an empty line ends the event,
// which is delivered when it has data (without its last newline); lines starting with ':' are
// comments; other fields (event, id, retry) are read and ignored. Bytes may arrive in any split.
class SseParser {
 public:
  // A line or an event's data beyond this is a broken stream: overflowed() turns true and the
  // bytes are dropped.
  static constexpr std::size_t kMaxEventBytes = 8u << 20;

  // Feeds the next bytes of the body; calls on_event(std::string_view data) for each complete
  // event, in order.
  template <class F>
  void feed(std::string_view bytes, F&& on_event) {
    for (char c : bytes) {
      if (skip_lf_) {
        skip_lf_ = false;
        if (c == '\n') continue;  // the LF of a CRLF
      }
      if (c == '\r' || c == '\n') {
        skip_lf_ = c == '\r';
        end_line(on_event);
        continue;
      }
      if (line_.size() >= kMaxEventBytes) {
        overflowed_ = true;
        continue;
      }
      line_.push_back(c);
    }
  }

  // A partial line or an event that has data but no empty line yet: what the body's end cut off.
  bool pending() const { return !line_.empty() || has_data_; }
  bool overflowed() const { return overflowed_; }

 private:
  template <class F>
  void end_line(F& on_event) {
    std::string_view line(line_);
    if (first_line_) {  // a UTF-8 byte order mark may open the stream
      first_line_ = false;
      if (line.substr(0, 3) == "\xEF\xBB\xBF") line.remove_prefix(3);
    }
    if (line.empty()) {
      if (has_data_) {
        data_.pop_back();  // the newline after the last data line
        on_event(std::string_view(data_));
      }
      data_.clear();
      has_data_ = false;
    } else if (line.front() != ':') {
      const std::size_t colon = line.find(':');
      const std::string_view field = line.substr(0, colon);
      std::string_view value =
          colon == std::string_view::npos ? std::string_view{} : line.substr(colon + 1);
      if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
      if (field == "data") {
        if (data_.size() + value.size() >= kMaxEventBytes) {
          overflowed_ = true;
        } else {
          data_.append(value);
          data_.push_back('\n');
          has_data_ = true;
        }
      }
    }
    line_.clear();
  }

  std::string line_;  // the current line, not yet ended
  std::string data_;  // the current event's data lines, each followed by '\n'
  bool has_data_ = false;
  bool skip_lf_ = false;  // the last byte was CR: an LF right after it ends nothing more
  bool first_line_ = true;
  bool overflowed_ = false;
};

// One event of an OpenAI stream (chat.completion.chunk or text_completion), as far as the
// benchmark needs it.
struct OpenAiEvent {
  enum class Kind { chunk, done, error };
  Kind kind = Kind::chunk;
  // chunk
  bool content = false;                      // a choice carries non-empty text / delta.content
  std::optional<std::string> finish_reason;  // a choice's finish_reason, when not null
  bool has_usage = false;                    // "usage" is an object (not null)
  uint64_t prompt_tokens = 0;
  uint64_t completion_tokens = 0;
  // error: {"error": {"message", "type", "param", "code"}}
  std::string code;  // error.code, else error.type, else "error"
  std::string message;
};

// Reads one event's data: "[DONE]", an error object, or a chunk. Returns false with `why` set when
// it is none of these (bad JSON, no "choices" array in a chunk without usage, ...).
inline bool parse_openai_event(simdjson::dom::parser& parser, std::string_view data,
                               OpenAiEvent& out, std::string& why) {
  using namespace simdjson;
  out = OpenAiEvent{};
  if (data == "[DONE]") {
    out.kind = OpenAiEvent::Kind::done;
    return true;
  }
  dom::object obj;
  if (!parse_json_object(parser, data, obj, why)) return false;
  if (dom::object err; !obj["error"].get_object().get(err)) {
    out.kind = OpenAiEvent::Kind::error;
    std::string_view s;
    if (!err["code"].get_string().get(s) && !s.empty())
      out.code = s;
    else if (!err["type"].get_string().get(s) && !s.empty())
      out.code = s;
    else
      out.code = "error";
    if (!err["message"].get_string().get(s)) out.message = s;
    return true;
  }
  out.kind = OpenAiEvent::Kind::chunk;
  if (dom::object usage; !obj["usage"].get_object().get(usage)) {
    if (usage["prompt_tokens"].get_uint64().get(out.prompt_tokens) ||
        usage["completion_tokens"].get_uint64().get(out.completion_tokens)) {
      why = "usage without prompt_tokens or completion_tokens";
      return false;
    }
    out.has_usage = true;
  }
  dom::array choices;
  if (obj["choices"].get_array().get(choices)) {
    if (out.has_usage) return true;  // some servers leave "choices" out of the usage chunk
    why = "chunk without a \"choices\" array";
    return false;
  }
  for (dom::element choice : choices) {
    dom::object c;
    if (choice.get_object().get(c)) {
      why = "a choice that is not an object";
      return false;
    }
    std::string_view text;
    if (!c["text"].get_string().get(text) && !text.empty()) out.content = true;
    if (!c.at_pointer("/delta/content").get_string().get(text) && !text.empty()) out.content = true;
    if (std::string_view f; !c["finish_reason"].get_string().get(f)) out.finish_reason = f;
  }
  return true;
}

// One streamed response's body, event by event, and what it comes to at its end.
class OpenAiStream {
 public:
  // How the stream ended.
  struct Outcome {
    bool completed = false;            // a finish_reason came and no error
    std::string error_code;            // when not completed: the error event's code, or
                                       // kErrBadStream
    std::string error_message;         // the error event's message
    std::vector<FrameArrival> frames;  // content chunks with their token counts (see the top)
    double t_end = 0.0;                // when [DONE] arrived (else when the body ended)
    std::string finish_reason;         // of a completed stream
    uint64_t prompt_tokens = 0;        // usage.prompt_tokens (0 without a usage chunk)
    uint64_t completion_tokens = 0;    // usage.completion_tokens (without one: the chunks)
    bool usage_mismatch = false;       // more content chunks than usage.completion_tokens
    uint64_t violations = 0;           // unreadable events, no usage chunk, no [DONE], ...
  };

  // Bytes of the body that arrived at time t (seconds, any one clock).
  void feed(std::string_view bytes, double t) {
    sse_.feed(bytes, [&](std::string_view data) { on_event(data, t); });
  }

  bool done() const { return done_; }  // [DONE] came

  // The body ended (cleanly) at time t: the request's outcome.
  Outcome finish(double t) {
    Outcome o;
    o.violations = violations_;
    o.t_end = done_ ? t_done_ : t;
    if (!done_) ++o.violations;  // every stream ends with data: [DONE]
    if (sse_.pending() || sse_.overflowed()) ++o.violations;
    o.frames = std::move(frames_);
    if (error_) {
      o.error_code = error_->code;
      o.error_message = error_->message;
      return o;
    }
    if (!finish_reason_) {
      o.error_code = kErrBadStream;
      o.error_message = "the stream ended without a finish_reason";
      return o;
    }
    o.completed = true;
    o.finish_reason = *finish_reason_;
    const uint64_t chunks = o.frames.size();
    if (!usage_) {
      ++o.violations;  // asked for with stream_options.include_usage
      o.completion_tokens = chunks;
      return o;
    }
    o.prompt_tokens = usage_->prompt_tokens;
    o.completion_tokens = usage_->completion_tokens;
    if (o.completion_tokens < chunks) {
      o.usage_mismatch = true;  // each content chunk carries a token at least
    } else if (o.completion_tokens > chunks) {
      const uint64_t rest = o.completion_tokens - chunks;
      if (o.frames.empty())
        o.frames.push_back(FrameArrival{t_finish_, static_cast<std::size_t>(rest)});
      else
        o.frames.back().tokens += static_cast<std::size_t>(rest);
    }
    return o;
  }

  // A client-made error code: the stream ended without a finish_reason or an error event, or the
  // answer was not a stream at all.
  static constexpr const char* kErrBadStream = "bad_stream";

 private:
  void on_event(std::string_view data, double t) {
    if (done_) {
      ++violations_;  // nothing comes after [DONE]
      return;
    }
    OpenAiEvent e;
    std::string why;
    if (!parse_openai_event(parser_, data, e, why)) {
      ++violations_;
      return;
    }
    switch (e.kind) {
      case OpenAiEvent::Kind::done:
        done_ = true;
        t_done_ = t;
        return;
      case OpenAiEvent::Kind::error:
        if (!error_) error_ = std::move(e);
        return;
      case OpenAiEvent::Kind::chunk: break;
    }
    if (e.content) frames_.push_back(FrameArrival{t, 1});
    if (e.finish_reason && !finish_reason_) {
      finish_reason_ = e.finish_reason;
      t_finish_ = t;
    }
    if (e.has_usage) usage_ = e;
  }

  SseParser sse_;
  simdjson::dom::parser parser_;
  std::vector<FrameArrival> frames_;
  std::optional<std::string> finish_reason_;
  double t_finish_ = 0.0;
  std::optional<OpenAiEvent> usage_;
  std::optional<OpenAiEvent> error_;
  bool done_ = false;
  double t_done_ = 0.0;
  uint64_t violations_ = 0;
};

}  // namespace rz::wsbench
