// One request of the OpenAI-compatible API, from the engine's frames to the bytes of the HTTP
// response, as a pure state machine (no sockets: net/http_session.cpp writes what it returns, and
// tests feed it frames directly). The request is one engine request per prompt (ids "0", "1",
// ...; chat: one) whose n choices come back as frames numbered by `choice`; prompt p's choice c
// is the response's choice p * n + c.
//
//   stream: false  frames ─▶ text per choice ─(all done)─▶ 200 + one JSON body
//   stream: true   first token/done ─▶ 200 head (text/event-stream) + role chunks
//                  token ─▶ content chunk    done ─▶ finish chunk    all done ─▶ [usage] [DONE]
//   error frame    before the head: its HTTP status + the error JSON; after it: an error event,
//                  then [DONE]. Either way the response ends (the caller cancels the rest).
//   timeout error of one choice (n > 1): that choice ends with finish_reason "timeout" and no
//                  text, like a done frame; only when every choice timed out so before the head
//                  went out is it the error (408).
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "proto/messages.hpp"
#include "proto/openai.hpp"
#include "proto/openai_write.hpp"

namespace rz::net {

class OpenAiExchange {
 public:
  OpenAiExchange(proto::OpenAiRequest req, proto::ResponseMeta meta);

  const proto::OpenAiRequest& request() const { return req_; }
  bool streaming() const { return req_.stream; }

  struct Output {
    int status = 0;             // > 0: the response's head goes out first (once per exchange)
    std::string content_type;   // with the head
    bool event_stream = false;  // the head starts a server-sent-event stream (chunked body)
    std::string body;           // the whole body, or the next events of the stream
    bool end = false;           // the response is complete with these bytes
  };
  // One frame of the engine session; frames after the end are ignored (empty Output).
  Output on_frame(const proto::ServerFrame& f);
  bool ended() const { return ended_; }

 private:
  struct Choice {
    std::string text;
    std::optional<std::string> finish_reason;
    std::vector<proto::TokenLogprob> logprobs;  // (stream: false) when asked for
    uint64_t text_offset = 0;                   // characters of the logprobs' tokens so far
  };
  // The response's choice of a frame (prompt p's choice c is p * n + c); -1: not one of ours.
  int choice_of(std::string_view id, const std::optional<int>& choice) const;
  int prompt_of(std::string_view id) const;  // the request id "p" -> p; -1: not one of ours
  int total() const;                         // choices of all the prompts
  void start_stream(Output& out);
  Output on_error(const proto::ErrorFrame& e);
  // Choice i ended with `reason` (done frame, or a choice's timeout error).
  void end_choice(Output& out, int i, std::string reason);
  void finish(Output& out);

  proto::OpenAiRequest req_;
  proto::ResponseMeta meta_;
  std::vector<Choice> choices_;
  struct PromptUsage {
    uint64_t prompt_tokens = 0;
    uint64_t cached_tokens = 0;
    bool set = false;
  };
  std::vector<PromptUsage> prompts_;  // per prompt (chat: one): its tokens, as usage counts them
  proto::ApiUsage usage_;
  int done_ = 0;
  int timed_out_empty_ = 0;  // choices ended by a timeout error (no token)
  bool head_sent_ = false;
  bool ended_ = false;
};

}  // namespace rz::net
