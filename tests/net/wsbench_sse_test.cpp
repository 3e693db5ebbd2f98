// Tests of bench/wsbench_sse.hpp, rz-wsbench's reading of OpenAI streams (--api openai): the
// server-sent-event framing (any split of the bytes across reads, CRLF/CR/LF, comments,
// multi-line data), the reading of chunks, [DONE], error events and the usage chunk as the
// server's own writers (proto/openai_write.hpp) make them, and whole streams made by the server's
// own net::OpenAiExchange from engine frames, for requests written by openai_request_json and
// read back by the server's parser: token counts from the usage, held-back text, errors before
// and after the first token.
#include "bench/wsbench_sse.hpp"

#include <gtest/gtest.h>

#include <string>
#include <variant>
#include <vector>

#include "bench/wsbench_workload.hpp"
#include "net/openai_exchange.hpp"
#include "proto/openai.hpp"
#include "proto/openai_write.hpp"

namespace rz::wsbench {
namespace {

std::vector<std::string> events_of(const std::vector<std::string>& reads) {
  SseParser p;
  std::vector<std::string> events;
  for (const std::string& r : reads) p.feed(r, [&](std::string_view e) { events.emplace_back(e); });
  return events;
}

// Every split of `body` into two reads, and one read per byte, give `want`.
void expect_any_split(const std::string& body, const std::vector<std::string>& want) {
  EXPECT_EQ(events_of({body}), want) << body;
  for (std::size_t cut = 0; cut <= body.size(); ++cut)
    EXPECT_EQ(events_of({body.substr(0, cut), body.substr(cut)}), want) << "cut at " << cut;
  std::vector<std::string> bytes;
  for (char c : body) bytes.emplace_back(1, c);
  EXPECT_EQ(events_of(bytes), want);
}

TEST(WsbenchSse, EventsWhateverTheReads) {
  expect_any_split("data: {\"a\":1}\n\ndata: [DONE]\n\n", {"{\"a\":1}", "[DONE]"});
  // CRLF, CR and LF line ends, mixed; a CRLF split between reads is one line end
  expect_any_split("data: x\r\n\r\ndata: y\r\rdata: z\n\n", {"x", "y", "z"});
  expect_any_split("data: a\r\ndata: b\r\n\r\n", {"a\nb"});
  // several data lines join with newlines; no space after the colon; comments and other fields
  expect_any_split(": keep-alive\nevent: message\nid: 7\ndata:one\ndata: two\nretry: 5\n\n",
                   {"one\ntwo"});
  // only one space is dropped; "data" without a colon is an empty line of data
  expect_any_split("data:  two spaces\n\ndata\n\n", {" two spaces", ""});
  // an event without data is no event; a byte order mark may open the stream
  expect_any_split("\xEF\xBB\xBFid: 1\n\ndata: after\n\n", {"after"});
}

TEST(WsbenchSse, PendingUntilTheEmptyLine) {
  SseParser p;
  std::vector<std::string> events;
  auto on = [&](std::string_view e) { events.emplace_back(e); };
  EXPECT_FALSE(p.pending());
  p.feed("data: {\"x\"", on);
  EXPECT_TRUE(p.pending());
  p.feed(":1}\n", on);
  EXPECT_TRUE(p.pending());  // the event has data but no empty line yet
  EXPECT_TRUE(events.empty());
  p.feed("\n", on);
  EXPECT_FALSE(p.pending());
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0], "{\"x\":1}");
  EXPECT_FALSE(p.overflowed());
}

OpenAiEvent read_event(const std::string& data) {
  simdjson::dom::parser parser;
  OpenAiEvent e;
  std::string why;
  EXPECT_TRUE(parse_openai_event(parser, data, e, why)) << why << ": " << data;
  return e;
}

std::string why_not(const std::string& data) {
  simdjson::dom::parser parser;
  OpenAiEvent e;
  std::string why;
  EXPECT_FALSE(parse_openai_event(parser, data, e, why)) << data;
  return why;
}

// (Messages are built field by field, so that fields added to them later keep their defaults.)
proto::ResponseMeta meta(proto::ApiKind kind, std::string id) {
  proto::ResponseMeta m;
  m.kind = kind;
  m.id = std::move(id);
  m.created = 1700000000;
  m.model = "m";
  return m;
}

TEST(WsbenchSse, ReadsTheServersChunks) {
  const proto::ResponseMeta chat = meta(proto::ApiKind::chat, "chatcmpl-1");
  const proto::ResponseMeta text = meta(proto::ApiKind::completion, "cmpl-1");

  // chat: the opening role chunk has empty content: no token
  OpenAiEvent e = read_event(proto::chunk_json(chat, 0, "assistant", "", std::nullopt, true));
  EXPECT_EQ(e.kind, OpenAiEvent::Kind::chunk);
  EXPECT_FALSE(e.content);
  EXPECT_FALSE(e.finish_reason.has_value());
  EXPECT_FALSE(e.has_usage);  // "usage": null
  e = read_event(proto::chunk_json(chat, 0, std::nullopt, "Hel\"lo\n", std::nullopt, true));
  EXPECT_TRUE(e.content);
  e = read_event(proto::chunk_json(chat, 0, std::nullopt, std::nullopt, "length", false));
  EXPECT_FALSE(e.content);
  EXPECT_EQ(e.finish_reason, "length");

  // completions: text chunks, and the finish chunk's text is ""
  e = read_event(proto::chunk_json(text, 0, std::nullopt, "abc", std::nullopt, false));
  EXPECT_TRUE(e.content);
  e = read_event(proto::chunk_json(text, 0, std::nullopt, "", "stop", true));
  EXPECT_FALSE(e.content);
  EXPECT_EQ(e.finish_reason, "stop");

  // the usage chunk: no choices
  proto::ApiUsage usage;
  usage.prompt_tokens = 17;
  usage.completion_tokens = 64;
  usage.cached_tokens = 3;
  e = read_event(proto::usage_chunk_json(text, usage));
  EXPECT_EQ(e.kind, OpenAiEvent::Kind::chunk);
  EXPECT_TRUE(e.has_usage);
  EXPECT_EQ(e.prompt_tokens, 17u);
  EXPECT_EQ(e.completion_tokens, 64u);
  EXPECT_FALSE(e.content);

  e = read_event("[DONE]");
  EXPECT_EQ(e.kind, OpenAiEvent::Kind::done);

  // errors: the code, else the type
  proto::ApiError a;
  a.status = 503;
  a.type = "server_error";
  a.code = "overloaded";
  a.message = "the queue is full";
  e = read_event(proto::error_json(a));
  EXPECT_EQ(e.kind, OpenAiEvent::Kind::error);
  EXPECT_EQ(e.code, "overloaded");
  EXPECT_EQ(e.message, "the queue is full");
  a.code.clear();
  EXPECT_EQ(read_event(proto::error_json(a)).code, "server_error");
  EXPECT_EQ(read_event("{\"error\":{}}").code, "error");
}

TEST(WsbenchSse, RejectsWhatIsNotAnEvent) {
  EXPECT_NE(why_not("{\"choices\":[").find("not JSON"), std::string::npos);
  EXPECT_EQ(why_not("[1]"), "not a JSON object");
  EXPECT_EQ(why_not("{\"id\":\"x\"}"), "chunk without a \"choices\" array");
  EXPECT_EQ(why_not("{\"choices\":[1]}"), "a choice that is not an object");
  EXPECT_EQ(why_not("{\"choices\":[],\"usage\":{\"prompt_tokens\":1}}"),
            "usage without prompt_tokens or completion_tokens");
}

// A server-made stream: the request as rz-wsbench writes it, read by the server's parser, answered
// by the server's exchange from engine frames; the bytes of the body in order.
struct ServerStream {
  std::string body;  // the event-stream body (the chunked encoding's payload)
  int status = 0;    // the head's status
  bool event_stream = false;
  std::vector<std::string> pieces;  // the body as the exchange produced it, one piece per frame
};

ServerStream serve(bool chat, const std::vector<proto::ServerFrame>& frames) {
  Options o = parse_args({"--api", "openai", "--max-tokens", "8", "--prompt-tokens", "4"});
  o.chat = chat;
  const std::string body = openai_request_json(make_request(o, 0));
  const proto::ApiKind kind = chat ? proto::ApiKind::chat : proto::ApiKind::completion;
  proto::OpenAiParse parsed = proto::parse_openai_request(kind, body);
  EXPECT_TRUE(std::holds_alternative<proto::OpenAiRequest>(parsed)) << body;
  net::OpenAiExchange ex(std::get<proto::OpenAiRequest>(parsed),
                         meta(kind, chat ? "chatcmpl-7" : "cmpl-7"));
  EXPECT_TRUE(ex.streaming());
  ServerStream s;
  for (const proto::ServerFrame& f : frames) {
    net::OpenAiExchange::Output out = ex.on_frame(f);
    if (out.status > 0) {
      s.status = out.status;
      s.event_stream = out.event_stream;
    }
    s.body += out.body;
    s.pieces.push_back(out.body);
  }
  EXPECT_TRUE(ex.ended());
  return s;
}

proto::TokenFrame token(std::string text, std::vector<int32_t> ids, uint64_t index) {
  proto::TokenFrame t;
  t.id = "0";
  t.text = std::move(text);
  t.tokens = std::move(ids);
  t.index = index;
  return t;
}

proto::DoneFrame done(proto::FinishReason why, uint64_t prompt, uint64_t completion) {
  proto::DoneFrame d;
  d.id = "0";
  d.finish_reason = why;
  d.usage.prompt_tokens = prompt;
  d.usage.completion_tokens = completion;
  d.timings.ttft_ms = 12.0;
  d.timings.total_ms = 40.0;
  return d;
}

// Feeds the body in pieces, the k-th at time k; returns the outcome at the end (time = pieces).
OpenAiStream::Outcome read_stream(const std::vector<std::string>& pieces) {
  OpenAiStream s;
  for (std::size_t k = 0; k < pieces.size(); ++k) s.feed(pieces[k], double(k));
  return s.finish(double(pieces.size()));
}

TEST(WsbenchSse, AWholeStreamOneTokenPerChunk) {
  for (bool chat : {false, true}) {
    const ServerStream s =
        serve(chat, {token("The", {1}, 0), token(" sea", {2}, 1), token(" is", {3}, 2),
                     done(proto::FinishReason::length, 5, 3)});
    EXPECT_EQ(s.status, 200);
    EXPECT_TRUE(s.event_stream);
    EXPECT_NE(s.body.find("data: [DONE]\n\n"), std::string::npos);
    const OpenAiStream::Outcome o = read_stream(s.pieces);
    EXPECT_TRUE(o.completed) << o.error_code << " " << s.body;
    EXPECT_EQ(o.finish_reason, "length");
    EXPECT_EQ(o.prompt_tokens, 5u);
    EXPECT_EQ(o.completion_tokens, 3u);
    EXPECT_FALSE(o.usage_mismatch);
    EXPECT_EQ(o.violations, 0u);
    // one content chunk per token frame, at the time its piece was read
    ASSERT_EQ(o.frames.size(), 3u) << s.body;
    for (std::size_t k = 0; k < 3; ++k) {
      EXPECT_EQ(o.frames[k].t, double(k));
      EXPECT_EQ(o.frames[k].tokens, 1u);
    }
    EXPECT_EQ(o.t_end, 3.0);  // [DONE] came with the done frame's piece
    const RequestMetrics m = request_metrics(-0.5, o.frames, o.t_end);
    EXPECT_EQ(m.output_tokens, 3u);
    EXPECT_DOUBLE_EQ(m.ttft_ms, 500.0);
    EXPECT_EQ(m.itl_ms, (std::vector<double>{1000.0, 1000.0}));
  }
}

TEST(WsbenchSse, AStreamSplitAnywhereReadsTheSame) {
  const ServerStream s =
      serve(true, {token("a", {1}, 0), token("b", {2}, 1), done(proto::FinishReason::stop, 4, 2)});
  for (std::size_t cut = 0; cut <= s.body.size(); ++cut) {
    const OpenAiStream::Outcome o = read_stream({s.body.substr(0, cut), s.body.substr(cut)});
    ASSERT_TRUE(o.completed) << "cut at " << cut;
    EXPECT_EQ(o.completion_tokens, 2u);
    EXPECT_EQ(o.frames.size(), 2u);
    EXPECT_EQ(o.finish_reason, "stop");
    EXPECT_EQ(o.violations, 0u) << "cut at " << cut;
  }
}

TEST(WsbenchSse, TokensWithHeldBackTextCountWithTheLastContentChunk) {
  // The first token's text is held back (an incomplete UTF-8 sequence, say): no chunk for it,
  // then one chunk with both tokens' text; the usage says 4 tokens in 3 content chunks.
  const ServerStream s =
      serve(false, {token("", {1}, 0), token("\xC3\xA9", {2}, 1), token("x", {3}, 2),
                    token("y", {4}, 3), done(proto::FinishReason::length, 5, 4)});
  const OpenAiStream::Outcome o = read_stream(s.pieces);
  ASSERT_TRUE(o.completed);
  EXPECT_EQ(o.completion_tokens, 4u);
  ASSERT_EQ(o.frames.size(), 3u);
  EXPECT_EQ(o.frames[0].t, 1.0);  // the first piece held no chunk
  EXPECT_EQ(o.frames[0].tokens, 1u);
  EXPECT_EQ(o.frames[2].tokens, 2u);
  const RequestMetrics m = request_metrics(0.0, o.frames, o.t_end);
  EXPECT_EQ(m.output_tokens, 4u);
  EXPECT_EQ(m.itl_ms.size(), 3u);
  EXPECT_EQ(m.itl_ms, (std::vector<double>{1000.0, 500.0, 500.0}));

  // No content at all (every token's text empty): the tokens arrive with the finish chunk.
  const ServerStream none =
      serve(false, {token("", {1}, 0), token("", {2}, 1), done(proto::FinishReason::stop, 5, 2)});
  const OpenAiStream::Outcome n = read_stream(none.pieces);
  ASSERT_TRUE(n.completed);
  ASSERT_EQ(n.frames.size(), 1u);
  EXPECT_EQ(n.frames[0].tokens, 2u);
  EXPECT_EQ(n.frames[0].t, 2.0);
}

TEST(WsbenchSse, AnErrorEventAfterTokensFailsTheRequest) {
  proto::ErrorFrame err;
  err.code = proto::ErrorCode::slow_consumer;
  err.message = "too slow";
  err.id = "0";
  const ServerStream s = serve(true, {token("a", {1}, 0), err});
  EXPECT_EQ(s.status, 200);  // the stream had begun: the error is an event
  const OpenAiStream::Outcome o = read_stream(s.pieces);
  EXPECT_FALSE(o.completed);
  EXPECT_EQ(o.error_code, "slow_consumer");
  EXPECT_EQ(o.error_message, "too slow");
  EXPECT_EQ(o.frames.size(), 1u);
  EXPECT_EQ(o.violations, 0u);  // [DONE] still ends it

  // Before the first token the error is the HTTP answer itself, not a stream.
  const ServerStream early = serve(true, {err});
  EXPECT_FALSE(early.event_stream);
  EXPECT_NE(early.body.find("\"code\":\"slow_consumer\""), std::string::npos) << early.body;
}

TEST(WsbenchSse, BrokenStreams) {
  // No [DONE], no usage: completed (a finish_reason came) with two violations; the tokens are
  // the content chunks'.
  OpenAiStream::Outcome o = read_stream(
      {"data: {\"choices\":[{\"index\":0,\"text\":\"a\",\"finish_reason\":null}]}\n\n",
       "data: {\"choices\":[{\"index\":0,\"text\":\"\",\"finish_reason\":\"stop\"}]}\n\n"});
  EXPECT_TRUE(o.completed);
  EXPECT_EQ(o.completion_tokens, 1u);
  EXPECT_EQ(o.violations, 2u);
  EXPECT_EQ(o.t_end, 2.0);  // the end of the body

  // No finish_reason: not completed; an unreadable event and a cut-off event are violations.
  o = read_stream({"data: {\"choices\":[{\"index\":0,\"text\":\"a\"}]}\n\ndata: nonsense\n\n",
                   "data: [DONE]\n\ndata: {\"cho"});
  EXPECT_FALSE(o.completed);
  EXPECT_EQ(o.error_code, OpenAiStream::kErrBadStream);
  EXPECT_EQ(o.violations, 2u);

  // More content chunks than the usage's tokens: a mismatch.
  o =
      read_stream({"data: {\"choices\":[{\"index\":0,\"text\":\"a\",\"finish_reason\":null}]}\n\n"
                   "data: {\"choices\":[{\"index\":0,\"text\":\"b\",\"finish_reason\":\"stop\"}]}"
                   "\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,"
                   "\"completion_tokens\":1}}\n\ndata: [DONE]\n\n"});
  EXPECT_TRUE(o.completed);
  EXPECT_TRUE(o.usage_mismatch);
  EXPECT_EQ(o.frames.size(), 2u);
  EXPECT_EQ(o.violations, 0u);

  // Anything after [DONE] is a violation.
  o =
      read_stream({"data: {\"choices\":[{\"text\":\"\",\"finish_reason\":\"stop\"}]}\n\n"
                   "data: [DONE]\n\ndata: [DONE]\n\n"});
  EXPECT_EQ(o.violations, 2u);  // the second [DONE], and no usage chunk
}

// The body rz-wsbench posts is the WebSocket request's, field for field, as the server reads it.
TEST(WsbenchSse, OpenAiBodyMirrorsTheWebSocketRequest) {
  for (bool chat : {false, true}) {
    Options o = parse_args({"--api", "openai", "--max-tokens", "5:40", "--prompt-tokens", "3:30",
                            "--temperature", "0.8", "--seed", "9", "--model", "any-model"});
    o.chat = chat;
    for (uint64_t i = 0; i < 20; ++i) {
      const proto::GenerateRequest ws = make_request(o, i);
      const std::string body = openai_request_json(ws, o.model);
      proto::OpenAiParse parsed = proto::parse_openai_request(
          chat ? proto::ApiKind::chat : proto::ApiKind::completion, body);
      ASSERT_TRUE(std::holds_alternative<proto::OpenAiRequest>(parsed)) << body;
      const proto::OpenAiRequest& r = std::get<proto::OpenAiRequest>(parsed);
      EXPECT_TRUE(r.stream);
      EXPECT_TRUE(r.include_usage);
      EXPECT_EQ(r.n, 1);
      EXPECT_EQ(r.model, "any-model");
      const std::vector<proto::GenerateRequest> g = proto::to_generate_requests(r, {});
      ASSERT_EQ(g.size(), 1u);
      EXPECT_EQ(g[0].prompt, ws.prompt);
      ASSERT_EQ(g[0].messages.size(), ws.messages.size());
      for (std::size_t k = 0; k < ws.messages.size(); ++k) {
        EXPECT_EQ(g[0].messages[k].role, ws.messages[k].role);
        EXPECT_EQ(g[0].messages[k].content, ws.messages[k].content);
      }
      EXPECT_EQ(g[0].max_tokens, ws.max_tokens);
      EXPECT_FALSE(g[0].fit_max_tokens);
      EXPECT_EQ(g[0].sampling.temperature, ws.sampling.temperature);
      EXPECT_EQ(g[0].sampling.top_k, ws.sampling.top_k);
      EXPECT_EQ(g[0].sampling.top_p, ws.sampling.top_p);
      EXPECT_EQ(g[0].sampling.min_p, ws.sampling.min_p);
      EXPECT_EQ(g[0].sampling.repetition_penalty, ws.sampling.repetition_penalty);
      EXPECT_EQ(g[0].sampling.seed, ws.sampling.seed);
      EXPECT_EQ(g[0].sampling.presence_penalty, ws.sampling.presence_penalty);
      EXPECT_EQ(g[0].sampling.frequency_penalty, ws.sampling.frequency_penalty);
      EXPECT_EQ(g[0].n, 1);
      EXPECT_EQ(g[0].logprobs, ws.logprobs);
      EXPECT_EQ(g[0].ignore_eos, ws.ignore_eos);
      EXPECT_EQ(g[0].stop, ws.stop);
    }
  }
  // Penalties (not set by the workload today) travel as on the WebSocket.
  Options o2 = parse_args({"--api", "openai"});
  proto::GenerateRequest pen = make_request(o2, 3);
  pen.sampling.presence_penalty = 0.5f;
  pen.sampling.frequency_penalty = -1.25f;
  proto::OpenAiParse parsed =
      proto::parse_openai_request(proto::ApiKind::completion, openai_request_json(pen));
  ASSERT_TRUE(std::holds_alternative<proto::OpenAiRequest>(parsed));
  const std::vector<proto::GenerateRequest> g =
      proto::to_generate_requests(std::get<proto::OpenAiRequest>(parsed), {});
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(g[0].sampling.presence_penalty, 0.5f);
  EXPECT_EQ(g[0].sampling.frequency_penalty, -1.25f);
  // Without --model no "model" is sent.
  Options o = parse_args({"--api", "openai"});
  EXPECT_EQ(openai_request_json(make_request(o, 0)).find("\"model\""), std::string::npos);
}

}  // namespace
}  // namespace rz::wsbench
