// Tests of the OpenAI-compatible API's request parsing (proto/openai_parse.cpp) and response JSON
// (proto/openai_write.cpp). Expected values follow OpenAI's API reference (field names, defaults,
// the error shape, the chunk objects), written here by hand; every written object is read back
// with simdjson.
#include <gtest/gtest.h>
#include <simdjson.h>

#include <string>

#include "proto/openai.hpp"
#include "proto/openai_write.hpp"

namespace rz::proto {
namespace {

OpenAiRequest ok(ApiKind kind, std::string_view body, const ProtocolLimits& limits = {}) {
  OpenAiParse r = parse_openai_request(kind, body, limits);
  if (auto* e = std::get_if<ApiError>(&r)) {
    ADD_FAILURE() << body << " -> " << e->message;
    return {};
  }
  return std::get<OpenAiRequest>(r);
}

ApiError err(ApiKind kind, std::string_view body, const ProtocolLimits& limits = {}) {
  OpenAiParse r = parse_openai_request(kind, body, limits);
  if (auto* e = std::get_if<ApiError>(&r)) return *e;
  ADD_FAILURE() << body << " parsed without an error";
  return {};
}

constexpr auto kChat = ApiKind::chat;
constexpr auto kText = ApiKind::completion;

simdjson::dom::element parse_json(simdjson::dom::parser& p, const std::string& s) {
  simdjson::dom::element e;
  EXPECT_EQ(p.parse(s).get(e), simdjson::SUCCESS) << s;
  return e;
}

TEST(OpenAiParse, ChatDefaultsAreOpenAis) {
  const OpenAiRequest r = ok(kChat, R"({"model":"m","messages":[{"role":"user","content":"Hi"}]})");
  EXPECT_EQ(r.kind, kChat);
  EXPECT_EQ(r.model, "m");
  ASSERT_EQ(r.messages.size(), 1u);
  EXPECT_EQ(r.messages[0].role, "user");
  EXPECT_EQ(r.messages[0].content, "Hi");
  EXPECT_FALSE(r.max_tokens.has_value());
  EXPECT_FLOAT_EQ(r.sampling.temperature, 1.0f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 1.0f);
  EXPECT_EQ(r.sampling.top_k, 0);
  EXPECT_FLOAT_EQ(r.sampling.min_p, 0.0f);
  EXPECT_FLOAT_EQ(r.sampling.repetition_penalty, 1.0f);
  EXPECT_FALSE(r.sampling.seed.has_value());
  EXPECT_EQ(r.n, 1);
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.include_usage);

  // Chat without max_tokens: as many as the context leaves.
  const auto g = to_generate_requests(r, ProtocolLimits{});
  ASSERT_EQ(g.size(), 1u);
  EXPECT_TRUE(g[0].fit_max_tokens);
  EXPECT_EQ(g[0].max_tokens, ProtocolLimits{}.max_tokens);
  EXPECT_TRUE(g[0].is_chat());
}

TEST(OpenAiParse, EveryField) {
  const OpenAiRequest r = ok(kChat, R"({
    "model":"x","messages":[{"role":"developer","content":"Be brief."},
      {"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},
      {"role":"assistant","content":null},{"role":"assistant"}],
    "max_tokens":50,"max_completion_tokens":40,"temperature":0.5,"top_p":0.9,"seed":-1,
    "stop":["\n\n","END"],"n":3,"stream":true,"stream_options":{"include_usage":true},
    "presence_penalty":0.5,"frequency_penalty":-0.25,"user":"someone","top_k":-1,"min_p":0.1,
    "logprobs":true,"top_logprobs":3,
    "repetition_penalty":1.1,"ignore_eos":true,"timeout_ms":2500,"unknown_field":{"deep":[1,2]},
    "tools":[],"response_format":{"type":"text"},"logit_bias":{"50256":-100,"7":2.5,"12":0}})");
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[0].role, "system");  // developer is OpenAI's new name for it
  EXPECT_EQ(r.messages[1].content, "a\nb");
  EXPECT_EQ(r.messages[2].content, "");
  EXPECT_EQ(r.messages[3].content, "");
  EXPECT_EQ(r.max_tokens, 40);  // max_completion_tokens wins
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 0.9f);
  EXPECT_EQ(r.sampling.seed, UINT64_MAX);  // -1 modulo 2^64
  EXPECT_EQ(r.stop, (std::vector<std::string>{"\n\n", "END"}));
  EXPECT_EQ(r.n, 3);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(r.sampling.top_k, 0);
  EXPECT_FLOAT_EQ(r.sampling.min_p, 0.1f);
  EXPECT_FLOAT_EQ(r.sampling.repetition_penalty, 1.1f);
  EXPECT_TRUE(r.ignore_eos);
  EXPECT_EQ(r.timeout_ms, 2500u);

  EXPECT_FLOAT_EQ(r.sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.frequency_penalty, -0.25f);
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 3);

  // One engine request carrying the choices (the session gives choice i the seed s + i).
  const auto g = to_generate_requests(r, ProtocolLimits{});
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(g[0].n, 3);
  EXPECT_EQ(g[0].logprobs, 3);
  EXPECT_EQ(g[0].max_tokens, 40);
  EXPECT_FALSE(g[0].fit_max_tokens);
  EXPECT_EQ(g[0].sampling.seed, UINT64_MAX);
  EXPECT_FLOAT_EQ(g[0].sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(g[0].sampling.frequency_penalty, -0.25f);
  // logit_bias: sorted by id, the zero bias left out
  const std::vector<std::pair<int32_t, float>> bias = {{7, 2.5f}, {50256, -100.0f}};
  EXPECT_EQ(r.sampling.logit_bias, bias);
  EXPECT_EQ(g[0].sampling.logit_bias, bias);
  EXPECT_EQ(g[0].stop, r.stop);
  EXPECT_TRUE(g[0].ignore_eos);
  EXPECT_EQ(g[0].timeout_ms, 2500u);
  // Without logprobs: none asked of the engine; completions' logprobs K is top K.
  EXPECT_EQ(to_generate_requests(ok(kText, R"({"prompt":"x"})"), {})[0].logprobs, -1);
  EXPECT_EQ(to_generate_requests(ok(kText, R"({"prompt":"x","logprobs":0})"), {})[0].logprobs, 0);
  EXPECT_EQ(to_generate_requests(ok(kText, R"({"prompt":"x","logprobs":20})"), {})[0].logprobs, 20);
}

TEST(OpenAiParse, CompletionsPromptAndDefaults) {
  OpenAiRequest r = ok(kText, R"({"prompt":"Once upon"})");
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.prompts[0].text, "Once upon");
  EXPECT_TRUE(r.prompts[0].tokens.empty());
  auto g = to_generate_requests(r, ProtocolLimits{});
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(g[0].id, "0");
  EXPECT_EQ(g[0].prompt, "Once upon");
  EXPECT_EQ(g[0].max_tokens, kDefaultCompletionTokens);  // OpenAI's default for completions
  EXPECT_FALSE(g[0].is_chat());
  const std::vector<CompletionPrompt> one = {{"one string", {}}};
  EXPECT_EQ(ok(kText, R"({"prompt":["one string"]})").prompts, one);
  // top_p 0: only the most likely token.
  r = ok(kText, R"({"prompt":"x","top_p":0})");
  EXPECT_EQ(r.sampling.top_k, 1);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 1.0f);
  EXPECT_EQ(ok(kText, R"({"prompt":"x","logprobs":null,"echo":false,"best_of":1})").n, 1);
}

// OpenAI's four prompt forms: a string, strings, token ids, arrays of token ids. Each prompt
// becomes an engine request of its own ("0", "1", ...) with the request's n and sampling; token
// prompts go as ids (prompt_tokens), not text.
TEST(OpenAiParse, CompletionsPromptForms) {
  OpenAiRequest r = ok(kText, R"({"prompt":["a b","c"],"n":2,"max_tokens":5,"seed":9})");
  const std::vector<CompletionPrompt> texts = {{"a b", {}}, {"c", {}}};
  EXPECT_EQ(r.prompts, texts);
  auto g = to_generate_requests(r, ProtocolLimits{});
  ASSERT_EQ(g.size(), 2u);
  for (std::size_t i = 0; i < g.size(); ++i) {
    EXPECT_EQ(g[i].id, std::to_string(i));
    EXPECT_EQ(g[i].prompt, texts[i].text);
    EXPECT_TRUE(g[i].prompt_tokens.empty());
    EXPECT_EQ(g[i].n, 2);
    EXPECT_EQ(g[i].max_tokens, 5);
    EXPECT_EQ(g[i].sampling.seed, std::optional<uint64_t>(9));
    EXPECT_FALSE(g[i].is_chat());
  }

  r = ok(kText, R"({"prompt":[15496, 0, 2147483647]})");
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.prompts[0].tokens, (std::vector<int32_t>{15496, 0, 2147483647}));
  g = to_generate_requests(r, ProtocolLimits{});
  ASSERT_EQ(g.size(), 1u);
  EXPECT_FALSE(g[0].prompt.has_value());
  EXPECT_EQ(g[0].prompt_tokens, r.prompts[0].tokens);
  EXPECT_FALSE(g[0].is_chat());  // neither text nor messages: a token prompt

  r = ok(kText, R"({"prompt":[[1,2],[3],"text"]})");
  const std::vector<CompletionPrompt> mixed = {{"", {1, 2}}, {"", {3}}, {"text", {}}};
  EXPECT_EQ(r.prompts, mixed);
  g = to_generate_requests(r, ProtocolLimits{});
  ASSERT_EQ(g.size(), 3u);
  EXPECT_EQ(g[1].id, "1");
  EXPECT_EQ(g[1].prompt_tokens, (std::vector<int32_t>{3}));
  EXPECT_EQ(g[2].prompt, "text");

  // 16 prompts (kMaxChoices) pass; chat stays one request.
  std::string many = R"({"prompt":[)";
  for (int i = 0; i < kMaxChoices; ++i)
    many += std::string(i ? "," : "") + "[" + std::to_string(i) + "]";
  EXPECT_EQ(ok(kText, many + "]}").prompts.size(), std::size_t(kMaxChoices));
  EXPECT_EQ(
      to_generate_requests(ok(kChat, R"({"messages":[{"role":"user","content":"x"}]})"), {}).size(),
      1u);
}

TEST(OpenAiParse, ErrorsNameTheParamInOpenAisShape) {
  struct Case {
    ApiKind kind;
    const char* body;
    int status;
    const char* param;
    const char* code;
  };
  const Case cases[] = {
      {kChat, "not json", 400, "", "bad_json"},
      {kChat, "[1]", 400, "", "bad_json"},
      {kChat, R"({})", 400, "messages", "missing_field"},
      {kChat, R"({"messages":[]})", 400, "messages", "bad_value"},
      {kChat, R"({"messages":"hi"})", 400, "messages", "bad_value"},
      {kChat, R"({"messages":[{"content":"x"}]})", 400, "messages[0].role", "missing_field"},
      {kChat, R"({"messages":[{"role":"king","content":"x"}]})", 400, "messages[0].role",
       "bad_value"},
      {kChat, R"({"messages":[{"role":"user"}]})", 400, "messages[0].content", "missing_field"},
      {kChat, R"({"messages":[{"role":"user","content":[{"type":"image_url"}]}]})", 400,
       "messages[0].content[0].type", "bad_value"},
      {kChat, R"({"messages":[{"role":"tool","content":"x"}]})", 400, "messages[0].role",
       "bad_value"},
      {kText, R"({})", 400, "prompt", "missing_field"},
      {kText, R"({"prompt":""})", 400, "prompt", "bad_value"},
      {kText, R"({"prompt":[]})", 400, "prompt", "bad_value"},
      {kText, R"({"prompt":["x",""]})", 400, "prompt[1]", "bad_value"},
      {kText, R"({"prompt":[[]]})", 400, "prompt[0]", "bad_value"},
      {kText, R"({"prompt":[1,-2]})", 400, "prompt[1]", "bad_value"},
      {kText, R"({"prompt":[1,2.5]})", 400, "prompt[1]", "bad_value"},
      {kText, R"({"prompt":[1,"x"]})", 400, "prompt[1]", "bad_value"},
      {kText, R"({"prompt":[2147483648]})", 400, "prompt[0]", "bad_value"},
      {kText, R"({"prompt":["x",{"a":1}]})", 400, "prompt[1]", "bad_value"},
      {kText, R"({"prompt":[["x"]]})", 400, "prompt[0][0]", "bad_value"},
      {kText, R"({"prompt":{"a":1}})", 400, "prompt", "bad_value"},
      {kText, R"({"prompt":["a","b"],"n":9})", 400, "n", "bad_value"},
      {kText,
       R"({"prompt":[[1],[2],[3],[4],[5],[6],[7],[8],[9],[10],[11],[12],[13],[14],[15],[16],[17]]})",
       400, "prompt", "bad_value"},
      {kText, R"({"prompt":"x","max_tokens":0})", 400, "max_tokens", "bad_value"},
      {kText, R"({"prompt":"x","max_tokens":1.5})", 400, "max_tokens", "bad_value"},
      {kText, R"({"prompt":"x","max_completion_tokens":100000})", 400, "max_completion_tokens",
       "bad_value"},
      {kText, R"({"prompt":"x","temperature":2.5})", 400, "temperature", "bad_value"},
      {kText, R"({"prompt":"x","temperature":"hot"})", 400, "temperature", "bad_value"},
      {kText, R"({"prompt":"x","top_p":1.5})", 400, "top_p", "bad_value"},
      {kText, R"({"prompt":"x","n":0})", 400, "n", "bad_value"},
      {kText, R"({"prompt":"x","n":17})", 400, "n", "bad_value"},
      {kText, R"({"prompt":"x","stop":""})", 400, "stop", "bad_value"},
      {kText, R"({"prompt":"x","stop":[1]})", 400, "stop[0]", "bad_value"},
      {kText, R"({"prompt":"x","stream":"yes"})", 400, "stream", "bad_value"},
      {kText, R"({"prompt":"x","stream_options":{"include_usage":1}})", 400,
       "stream_options.include_usage", "bad_value"},
      {kText, R"({"prompt":"x","presence_penalty":3})", 400, "presence_penalty", "bad_value"},
      {kText, R"({"prompt":"x","frequency_penalty":-2.5})", 400, "frequency_penalty", "bad_value"},
      {kText, R"({"prompt":"x","logprobs":21})", 400, "logprobs", "bad_value"},
      {kChat, R"({"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":21})",
       400, "top_logprobs", "bad_value"},
      {kText, R"({"prompt":"x","echo":true})", 400, "echo", "bad_value"},
      {kText, R"({"prompt":"x","best_of":3})", 400, "best_of", "bad_value"},
      {kText, R"({"prompt":"x","seed":1.5})", 400, "seed", "bad_value"},
      {kText, R"({"prompt":"x","timeout_ms":0})", 400, "timeout_ms", "bad_value"},
      {kText, R"({"prompt":"x","prompt":"y"})", 400, "prompt", "bad_json"},
      {kChat, R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function"}]})", 400,
       "tools", "bad_value"},
      {kChat, R"({"messages":[{"role":"user","content":"x"}],"top_logprobs":2})", 400,
       "top_logprobs", "bad_value"},
      {kText, R"({"prompt":"x","logit_bias":[1]})", 400, "logit_bias", "bad_value"},
      {kText, R"({"prompt":"x","logit_bias":{"a":1}})", 400, "logit_bias", "bad_value"},
      {kText, R"({"prompt":"x","logit_bias":{"-1":1}})", 400, "logit_bias", "bad_value"},
      {kText, R"({"prompt":"x","logit_bias":{"99999999999":1}})", 400, "logit_bias", "bad_value"},
      {kText, R"({"prompt":"x","logit_bias":{"5":101}})", 400, "logit_bias", "bad_value"},
      {kText, R"({"prompt":"x","logit_bias":{"5":"1"}})", 400, "logit_bias", "bad_value"},
      {kText, R"({"prompt":"x","logit_bias":{"5":1,"05":2}})", 400, "logit_bias", "bad_value"},
      {kChat, R"({"messages":[{"role":"user","content":"x"}],
                  "response_format":{"type":"json_object"}})",
       400, "response_format.type", "bad_value"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.body);
    const ApiError e = err(c.kind, c.body);
    EXPECT_EQ(e.status, c.status) << e.message;
    EXPECT_EQ(e.type, "invalid_request_error");
    EXPECT_EQ(e.param, c.param) << e.message;
    EXPECT_EQ(e.code, c.code) << e.message;
    EXPECT_FALSE(e.message.empty());
    if (*c.param) {
      EXPECT_EQ(e.message.rfind(std::string(c.param) + ": ", 0), 0u) << e.message;
    }
  }
  ProtocolLimits small;
  small.max_frame_bytes = 16;
  EXPECT_EQ(err(kText, R"({"prompt":"a long enough body"})", small).status, 413);
}

// What the server does not do is said as a sentence after the field: "<field>: <what> are not
// supported by this server".
TEST(OpenAiParse, UnsupportedFeaturesSaySo) {
  const auto msg = [](ApiKind kind, const char* body) { return err(kind, body).message; };
  EXPECT_EQ(
      msg(kChat, R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function"}]})"),
      "tools: tools and functions are not supported by this server");
  EXPECT_EQ(msg(kChat, R"({"messages":[{"role":"user","content":"x"}],
                           "response_format":{"type":"json_object"}})"),
            "response_format.type: response formats other than \"text\" are not supported by this "
            "server");
  EXPECT_EQ(msg(kChat, R"({"messages":[{"role":"user","content":[{"type":"image_url"}]}]})"),
            "messages[0].content[0].type: \"image_url\" content parts are not supported by this "
            "server");
  EXPECT_EQ(msg(kChat, R"({"messages":[{"role":"tool","content":"x"}]})"),
            "messages[0].role: tool messages are not supported by this server");
  EXPECT_EQ(msg(kText, R"({"prompt":"x","echo":true})"),
            "echo: echoed prompts (echo: true) are not supported by this server");
  EXPECT_EQ(msg(kText, R"({"prompt":"x","suffix":"y"})"),
            "suffix: suffixes are not supported by this server");
  EXPECT_EQ(msg(kText, R"({"prompt":"x","best_of":3})"),
            "best_of: best_of values other than n are not supported by this server");
}

TEST(OpenAiParse, LogitBiasHasABoundAndNullIsAbsent) {
  std::string many = R"({"prompt":"x","logit_bias":{)";
  for (int i = 0; i <= kMaxLogitBiasEntries; ++i)
    many += (i ? "," : "") + std::string("\"") + std::to_string(i) + "\":1";
  many += "}}";
  EXPECT_EQ(err(kText, many).message, "logit_bias: more than 1024 entries");
  many.replace(many.find(R"("0":1,)"), 6, "");  // 1024 entries: fine
  EXPECT_EQ(ok(kText, many).sampling.logit_bias.size(), std::size_t(kMaxLogitBiasEntries));
  EXPECT_TRUE(ok(kText, R"({"prompt":"x","logit_bias":null})").sampling.logit_bias.empty());
}

TEST(OpenAiParse, EngineErrorsMapToHttpStatuses) {
  EXPECT_EQ(api_error_of({ErrorCode::overloaded, "busy", "0"}).status, 503);
  EXPECT_EQ(api_error_of({ErrorCode::overloaded, "busy", "0"}).type, "server_error");
  const ApiError ctx = api_error_of({ErrorCode::context_length_exceeded, "too long", "0"});
  EXPECT_EQ(ctx.status, 400);
  EXPECT_EQ(ctx.code, "context_length_exceeded");
  EXPECT_EQ(api_error_of({ErrorCode::internal, "bug", "0"}).status, 500);
  const ApiError late = api_error_of({ErrorCode::timeout, "the time bound ran out", "0"});
  EXPECT_EQ(late.status, 408);
  EXPECT_EQ(late.type, "timeout_error");
  EXPECT_EQ(late.code, "timeout");
  const ApiError bad =
      api_error_of({ErrorCode::bad_value, "messages: the model has no chat template", "0"});
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(bad.param, "messages");
}

TEST(OpenAiWrite, ErrorShape) {
  simdjson::dom::parser p;
  auto e = parse_json(p, error_json({400, "invalid_request_error", "n: \"bad\"", "n", ""}));
  EXPECT_EQ(std::string_view(e["error"]["message"]), "n: \"bad\"");
  EXPECT_EQ(std::string_view(e["error"]["type"]), "invalid_request_error");
  EXPECT_EQ(std::string_view(e["error"]["param"]), "n");
  EXPECT_TRUE(e["error"]["code"].is_null());
}

TEST(OpenAiWrite, ChatChunksAndResponse) {
  const ResponseMeta m{kChat, "chatcmpl-1", 1700000000, "smol"};
  simdjson::dom::parser p;
  auto c = parse_json(p, chunk_json(m, 1, "assistant", "", std::nullopt, true));
  EXPECT_EQ(std::string_view(c["object"]), "chat.completion.chunk");
  EXPECT_EQ(std::string_view(c["id"]), "chatcmpl-1");
  EXPECT_EQ(int64_t(c["created"]), 1700000000);
  EXPECT_EQ(std::string_view(c["model"]), "smol");
  EXPECT_EQ(int64_t(c["choices"].at(0)["index"]), 1);
  EXPECT_EQ(std::string_view(c["choices"].at(0)["delta"]["role"]), "assistant");
  EXPECT_EQ(std::string_view(c["choices"].at(0)["delta"]["content"]), "");
  EXPECT_TRUE(c["choices"].at(0)["finish_reason"].is_null());
  EXPECT_TRUE(c["usage"].is_null());
  c = parse_json(p, chunk_json(m, 0, std::nullopt, std::nullopt, "length", false));
  EXPECT_EQ(c["choices"].at(0)["delta"].get_object().value().size(), 0u);
  EXPECT_EQ(std::string_view(c["choices"].at(0)["finish_reason"]), "length");
  EXPECT_EQ(c["usage"].error(), simdjson::NO_SUCH_FIELD);

  c = parse_json(p, usage_chunk_json(m, {12, 5, 8}));
  EXPECT_EQ(c["choices"].get_array().value().size(), 0u);
  EXPECT_EQ(uint64_t(c["usage"]["total_tokens"]), 17u);
  EXPECT_EQ(uint64_t(c["usage"]["prompt_tokens_details"]["cached_tokens"]), 8u);

  c = parse_json(
      p, response_json(m, {{"Paris\xff", "stop", std::nullopt}, {"Lyon", "length", std::nullopt}},
                       {3, 4, 0}));
  EXPECT_EQ(std::string_view(c["object"]), "chat.completion");
  EXPECT_EQ(std::string_view(c["choices"].at(0)["message"]["role"]), "assistant");
  EXPECT_EQ(std::string_view(c["choices"].at(0)["message"]["content"]), "Paris\xEF\xBF\xBD");
  EXPECT_EQ(int64_t(c["choices"].at(1)["index"]), 1);
  EXPECT_EQ(std::string_view(c["choices"].at(1)["finish_reason"]), "length");
  EXPECT_EQ(uint64_t(c["usage"]["completion_tokens"]), 4u);
}

TEST(OpenAiWrite, CompletionObjectsAndModels) {
  const ResponseMeta m{kText, "cmpl-1", 5, "smol"};
  simdjson::dom::parser p;
  auto c = parse_json(p, chunk_json(m, 0, std::nullopt, "abc", std::nullopt, false));
  EXPECT_EQ(std::string_view(c["object"]), "text_completion");
  EXPECT_EQ(std::string_view(c["choices"].at(0)["text"]), "abc");
  c = parse_json(p, response_json(m, {{"xyz", "stop", std::nullopt}}, {1, 1, 0}));
  EXPECT_EQ(std::string_view(c["choices"].at(0)["text"]), "xyz");
  EXPECT_TRUE(c["choices"].at(0)["logprobs"].is_null());
  c = parse_json(p, models_json("smol", 7));
  EXPECT_EQ(std::string_view(c["object"]), "list");
  EXPECT_EQ(std::string_view(c["data"].at(0)["id"]), "smol");
  EXPECT_EQ(std::string_view(c["data"].at(0)["object"]), "model");
  c = parse_json(p, model_json("smol", 7));
  EXPECT_EQ(std::string_view(c["id"]), "smol");
  EXPECT_EQ(int64_t(c["created"]), 7);
  std::string sse;
  append_sse(sse, "{}");
  EXPECT_EQ(sse, "data: {}\n\n");
}

}  // namespace
}  // namespace rz::proto
