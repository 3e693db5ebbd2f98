// Tests of net/openai_exchange.cpp: engine frames in, HTTP response bytes out, for whole and
// streamed responses, several choices, usage, and errors before and after the stream began.
#include "net/openai_exchange.hpp"

#include <gtest/gtest.h>
#include <simdjson.h>

#include <cmath>
#include <string>
#include <vector>

namespace rz::net {
namespace {

proto::OpenAiRequest request(proto::ApiKind kind, int n, bool stream, bool usage = false,
                             int prompts = 1) {
  proto::OpenAiRequest r;
  r.kind = kind;
  if (kind == proto::ApiKind::completion)
    for (int i = 0; i < prompts; ++i) r.prompts.push_back({"p" + std::to_string(i), {}});
  r.n = n;
  r.stream = stream;
  r.include_usage = usage;
  return r;
}

proto::ResponseMeta meta() { return {proto::ApiKind::chat, "id-1", 100, "smol"}; }

// Frames of the exchange's engine request `id` ("0" unless given: the first prompt's); `choice`
// names the choice ("1" -> 1).
proto::TokenFrame token(const std::string& choice, const std::string& text, uint64_t index,
                        const std::string& id = "0") {
  return {id, text, {int32_t(index)}, index, std::stoi(choice), {}};
}

proto::DoneFrame done(const std::string& choice, proto::FinishReason r, uint64_t completion,
                      uint64_t cached = 0, const std::string& id = "0", uint64_t prompt = 7) {
  proto::DoneFrame d;
  d.id = id;
  d.choice = std::stoi(choice);
  d.finish_reason = r;
  d.usage = {prompt, completion, cached};
  return d;
}

// The "data: " payloads of a stream body.
std::vector<std::string> events(const std::string& body) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos < body.size()) {
    EXPECT_EQ(body.compare(pos, 6, "data: "), 0) << body.substr(pos);
    const auto end = body.find("\n\n", pos);
    if (end == std::string::npos) break;
    out.push_back(body.substr(pos + 6, end - pos - 6));
    pos = end + 2;
  }
  return out;
}

TEST(OpenAiExchange, WholeResponseWithTwoChoices) {
  OpenAiExchange ex(request(proto::ApiKind::chat, 2, false), meta());
  EXPECT_EQ(ex.on_frame(token("1", "Ly", 0)).status, 0);
  EXPECT_EQ(ex.on_frame(token("0", "Par", 0)).status, 0);
  EXPECT_EQ(ex.on_frame(token("0", "is", 1)).body, "");
  EXPECT_EQ(ex.on_frame(token("9", "ignored", 0)).status, 0);  // not one of ours
  auto o = ex.on_frame(done("0", proto::FinishReason::stop, 2, 4));
  EXPECT_FALSE(o.end);
  o = ex.on_frame(token("1", "on", 1));
  o = ex.on_frame(done("1", proto::FinishReason::length, 2, 0));
  ASSERT_TRUE(o.end);
  EXPECT_TRUE(ex.ended());
  EXPECT_EQ(o.status, 200);
  EXPECT_FALSE(o.event_stream);
  EXPECT_EQ(o.content_type, "application/json");
  simdjson::dom::parser p;
  simdjson::dom::element e;
  ASSERT_EQ(p.parse(o.body).get(e), simdjson::SUCCESS) << o.body;
  EXPECT_EQ(std::string_view(e["choices"].at(0)["message"]["content"]), "Paris");
  EXPECT_EQ(std::string_view(e["choices"].at(0)["finish_reason"]), "stop");
  EXPECT_EQ(std::string_view(e["choices"].at(1)["message"]["content"]), "Lyon");
  EXPECT_EQ(std::string_view(e["choices"].at(1)["finish_reason"]), "length");
  EXPECT_EQ(uint64_t(e["usage"]["prompt_tokens"]), 7u);  // once, not per choice
  EXPECT_EQ(uint64_t(e["usage"]["completion_tokens"]), 4u);
  EXPECT_EQ(uint64_t(e["usage"]["prompt_tokens_details"]["cached_tokens"]), 4u);  // choice 0's
  EXPECT_EQ(ex.on_frame(token("0", "late", 9)).body, "");  // after the end: nothing
}

// Two prompts of two choices each: prompt p's choice c is the response's choice 2 p + c, each
// prompt's tokens count once (as its choice 0 saw them), and the response ends with the last of
// the four.
TEST(OpenAiExchange, SeveralPromptsNumberTheirChoicesInOrder) {
  OpenAiExchange ex(request(proto::ApiKind::completion, 2, false, false, 2), meta());
  EXPECT_EQ(ex.on_frame(token("1", "d", 0, "1")).status, 0);
  EXPECT_EQ(ex.on_frame(token("0", "a", 0, "0")).status, 0);
  EXPECT_EQ(ex.on_frame(token("0", "c", 0, "1")).status, 0);
  EXPECT_EQ(ex.on_frame(token("1", "b", 0, "0")).status, 0);
  EXPECT_EQ(ex.on_frame(token("0", "x", 0, "2")).body, "");    // no third prompt
  EXPECT_EQ(ex.on_frame(token("2", "x", 0, "1")).body, "");    // no third choice
  EXPECT_EQ(ex.on_frame(token("0", "x", 0, "01x")).body, "");  // not a prompt's id
  EXPECT_FALSE(ex.on_frame(done("1", proto::FinishReason::length, 1, 5, "1", 11)).end);
  EXPECT_FALSE(ex.on_frame(done("0", proto::FinishReason::stop, 1, 0, "1", 11)).end);
  EXPECT_FALSE(ex.on_frame(done("0", proto::FinishReason::stop, 1, 2, "0", 7)).end);
  auto o = ex.on_frame(done("1", proto::FinishReason::length, 1, 7, "0", 7));
  ASSERT_TRUE(o.end);
  EXPECT_EQ(o.status, 200);
  simdjson::dom::parser p;
  simdjson::dom::element e;
  ASSERT_EQ(p.parse(o.body).get(e), simdjson::SUCCESS) << o.body;
  ASSERT_EQ(e["choices"].get_array().value().size(), 4u);
  const char* texts[] = {"a", "b", "c", "d"};
  const char* reasons[] = {"stop", "length", "stop", "length"};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(int64_t(e["choices"].at(i)["index"]), i);
    EXPECT_EQ(std::string_view(e["choices"].at(i)["text"]), texts[i]);
    EXPECT_EQ(std::string_view(e["choices"].at(i)["finish_reason"]), reasons[i]);
  }
  EXPECT_EQ(uint64_t(e["usage"]["prompt_tokens"]), 18u);  // 7 + 11: each prompt once
  EXPECT_EQ(uint64_t(e["usage"]["completion_tokens"]), 4u);
  EXPECT_EQ(uint64_t(e["usage"]["prompt_tokens_details"]["cached_tokens"]), 2u);  // 2 + 0
}

// Streamed, two prompts: the chunks carry the global choice index.
TEST(OpenAiExchange, SeveralPromptsStreamed) {
  OpenAiExchange ex(request(proto::ApiKind::completion, 1, true, true, 2), meta());
  auto o = ex.on_frame(token("0", "second", 0, "1"));
  auto ev = events(o.body);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_NE(ev[0].find("\"index\":1"), std::string::npos) << ev[0];
  EXPECT_FALSE(ex.on_frame(done("0", proto::FinishReason::stop, 1, 0, "1", 3)).end);
  o = ex.on_frame(token("0", "first", 0, "0"));
  ev = events(o.body);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_NE(ev[0].find("\"index\":0"), std::string::npos) << ev[0];
  o = ex.on_frame(done("0", proto::FinishReason::stop, 1, 0, "0", 4));
  ASSERT_TRUE(o.end);
  ev = events(o.body);
  ASSERT_EQ(ev.size(), 3u);  // finish chunk, usage chunk, [DONE]
  simdjson::dom::parser p;
  simdjson::dom::element e;
  ASSERT_EQ(p.parse(ev[1]).get(e), simdjson::SUCCESS) << ev[1];
  EXPECT_EQ(uint64_t(e["usage"]["prompt_tokens"]), 7u);
  EXPECT_EQ(ev[2], "[DONE]");
}

TEST(OpenAiExchange, StreamedChatWithUsage) {
  OpenAiExchange ex(request(proto::ApiKind::chat, 1, true, true), meta());
  auto o = ex.on_frame(token("0", "", 0));  // text held back: the head and role chunk only
  EXPECT_EQ(o.status, 200);
  EXPECT_TRUE(o.event_stream);
  EXPECT_EQ(o.content_type, "text/event-stream");
  auto ev = events(o.body);
  ASSERT_EQ(ev.size(), 1u);
  simdjson::dom::parser p;
  simdjson::dom::element e;
  ASSERT_EQ(p.parse(ev[0]).get(e), simdjson::SUCCESS);
  EXPECT_EQ(std::string_view(e["choices"].at(0)["delta"]["role"]), "assistant");
  EXPECT_TRUE(e["usage"].is_null());

  o = ex.on_frame(token("0", "Hi", 1));
  EXPECT_EQ(o.status, 0);  // the head went out once
  ev = events(o.body);
  ASSERT_EQ(ev.size(), 1u);
  ASSERT_EQ(p.parse(ev[0]).get(e), simdjson::SUCCESS);
  EXPECT_EQ(std::string_view(e["choices"].at(0)["delta"]["content"]), "Hi");

  o = ex.on_frame(done("0", proto::FinishReason::stop, 2, 3));
  EXPECT_TRUE(o.end);
  ev = events(o.body);
  ASSERT_EQ(ev.size(), 3u);  // finish chunk, usage chunk, [DONE]
  ASSERT_EQ(p.parse(ev[0]).get(e), simdjson::SUCCESS);
  EXPECT_EQ(std::string_view(e["choices"].at(0)["finish_reason"]), "stop");
  ASSERT_EQ(p.parse(ev[1]).get(e), simdjson::SUCCESS);
  EXPECT_EQ(e["choices"].get_array().value().size(), 0u);
  EXPECT_EQ(uint64_t(e["usage"]["total_tokens"]), 9u);
  EXPECT_EQ(ev[2], "[DONE]");
}

TEST(OpenAiExchange, StreamedCompletionsHaveNoRoleChunk) {
  OpenAiExchange ex(request(proto::ApiKind::completion, 1, true), meta());
  auto o = ex.on_frame(token("0", "abc", 0));
  auto ev = events(o.body);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_NE(ev[0].find("\"text\":\"abc\""), std::string::npos) << ev[0];
  EXPECT_NE(ev[0].find("\"object\":\"text_completion\""), std::string::npos) << ev[0];
  o = ex.on_frame(done("0", proto::FinishReason::length, 1));
  ev = events(o.body);
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_NE(ev[0].find("\"finish_reason\":\"length\""), std::string::npos) << ev[0];
  EXPECT_EQ(ev[1], "[DONE]");
}

TEST(OpenAiExchange, ErrorBeforeTheHeadIsAnHttpError) {
  OpenAiExchange ex(request(proto::ApiKind::chat, 2, true), meta());
  auto o = ex.on_frame(proto::ErrorFrame{proto::ErrorCode::context_length_exceeded,
                                         "the prompt has 9000 tokens", "1"});
  EXPECT_TRUE(o.end);
  EXPECT_EQ(o.status, 400);
  EXPECT_FALSE(o.event_stream);
  EXPECT_NE(o.body.find("\"code\":\"context_length_exceeded\""), std::string::npos) << o.body;
  EXPECT_EQ(ex.on_frame(token("0", "x", 0)).status, 0);
}

TEST(OpenAiExchange, ErrorAfterTheHeadIsAnErrorEvent) {
  OpenAiExchange ex(request(proto::ApiKind::chat, 1, true), meta());
  ex.on_frame(token("0", "x", 0));
  auto o = ex.on_frame(proto::ErrorFrame{proto::ErrorCode::internal, "boom", "0"});
  EXPECT_TRUE(o.end);
  EXPECT_EQ(o.status, 0);
  const auto ev = events(o.body);
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_NE(ev[0].find("\"error\":{"), std::string::npos);
  EXPECT_EQ(ev[1], "[DONE]");
}

// A time bound: a choice that timed out with tokens ends with finish_reason "timeout"; one that
// timed out before its first token (an error frame with its choice) ends the same way with no
// text; only when every choice timed out so before the head is the response an HTTP 408.
TEST(OpenAiExchange, TimeoutsEndChoicesAndOnlyAllOfThemMakeAnError) {
  const proto::ErrorFrame late1{proto::ErrorCode::timeout, "ran out", "0", 1};
  {
    OpenAiExchange ex(request(proto::ApiKind::chat, 2, false), meta());
    ex.on_frame(token("0", "Par", 0));
    EXPECT_FALSE(ex.on_frame(done("0", proto::FinishReason::timeout, 1)).end);
    auto o = ex.on_frame(late1);
    ASSERT_TRUE(o.end);
    EXPECT_EQ(o.status, 200);
    simdjson::dom::parser p;
    simdjson::dom::element e;
    ASSERT_EQ(p.parse(o.body).get(e), simdjson::SUCCESS) << o.body;
    EXPECT_EQ(std::string_view(e["choices"].at(0)["message"]["content"]), "Par");
    EXPECT_EQ(std::string_view(e["choices"].at(0)["finish_reason"]), "timeout");
    EXPECT_EQ(std::string_view(e["choices"].at(1)["message"]["content"]), "");
    EXPECT_EQ(std::string_view(e["choices"].at(1)["finish_reason"]), "timeout");
    EXPECT_EQ(uint64_t(e["usage"]["completion_tokens"]), 1u);
  }
  {
    OpenAiExchange ex(request(proto::ApiKind::completion, 2, true), meta());
    auto o = ex.on_frame(late1);
    EXPECT_FALSE(o.end);
    EXPECT_EQ(o.status, 200);  // the stream began with choice 1's finish chunk
    ASSERT_EQ(events(o.body).size(), 1u);
    EXPECT_NE(o.body.find("\"finish_reason\":\"timeout\""), std::string::npos) << o.body;
    o = ex.on_frame(token("0", "x", 0));
    o = ex.on_frame(done("0", proto::FinishReason::timeout, 1));
    ASSERT_TRUE(o.end);
    const auto ev = events(o.body);
    ASSERT_EQ(ev.size(), 2u);
    EXPECT_NE(ev[0].find("\"finish_reason\":\"timeout\""), std::string::npos) << ev[0];
    EXPECT_EQ(ev[1], "[DONE]");
  }
  {
    OpenAiExchange ex(request(proto::ApiKind::chat, 2, false), meta());
    EXPECT_FALSE(ex.on_frame(late1).end);
    auto o = ex.on_frame(proto::ErrorFrame{proto::ErrorCode::timeout, "ran out", "0", 0});
    ASSERT_TRUE(o.end);
    EXPECT_EQ(o.status, 408);
    EXPECT_NE(o.body.find("\"code\":\"timeout\""), std::string::npos) << o.body;
  }
  {  // n = 1: the error is the response
    OpenAiExchange ex(request(proto::ApiKind::chat, 1, true), meta());
    auto o = ex.on_frame(proto::ErrorFrame{proto::ErrorCode::timeout, "ran out", "0"});
    ASSERT_TRUE(o.end);
    EXPECT_EQ(o.status, 408);
  }
}

// Log-probabilities: chat puts each chunk's tokens under logprobs.content, completions under
// tokens / token_logprobs / top_logprobs / text_offset (offsets running on across chunks); -inf
// becomes -9999.0; a request that asked for none gets null.
TEST(OpenAiExchange, LogprobsInChunksAndWholeResponses) {
  auto frame = [](std::string text, int32_t tok, float lp, uint64_t index) {
    proto::TokenFrame f{"0", text, {tok}, index, std::nullopt, {}};
    f.logprobs.push_back({tok, text, lp, {{tok, text, lp}, {7, "\xE2\x80", -INFINITY}}});
    return f;
  };
  simdjson::dom::parser p;
  simdjson::dom::element e;
  {
    proto::OpenAiRequest r = request(proto::ApiKind::chat, 1, true);
    r.logprobs = true;
    r.top_logprobs = 2;
    OpenAiExchange ex(r, meta());
    auto ev = events(ex.on_frame(frame("Hi", 5, -0.5f, 0)).body);
    ASSERT_EQ(ev.size(), 2u);  // role chunk, then content with its logprobs
    ASSERT_EQ(p.parse(ev[1]).get(e), simdjson::SUCCESS) << ev[1];
    auto c = e["choices"].at(0)["logprobs"]["content"].at(0);
    EXPECT_EQ(std::string_view(c["token"]), "Hi");
    EXPECT_DOUBLE_EQ(double(c["logprob"]), -0.5);
    EXPECT_EQ(c["bytes"].get_array().value().size(), 2u);
    EXPECT_EQ(int64_t(c["top_logprobs"].at(1)["bytes"].at(1)), 0x80);
    EXPECT_DOUBLE_EQ(double(c["top_logprobs"].at(1)["logprob"]), -9999.0);
  }
  {
    proto::OpenAiRequest r = request(proto::ApiKind::completion, 1, false);
    r.logprobs = true;
    r.top_logprobs = 2;
    OpenAiExchange ex(r, meta());
    ex.on_frame(frame("ab", 5, -0.25f, 0));
    ex.on_frame(frame("cd", 6, -1.0f, 1));
    auto o = ex.on_frame(done("0", proto::FinishReason::length, 2));
    ASSERT_TRUE(o.end);
    ASSERT_EQ(p.parse(o.body).get(e), simdjson::SUCCESS) << o.body;
    auto lp = e["choices"].at(0)["logprobs"];
    EXPECT_EQ(std::string_view(lp["tokens"].at(1)), "cd");
    EXPECT_DOUBLE_EQ(double(lp["token_logprobs"].at(0)), -0.25);
    EXPECT_DOUBLE_EQ(double(lp["top_logprobs"].at(1)["cd"]), -1.0);
    EXPECT_EQ(int64_t(lp["text_offset"].at(0)), 0);
    EXPECT_EQ(int64_t(lp["text_offset"].at(1)), 2);
  }
  {
    OpenAiExchange ex(request(proto::ApiKind::chat, 1, false), meta());
    ex.on_frame(token("0", "x", 0));
    auto o = ex.on_frame(done("0", proto::FinishReason::stop, 1));
    ASSERT_EQ(p.parse(o.body).get(e), simdjson::SUCCESS) << o.body;
    EXPECT_TRUE(e["choices"].at(0)["logprobs"].is_null());
  }
}

}  // namespace
}  // namespace rz::net
