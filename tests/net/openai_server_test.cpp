// The OpenAI-compatible API end to end, in process (tests/net/server_fixture.hpp): completions
// and chat, whole and streamed (chunked server-sent events), against the greedy tokens of a
// fresh CPU executor; n seeded choices; usage and cached prompt tokens; /v1/models; the error
// cases with their HTTP statuses (an over-long body's 413 among them); and a client that goes away
// mid-stream or mid-request, whose requests are cancelled (slots and KV blocks back to idle).
#include <gtest/gtest.h>
#include <simdjson.h>

#include "tests/net/server_fixture.hpp"

namespace rz::net {
namespace {

const std::string kPrompt = "The capital of France is";

simdjson::dom::element json(simdjson::dom::parser& p, const std::string& s) {
  simdjson::dom::element e;
  EXPECT_EQ(p.parse(s).get(e), simdjson::SUCCESS) << s;
  return e;
}

class OpenAiServerTest : public ServerTest {};

TEST_F(OpenAiServerTest, CompletionsWholeAndStreamedGiveTheGreedyText) {
  start();
  const std::string ref = greedy_text(kPrompt, 12);
  ASSERT_FALSE(ref.empty());
  const std::string body =
      R"({"model":"any","prompt":"The capital of France is","max_tokens":12,"temperature":0)";
  HttpResult r = http_send(port_, "/v1/completions", body + "}");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.headers.find("Content-Type: application/json"), std::string::npos) << r.headers;
  simdjson::dom::parser p;
  auto e = json(p, r.body);
  EXPECT_EQ(std::string_view(e["object"]), "text_completion");
  EXPECT_EQ(std::string_view(e["model"]), "SmolLM2-135M-Instruct.Q4_1");  // the served model
  EXPECT_EQ(std::string_view(e["id"]).rfind("cmpl-", 0), 0u);
  EXPECT_EQ(std::string_view(e["choices"].at(0)["text"]), ref);
  const std::string finish(std::string_view(e["choices"].at(0)["finish_reason"]));
  EXPECT_TRUE(finish == "length" || finish == "stop") << finish;
  const uint64_t prompt_tokens = tok_->encode(kPrompt, true, true).size();
  EXPECT_EQ(uint64_t(e["usage"]["prompt_tokens"]), prompt_tokens);
  const uint64_t completion = uint64_t(e["usage"]["completion_tokens"]);
  EXPECT_EQ(uint64_t(e["usage"]["total_tokens"]), prompt_tokens + completion);

  r = http_send(port_, "/v1/completions",
                body + R"(,"stream":true,"stream_options":{"include_usage":true}})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.headers.find("Content-Type: text/event-stream"), std::string::npos) << r.headers;
  const auto events = sse_events(r.body);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.back(), "[DONE]");
  std::string text;
  int finishes = 0;
  for (std::size_t i = 0; i + 2 < events.size(); ++i) {
    auto c = json(p, events[i]);
    EXPECT_EQ(std::string_view(c["object"]), "text_completion");
    EXPECT_TRUE(c["usage"].is_null()) << events[i];
    text += std::string_view(c["choices"].at(0)["text"]);
    if (!c["choices"].at(0)["finish_reason"].is_null()) ++finishes;
  }
  EXPECT_EQ(text, ref);
  EXPECT_EQ(finishes, 1);
  auto u = json(p, events[events.size() - 2]);
  EXPECT_EQ(u["choices"].get_array().value().size(), 0u);
  EXPECT_EQ(uint64_t(u["usage"]["completion_tokens"]), completion);

  // A longer prompt twice: the second reuses the first's full KV blocks, and says so.
  std::string longer = "A list of fruit:";
  for (int i = 0; i < 40; ++i) longer += " apple, pear,";
  const std::string lbody = R"({"prompt":")" + longer + R"(","max_tokens":2})";
  ASSERT_EQ(http_send(port_, "/v1/completions", lbody).status, 200);
  r = http_send(port_, "/v1/completions", lbody);
  ASSERT_EQ(r.status, 200) << r.body;
  e = json(p, r.body);
  const uint64_t cached = uint64_t(e["usage"]["prompt_tokens_details"]["cached_tokens"]);
  const uint64_t lprompt = uint64_t(e["usage"]["prompt_tokens"]);
  EXPECT_GT(lprompt, 64u);
  EXPECT_GE(cached + 32, lprompt) << r.body;  // all but the last partial block (or two)
  EXPECT_LT(cached, lprompt);
}

TEST_F(OpenAiServerTest, ChatWholeAndStreamedAndSeededChoices) {
  chat_ = ChatTemplate::from_name("chatml", "", "<|im_end|>");
  start();
  const std::string msgs = R"("messages":[{"role":"system","content":"Be brief."},
      {"role":"user","content":"What is the capital of France?"}])";
  HttpResult r =
      http_send(port_, "/v1/chat/completions", "{" + msgs + R"(,"max_tokens":10,"temperature":0})");
  ASSERT_EQ(r.status, 200) << r.body;
  simdjson::dom::parser p;
  auto e = json(p, r.body);
  EXPECT_EQ(std::string_view(e["object"]), "chat.completion");
  EXPECT_EQ(std::string_view(e["choices"].at(0)["message"]["role"]), "assistant");
  const std::string whole(std::string_view(e["choices"].at(0)["message"]["content"]));
  EXPECT_FALSE(whole.empty());

  r = http_send(port_, "/v1/chat/completions",
                "{" + msgs + R"(,"max_tokens":10,"temperature":0,"stream":true})");
  ASSERT_EQ(r.status, 200) << r.body;
  const auto events = sse_events(r.body);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.back(), "[DONE]");
  auto first = json(p, events[0]);
  EXPECT_EQ(std::string_view(first["choices"].at(0)["delta"]["role"]), "assistant");
  std::string streamed;
  for (std::size_t i = 1; i + 1 < events.size(); ++i) {
    auto c = json(p, events[i]);
    EXPECT_EQ(std::string_view(c["object"]), "chat.completion.chunk");
    std::string_view piece;
    if (!c["choices"].at(0)["delta"]["content"].get_string().get(piece)) streamed += piece;
  }
  EXPECT_EQ(streamed, whole);

  // n choices with a seed: reproducible, and not all the same.
  const std::string seeded =
      "{" + msgs + R"(,"max_tokens":12,"temperature":1.0,"seed":42,"n":3,"ignore_eos":true})";
  const HttpResult a = http_send(port_, "/v1/chat/completions", seeded);
  const HttpResult b = http_send(port_, "/v1/chat/completions", seeded);
  ASSERT_EQ(a.status, 200) << a.body;
  ASSERT_EQ(b.status, 200) << b.body;
  simdjson::dom::parser pa, pb;
  auto ea = json(pa, a.body), eb = json(pb, b.body);
  ASSERT_EQ(ea["choices"].get_array().value().size(), 3u);
  std::vector<std::string> texts;
  for (int i = 0; i < 3; ++i) {
    texts.emplace_back(std::string_view(ea["choices"].at(i)["message"]["content"]));
    EXPECT_EQ(int64_t(ea["choices"].at(i)["index"]), i);
    EXPECT_EQ(texts.back(), std::string_view(eb["choices"].at(i)["message"]["content"]));
    EXPECT_EQ(std::string_view(ea["choices"].at(i)["finish_reason"]), "length");
  }
  EXPECT_FALSE(texts[0] == texts[1] && texts[1] == texts[2]);
  EXPECT_EQ(uint64_t(ea["usage"]["completion_tokens"]), 36u);  // 3 x 12, ignore_eos
}

TEST_F(OpenAiServerTest, ErrorsComeInOpenAisShapeWithTheirStatus) {
  start();  // no chat template
  simdjson::dom::parser p;
  auto check = [&](const HttpResult& r, int status, const char* code, const char* param) {
    EXPECT_EQ(r.status, status) << r.body;
    auto e = json(p, r.body);
    EXPECT_FALSE(std::string_view(e["error"]["message"]).empty()) << r.body;
    EXPECT_FALSE(std::string_view(e["error"]["type"]).empty()) << r.body;
    if (code) {
      EXPECT_EQ(std::string_view(e["error"]["code"]), code) << r.body;
    }
    if (param) {
      EXPECT_EQ(std::string_view(e["error"]["param"]), param) << r.body;
    }
  };
  check(http_send(port_, "/v1/completions", "{nope"), 400, "bad_json", nullptr);
  check(http_send(port_, "/v1/completions", R"({"prompt":"x","n":99})"), 400, "bad_value", "n");
  check(
      http_send(port_, "/v1/chat/completions", R"({"messages":[{"role":"user","content":"hi"}]})"),
      400, "bad_value", "messages");
  // Prompt + max_tokens beyond the context (2048), streamed or not: a 400 before any event.
  std::string long_prompt;
  for (int i = 0; i < 300; ++i) long_prompt += "word ";
  for (const char* stream : {"false", "true"})
    check(http_send(
              port_, "/v1/completions",
              R"({"prompt":")" + long_prompt + R"(","max_tokens":2000,"stream":)" + stream + "}"),
          400, "context_length_exceeded", nullptr);
  // A body over --max-frame-bytes (1 MiB here): 413 too_large, the body read and dropped first
  // (the client's whole write goes through), whether a chunked one or one with its length.
  check(http_send(port_, "/v1/completions", std::string(3 << 20, ' ')), 413, "too_large", nullptr);
  {
    std::string chunked;
    for (int i = 0; i < 40; ++i) chunked += "10000\r\n" + std::string(0x10000, ' ') + "\r\n";
    check(exchange_http(port_,
                        "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                        "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" +
                            chunked + "0\r\n\r\n",
                        "", 60),
          413, "too_large", nullptr);
  }
  const HttpResult get = http_send(port_, "/v1/chat/completions", "", "GET");
  check(get, 405, "method_not_allowed", nullptr);
  EXPECT_NE(get.headers.find("Allow: POST"), std::string::npos) << get.headers;
  check(http_send(port_, "/v1/embeddings", "{}"), 404, "not_found", nullptr);

  const HttpResult models = http_request(port_, "/v1/models");
  ASSERT_EQ(models.status, 200) << models.body;
  auto m = json(p, models.body);
  EXPECT_EQ(std::string_view(m["object"]), "list");
  EXPECT_EQ(std::string_view(m["data"].at(0)["id"]), "SmolLM2-135M-Instruct.Q4_1");
  // Nothing was left running, and the server still serves. (The batcher updates the slot gauge
  // after it routes a request's last events, so the response may go out first: wait for it.)
  EXPECT_TRUE(wait_metric("rz_active_slots", 0, 5s)) << metrics();
  EXPECT_EQ(http_send(port_, "/v1/completions", R"({"prompt":"Hi","max_tokens":2})").status, 200);
}

// logit_bias end to end: +100 on a token makes greedy decoding pick it at every step (the CPU
// executor's sampler), -100 on the greedy first token makes it go; an id outside the vocabulary
// is a 400 naming logit_bias, and so is a malformed map.
TEST_F(OpenAiServerTest, LogitBiasSteersTheTokens) {
  start();
  simdjson::dom::parser p;
  auto text = [&](const std::string& bias) {
    const HttpResult r = http_send(
        port_, "/v1/completions",
        R"({"prompt":"The capital of France is","max_tokens":3,"temperature":0,"logit_bias":)" +
            bias + "}");
    EXPECT_EQ(r.status, 200) << r.body;
    return std::string(std::string_view(json(p, r.body)["choices"].at(0)["text"]));
  };
  const int32_t forced = tok_->encode(" Lyon", false, false).at(0);
  EXPECT_EQ(text("{\"" + std::to_string(forced) + "\":100}"),
            tok_->decode(std::vector<int32_t>(3, forced)));
  const std::vector<int64_t> greedy = direct_greedy(kPrompt, 1);
  ASSERT_EQ(greedy.size(), 1u);
  const std::string first = tok_->decode(std::vector<int32_t>{int32_t(greedy[0])});
  const std::string banned = text("{\"" + std::to_string(greedy[0]) + "\":-100}");
  EXPECT_NE(banned.substr(0, first.size()), first) << banned;

  const std::string out_of_vocab = std::to_string(tok_->n_vocab());
  const HttpResult r = http_send(port_, "/v1/completions",
                                 R"({"prompt":"x","logit_bias":{")" + out_of_vocab + R"(":1}})");
  EXPECT_EQ(r.status, 400) << r.body;
  auto e = json(p, r.body);
  EXPECT_EQ(std::string_view(e["error"]["param"]), "logit_bias") << r.body;
  EXPECT_EQ(std::string_view(e["error"]["code"]), "bad_value") << r.body;
  EXPECT_EQ(http_send(port_, "/v1/completions", R"({"prompt":"x","logit_bias":{"x":1}})").status,
            400);
  EXPECT_TRUE(wait_metric("rz_active_slots", 0, 5s)) << metrics();
}

// Token-id prompts and several prompts in one request (OpenAI's prompt forms): the ids of the
// text prompt give its greedy text, each prompt's choices come in order, usage counts every
// prompt, and an id outside the vocabulary is a 400 naming the prompt.
TEST_F(OpenAiServerTest, TokenPromptsAndSeveralPrompts) {
  start();
  const std::string ref = greedy_text(kPrompt, 6);
  ASSERT_FALSE(ref.empty());
  const std::vector<int32_t> ids = tok_->encode(kPrompt, true, true);  // as the server encodes
  std::string id_list;
  for (int32_t t : ids) id_list += (id_list.empty() ? "" : ",") + std::to_string(t);
  simdjson::dom::parser p;
  HttpResult r = http_send(port_, "/v1/completions",
                           R"({"prompt":[)" + id_list + R"(],"max_tokens":6,"temperature":0})");
  ASSERT_EQ(r.status, 200) << r.body;
  auto e = json(p, r.body);
  EXPECT_EQ(std::string_view(e["choices"].at(0)["text"]), ref);
  EXPECT_EQ(uint64_t(e["usage"]["prompt_tokens"]), ids.size());

  for (const char* stream : {"false", "true"}) {
    SCOPED_TRACE(stream);
    r = http_send(port_, "/v1/completions",
                  R"({"prompt":["The capital of France is",[)" + id_list +
                      R"(],"Paris is"],"max_tokens":6,"temperature":0,"stream":)" + stream + "}");
    ASSERT_EQ(r.status, 200) << r.body;
    std::vector<std::string> texts(3);
    if (std::string(stream) == "false") {
      e = json(p, r.body);
      ASSERT_EQ(e["choices"].get_array().value().size(), 3u) << r.body;
      for (int i = 0; i < 3; ++i) {
        EXPECT_EQ(int64_t(e["choices"].at(i)["index"]), i);
        texts[i] = std::string(std::string_view(e["choices"].at(i)["text"]));
      }
      EXPECT_EQ(uint64_t(e["usage"]["prompt_tokens"]),
                2 * ids.size() + tok_->encode("Paris is", true, true).size());
    } else {
      for (const std::string& ev : sse_events(r.body)) {
        if (ev == "[DONE]") continue;
        auto c = json(p, ev);
        const int64_t i = int64_t(c["choices"].at(0)["index"]);
        ASSERT_TRUE(i >= 0 && i < 3) << ev;
        texts[std::size_t(i)] += std::string_view(c["choices"].at(0)["text"]);
      }
    }
    EXPECT_EQ(texts[0], ref);
    EXPECT_EQ(texts[1], ref);
    EXPECT_EQ(texts[2], greedy_text("Paris is", 6));
  }

  r = http_send(port_, "/v1/completions",
                R"({"prompt":[1,)" + std::to_string(tok_->n_vocab()) + R"(],"max_tokens":2})");
  EXPECT_EQ(r.status, 400) << r.body;
  e = json(p, r.body);
  EXPECT_EQ(std::string_view(e["error"]["param"]), "prompt") << r.body;
  EXPECT_EQ(std::string_view(e["error"]["code"]), "bad_value") << r.body;
  EXPECT_TRUE(wait_metric("rz_active_slots", 0, 5s)) << metrics();
}

// A completions prompt that the client rendered with the chat template runs as the chat request:
// the model's special tokens written in it (<|im_start|>, <|im_end|>) are those tokens, as
// Hugging Face tokenizers and vLLM read them, so the prompt tokens and the greedy text match.
TEST_F(OpenAiServerTest, SpecialTokensInAPromptAreTheTokens) {
  chat_ = ChatTemplate::from_name("chatml", "", "<|im_end|>");
  start();
  simdjson::dom::parser p;
  const std::string q = "What is the capital of France?";
  HttpResult r = http_send(port_, "/v1/chat/completions",
                           R"({"messages":[{"role":"system","content":"Be brief."},)"
                           R"({"role":"user","content":")" +
                               q + R"("}],"max_tokens":8,"temperature":0})");
  ASSERT_EQ(r.status, 200) << r.body;
  auto e = json(p, r.body);
  const std::string chat_text(std::string_view(e["choices"].at(0)["message"]["content"]));
  const uint64_t chat_prompt = uint64_t(e["usage"]["prompt_tokens"]);
  // ChatML as the template renders these messages (tests/tokenizer pin the rendering).
  const std::string rendered = "<|im_start|>system\\nBe brief.<|im_end|>\\n<|im_start|>user\\n" +
                               q + "<|im_end|>\\n<|im_start|>assistant\\n";
  r = http_send(port_, "/v1/completions",
                R"({"prompt":")" + rendered + R"(","max_tokens":8,"temperature":0})");
  ASSERT_EQ(r.status, 200) << r.body;
  e = json(p, r.body);
  EXPECT_EQ(uint64_t(e["usage"]["prompt_tokens"]), chat_prompt);
  EXPECT_EQ(std::string_view(e["choices"].at(0)["text"]), chat_text);
}

// The server's bound (--request-timeout) ends a long completion: finish_reason "timeout" with
// the text so far, or a 408 with code timeout when no token came in time.
TEST_F(OpenAiServerTest, RequestTimeoutEndsALongCompletion) {
  engine::EngineConfig ec;
  ec.request_timeout_ms = 400;
  start({}, ec);
  for (const char* stream : {"false", "true"}) {
    SCOPED_TRACE(stream);
    const HttpResult r = http_send(port_, "/v1/completions",
                                   R"({"prompt":"Once upon a time","max_tokens":1500,)"
                                   R"("ignore_eos":true,"stream":)" +
                                       std::string(stream) + "}");
    simdjson::dom::parser p;
    if (r.status == 408) {
      EXPECT_EQ(std::string_view(json(p, r.body)["error"]["code"]), "timeout") << r.body;
      continue;
    }
    ASSERT_EQ(r.status, 200) << r.body;
    std::string finish;
    if (std::string_view(stream) == "false") {
      auto e = json(p, r.body);
      finish = std::string_view(e["choices"].at(0)["finish_reason"]);
      EXPECT_LT(uint64_t(e["usage"]["completion_tokens"]), 1500u);
    } else {
      const auto events = sse_events(r.body);
      ASSERT_GE(events.size(), 2u);
      EXPECT_EQ(events.back(), "[DONE]");
      auto c = json(p, events[events.size() - 2]);
      finish = std::string_view(c["choices"].at(0)["finish_reason"]);
    }
    EXPECT_EQ(finish, "timeout") << r.body.substr(0, 400);
  }
  EXPECT_TRUE(wait_metric("rz_active_slots", 0, 5s)) << metrics();
  EXPECT_EQ(metric(metrics(), "rz_requests_ended_total{outcome=\"timed_out\"}"), 2);
}

TEST_F(OpenAiServerTest, KeepAliveServesSeveralRequestsOnOneConnection) {
  start();
  const int fd = connect_loopback(port_);
  const std::string body = R"({"prompt":"Hello","max_tokens":3,"temperature":0})";
  const std::string req = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: " +
                          std::to_string(body.size()) + "\r\n\r\n" + body;
  std::string all;
  char buf[4096];
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(::write(fd, req.data(), req.size()), ssize_t(req.size()));
    // Read until this response's body is complete (its Content-Length).
    for (;;) {
      const auto head = all.find("\r\n\r\n");
      if (head != std::string::npos) {
        const auto cl = all.find("Content-Length: ");
        ASSERT_NE(cl, std::string::npos) << all;
        const std::size_t len = std::stoul(all.substr(cl + 16));
        if (all.size() >= head + 4 + len) {
          EXPECT_EQ(all.rfind("HTTP/1.1 200", 0), 0u) << all;
          EXPECT_NE(all.find("\"text_completion\""), std::string::npos) << all;
          all.erase(0, head + 4 + len);
          break;
        }
      }
      const ssize_t n = ::read(fd, buf, sizeof buf);
      ASSERT_GT(n, 0) << "the connection closed after " << i << " responses";
      all.append(buf, std::size_t(n));
    }
  }
  ::close(fd);
}

TEST_F(OpenAiServerTest, ClientGoneMidStreamOrMidRequestCancelsItsRequests) {
  start();
  const std::string body =
      R"({"prompt":"Count:","max_tokens":1500,"temperature":0,"ignore_eos":true,"n":2)";
  // Streaming: read the head and a first event, then drop the connection.
  {
    const int fd = connect_loopback(port_);
    const std::string b = body + R"(,"stream":true})";
    const std::string req =
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(b.size()) +
        "\r\n\r\n" + b;
    ASSERT_EQ(::write(fd, req.data(), req.size()), ssize_t(req.size()));
    std::string got;
    char buf[4096];
    while (got.find("data: ") == std::string::npos) {
      const ssize_t n = ::read(fd, buf, sizeof buf);
      ASSERT_GT(n, 0);
      got.append(buf, std::size_t(n));
    }
    EXPECT_TRUE(wait_metric("rz_active_slots", 2, 5s)) << metrics();
    ::close(fd);
  }
  EXPECT_TRUE(wait_metric("rz_active_slots", 0, 5s)) << metrics();
  EXPECT_TRUE(wait_metric("rz_kv_blocks_used", 0, 5s)) << metrics();
  // Not streaming: nothing is written until the end, yet the gone client is noticed.
  {
    const int fd = connect_loopback(port_);
    const std::string b = body + "}";
    const std::string req =
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(b.size()) +
        "\r\n\r\n" + b;
    ASSERT_EQ(::write(fd, req.data(), req.size()), ssize_t(req.size()));
    EXPECT_TRUE(wait_metric("rz_active_slots", 2, 5s)) << metrics();
    ::close(fd);
  }
  EXPECT_TRUE(wait_metric("rz_active_slots", 0, 5s)) << metrics();
  EXPECT_TRUE(wait_metric("rz_kv_blocks_used", 0, 5s)) << metrics();
  EXPECT_LT(metric(metrics(), "rz_generated_tokens_total"), 4 * 1500);
  EXPECT_EQ(metric(metrics(), "rz_requests_ended_total{outcome=\"cancelled\"}"), 4);
}

}  // namespace
}  // namespace rz::net
