// Tests of proto/parse.cpp: defaults, every field, every error code the parser produces (with
// the id recovered where the frame allows it), and the limits. Expected values come from the
// protocol's specification (docs/protocol.md), written here by hand.
#include "proto/parse.hpp"
#include "proto/serialize.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

namespace rz::proto {
namespace {

using namespace std::string_literals;

// A copy: callers bind it to a const reference, which then extends the copy's life (the
// ParseResult it came from is a temporary gone at the end of the statement).
GenerateRequest as_generate(const ParseResult& r) {
  if (auto* e = std::get_if<ProtocolError>(&r))
    ADD_FAILURE() << "unexpected error " << to_string(e->code) << ": " << e->message;
  auto* g = std::get_if<GenerateRequest>(&r);
  return g ? *g : GenerateRequest{};
}

ProtocolError as_error(const ParseResult& r) {
  auto* e = std::get_if<ProtocolError>(&r);
  if (!e) {
    ADD_FAILURE() << "expected an error, got message alternative " << r.index();
    return {};
  }
  return *e;
}

// Parses `frame` and checks that it fails with `code`, tied to `id` (or to none).
void expect_error(std::string_view frame, ErrorCode code, std::optional<std::string> id,
                  const ProtocolLimits& limits = {}) {
  SCOPED_TRACE(std::string(frame.substr(0, 200)));
  ProtocolError e = as_error(parse_client_message(frame, limits));
  EXPECT_EQ(to_string(e.code), to_string(code)) << e.message;
  EXPECT_EQ(e.id, id) << e.message;
  EXPECT_FALSE(e.message.empty());
  EXPECT_EQ(e.message.find('\n'), std::string::npos);
}

TEST(ProtoParse, GenerateDefaults) {
  auto r = parse_client_message(R"({"type":"generate","id":"r1","prompt":"Hello"})");
  const GenerateRequest& g = as_generate(r);
  EXPECT_EQ(g.id, "r1");
  ASSERT_TRUE(g.prompt.has_value());
  EXPECT_EQ(*g.prompt, "Hello");
  EXPECT_FALSE(g.is_chat());
  EXPECT_TRUE(g.messages.empty());
  EXPECT_EQ(g.max_tokens, 256);
  EXPECT_EQ(g.sampling.temperature, 0.7f);
  EXPECT_EQ(g.sampling.top_k, 40);
  EXPECT_EQ(g.sampling.top_p, 0.95f);
  EXPECT_EQ(g.sampling.min_p, 0.05f);
  EXPECT_EQ(g.sampling.repetition_penalty, 1.0f);
  EXPECT_FALSE(g.sampling.seed.has_value());
  EXPECT_TRUE(g.stop.empty());
  EXPECT_FALSE(g.ignore_eos);
}

TEST(ProtoParse, GenerateEveryField) {
  auto r = parse_client_message(
      R"({"type":"generate","id":"r1","prompt":"Hi\n\"there\"", "max_tokens":64,)"
      R"( "temperature":0.25, "top_k":7, "top_p":0.5, "min_p":0, "repetition_penalty":1.1,)"
      R"( "seed":12345678901234, "stop":["\n\n","END"], "ignore_eos":true})");
  const GenerateRequest& g = as_generate(r);
  EXPECT_EQ(*g.prompt, "Hi\n\"there\"");
  EXPECT_EQ(g.max_tokens, 64);
  EXPECT_EQ(g.sampling.temperature, 0.25f);
  EXPECT_EQ(g.sampling.top_k, 7);
  EXPECT_EQ(g.sampling.top_p, 0.5f);
  EXPECT_EQ(g.sampling.min_p, 0.0f);
  EXPECT_EQ(g.sampling.repetition_penalty, 1.1f);
  EXPECT_EQ(g.sampling.seed, std::optional<uint64_t>(12345678901234ull));
  EXPECT_EQ(g.stop, (std::vector<std::string>{"\n\n", "END"}));
  EXPECT_TRUE(g.ignore_eos);
}

// The fields the OpenAI API shares: penalties, choices, log-probabilities, and their ranges.
TEST(ProtoParse, PenaltiesChoicesAndLogprobs) {
  const std::string h = R"({"type":"generate","id":"r1","prompt":"x")";
  const GenerateRequest& d = as_generate(parse_client_message(h + "}"));
  EXPECT_EQ(d.sampling.presence_penalty, 0.0f);
  EXPECT_EQ(d.sampling.frequency_penalty, 0.0f);
  EXPECT_EQ(d.n, 1);
  EXPECT_EQ(d.logprobs, -1);
  const GenerateRequest& g = as_generate(parse_client_message(
      h + R"(,"presence_penalty":-2,"frequency_penalty":1.5,"n":16,"logprobs":20})"));
  EXPECT_EQ(g.sampling.presence_penalty, -2.0f);
  EXPECT_EQ(g.sampling.frequency_penalty, 1.5f);
  EXPECT_EQ(g.n, 16);
  EXPECT_EQ(g.logprobs, 20);
  EXPECT_EQ(as_generate(parse_client_message(h + R"(,"logprobs":0,"n":null})")).logprobs, 0);
  for (std::string_view bad : {R"("presence_penalty":2.01)", R"("frequency_penalty":-3)",
                               R"("presence_penalty":"1")", R"("n":0)", R"("n":17)", R"("n":1.5)",
                               R"("logprobs":-1)", R"("logprobs":21)", R"("logprobs":true)"})
    expect_error(h + "," + std::string(bad) + "}", ErrorCode::bad_value, "r1");
}

// Found by tests/fuzz/protocol_fuzz.cpp: -0 was kept and written back as "-0", which parses as the
// integer 0, so a request did not survive two round trips unchanged. A number field has no sign
// of zero.
TEST(ProtoParse, NegativeZeroIsZero) {
  const GenerateRequest& g = as_generate(parse_client_message(
      R"({"type":"generate","id":"z","prompt":"x","temperature":-0.0,"presence_penalty":-0})"));
  EXPECT_FALSE(std::signbit(g.sampling.temperature));
  EXPECT_FALSE(std::signbit(g.sampling.presence_penalty));
  const std::string once = to_json(ClientMessage(g));
  EXPECT_NE(once.find("\"temperature\":0,"), std::string::npos) << once;
  EXPECT_EQ(to_json(ClientMessage(as_generate(parse_client_message(once)))), once);
  // A negative number that rounds to float's -0 is 0 too (found by CI's fuzzing: -1E-310).
  const GenerateRequest& tiny = as_generate(parse_client_message(
      R"({"type":"generate","id":"z","prompt":"x","temperature":-1E-310})"));
  EXPECT_FALSE(std::signbit(tiny.sampling.temperature));
  EXPECT_EQ(tiny.sampling.temperature, 0.0f);
}

// A request's own time bound: milliseconds, 1 to 2^31-1; absent or null: none (0).
TEST(ProtoParse, TimeoutMs) {
  const std::string h = R"({"type":"generate","id":"r1","prompt":"x")";
  EXPECT_EQ(as_generate(parse_client_message(h + "}")).timeout_ms, 0u);
  EXPECT_EQ(as_generate(parse_client_message(h + R"(,"timeout_ms":null})")).timeout_ms, 0u);
  EXPECT_EQ(as_generate(parse_client_message(h + R"(,"timeout_ms":1})")).timeout_ms, 1u);
  EXPECT_EQ(as_generate(parse_client_message(h + R"(,"timeout_ms":2147483647})")).timeout_ms,
            2147483647u);
  for (std::string_view bad : {R"("timeout_ms":0)", R"("timeout_ms":-5)", R"("timeout_ms":1.5)",
                               R"("timeout_ms":"100")", R"("timeout_ms":2147483648)"})
    expect_error(h + "," + std::string(bad) + "}", ErrorCode::bad_value, "r1");
}

TEST(ProtoParse, GenerateMessages) {
  auto r = parse_client_message(
      R"({"type":"generate","id":"c","messages":[{"role":"system","content":""},)"
      R"({"role":"user","content":"Hi","name":"ignored"},{"role":"assistant","content":"Yo"}]})");
  const GenerateRequest& g = as_generate(r);
  EXPECT_TRUE(g.is_chat());
  ASSERT_EQ(g.messages.size(), 3u);
  EXPECT_EQ(g.messages[0].role, "system");
  EXPECT_EQ(g.messages[0].content, "");
  EXPECT_EQ(g.messages[1].role, "user");
  EXPECT_EQ(g.messages[1].content, "Hi");
  EXPECT_EQ(g.messages[2].role, "assistant");
  EXPECT_EQ(g.messages[2].content, "Yo");
}

TEST(ProtoParse, NullMeansAbsentAndUnknownFieldsAreIgnored) {
  auto r = parse_client_message(
      R"({"type":"generate","id":"r","prompt":"x","messages":null,"seed":null,"temperature":null,)"
      R"("stream":true,"extra":{"a":[1,2,{"b":null}]},"stop":null,"top_k":null})");
  const GenerateRequest& g = as_generate(r);
  EXPECT_EQ(*g.prompt, "x");
  EXPECT_FALSE(g.sampling.seed.has_value());
  EXPECT_EQ(g.sampling.temperature, 0.7f);
  EXPECT_EQ(g.sampling.top_k, 40);
  EXPECT_TRUE(g.stop.empty());
}

TEST(ProtoParse, StopAsOneString) {
  const GenerateRequest g =
      as_generate(parse_client_message(R"({"type":"generate","id":"r","prompt":"x","stop":"##"})"));
  EXPECT_EQ(g.stop, std::vector<std::string>{"##"});
}

TEST(ProtoParse, TextWithEscapesAndUnicode) {
  // \u0000 is kept (with its length), a surrogate pair decodes to one code point (U+1F600).
  auto r = parse_client_message(
      R"({"type":"generate","id":"\u00e9t\u00e9","prompt":"a\u0000b\ud83d\ude00 caf\u00e9"})");
  const GenerateRequest& g = as_generate(r);
  EXPECT_EQ(g.id, "\xC3\xA9t\xC3\xA9");
  EXPECT_EQ(*g.prompt, "a\0b\xF0\x9F\x98\x80 caf\xC3\xA9"s);
}

TEST(ProtoParse, BoundaryValuesAccepted) {
  const GenerateRequest g = as_generate(parse_client_message(
      R"({"type":"generate","id":"r","prompt":"x","temperature":0,"top_p":1,"min_p":1,)"
      R"("top_k":0,"max_tokens":4096,"seed":18446744073709551615,"repetition_penalty":0.001})"));
  EXPECT_EQ(g.sampling.temperature, 0.0f);
  EXPECT_EQ(g.sampling.top_p, 1.0f);
  EXPECT_EQ(g.sampling.min_p, 1.0f);
  EXPECT_EQ(g.sampling.top_k, 0);
  EXPECT_EQ(g.max_tokens, 4096);
  EXPECT_EQ(g.sampling.seed, std::optional<uint64_t>(UINT64_MAX));
  EXPECT_EQ(g.sampling.repetition_penalty, 0.001f);
  // Seed 0 is a seed, not "absent".
  const GenerateRequest z =
      as_generate(parse_client_message(R"({"type":"generate","id":"r","prompt":"x","seed":0})"));
  EXPECT_EQ(z.sampling.seed, std::optional<uint64_t>(0));
}

TEST(ProtoParse, CancelAndPing) {
  auto c = parse_client_message(R"({"type":"cancel","id":"r1","prompt":5})");
  ASSERT_TRUE(std::holds_alternative<CancelRequest>(c));
  EXPECT_EQ(std::get<CancelRequest>(c).id, "r1");
  EXPECT_TRUE(std::holds_alternative<PingRequest>(parse_client_message(R"({"type":"ping"})")));
  EXPECT_TRUE(std::holds_alternative<PingRequest>(
      parse_client_message(R"(  {"id":7, "type" : "ping"}  )")));
}

TEST(ProtoParse, BadJson) {
  for (std::string_view f :
       {"", " ", "{", "{\"type\":\"ping\"", "{\"type\":\"ping\"} x", "nul", "{\"type\":'ping'}",
        "{\"a\":99999999999999999999}", "{\"type\":\"ping\",}", "{\"a\":1e400}",
        "{\"a\":\"\\ud800\"}", "{\"type\":\"generate\",\"id\":\"r\",\"prompt\":\"\xFF\"}"})
    expect_error(f, ErrorCode::bad_json, std::nullopt);
  // Valid JSON, but not an object.
  for (std::string_view f : {"[]", "\"ping\"", "null", "42", "[{\"type\":\"ping\"}]"})
    expect_error(f, ErrorCode::bad_json, std::nullopt);
}

TEST(ProtoParse, DuplicateKeysThatAreRead) {
  expect_error(R"({"type":"generate","id":"r1","prompt":"a","prompt":"b"})", ErrorCode::bad_json,
               "r1");
  expect_error(R"({"type":"generate","id":"r1","id":"r2","prompt":"a"})", ErrorCode::bad_json,
               std::nullopt);
  expect_error(R"({"type":"ping","type":"ping"})", ErrorCode::bad_json, std::nullopt);
  expect_error(R"({"type":"generate","id":"r1","prompt":"a","seed":null,"seed":1})",
               ErrorCode::bad_json, "r1");
  expect_error(
      R"({"type":"generate","id":"r1","messages":[{"role":"user","role":"user","content":""}]})",
      ErrorCode::bad_json, "r1");
  // Repeated keys that this message does not read are ignored like any unknown key.
  EXPECT_FALSE(is_error(parse_client_message(R"({"type":"ping","x":1,"x":2})")));
  EXPECT_FALSE(
      is_error(parse_client_message(R"({"type":"cancel","id":"r","prompt":1,"prompt":2})")));
}

TEST(ProtoParse, TypeErrors) {
  expect_error(R"({"id":"r1","prompt":"x"})", ErrorCode::missing_field, "r1");
  expect_error(R"({"type":null,"id":"r1"})", ErrorCode::missing_field, "r1");
  expect_error(R"({"type":1,"id":"r1"})", ErrorCode::bad_value, "r1");
  expect_error(R"({"type":"Generate","id":"r1","prompt":"x"})", ErrorCode::unknown_type, "r1");
  expect_error(R"({"type":"","id":"r1"})", ErrorCode::unknown_type, "r1");
  expect_error(R"({"type":"status"})", ErrorCode::unknown_type, std::nullopt);
}

TEST(ProtoParse, IdErrors) {
  expect_error(R"({"type":"generate","prompt":"x"})", ErrorCode::missing_field, std::nullopt);
  expect_error(R"({"type":"generate","id":null,"prompt":"x"})", ErrorCode::missing_field,
               std::nullopt);
  expect_error(R"({"type":"generate","id":1,"prompt":"x"})", ErrorCode::bad_value, std::nullopt);
  expect_error(R"({"type":"generate","id":"","prompt":"x"})", ErrorCode::bad_value, std::nullopt);
  expect_error(R"({"type":"cancel"})", ErrorCode::missing_field, std::nullopt);
  expect_error(R"({"type":"cancel","id":["r1"]})", ErrorCode::bad_value, std::nullopt);
  ProtocolLimits lim;
  lim.max_id_bytes = 4;
  EXPECT_FALSE(is_error(parse_client_message(R"({"type":"cancel","id":"abcd"})", lim)));
  expect_error(R"({"type":"cancel","id":"abcde"})", ErrorCode::bad_value, std::nullopt, lim);
  // The limit is in bytes: "é" is two.
  expect_error(R"({"type":"cancel","id":"abc\u00e9"})", ErrorCode::bad_value, std::nullopt, lim);
}

TEST(ProtoParse, PromptAndMessagesErrors) {
  const std::string h = R"({"type":"generate","id":"r1",)";
  expect_error(h + R"("max_tokens":5})", ErrorCode::missing_field, "r1");
  expect_error(h + R"("prompt":null,"messages":null})", ErrorCode::missing_field, "r1");
  expect_error(h + R"("prompt":"x","messages":[{"role":"user","content":"y"}]})",
               ErrorCode::bad_value, "r1");
  expect_error(h + R"("prompt":""})", ErrorCode::bad_value, "r1");
  expect_error(h + R"("prompt":["x"]})", ErrorCode::bad_value, "r1");
  expect_error(h + R"("messages":[]})", ErrorCode::bad_value, "r1");
  expect_error(h + R"("messages":{"role":"user","content":"y"}})", ErrorCode::bad_value, "r1");
  expect_error(h + R"("messages":["hi"]})", ErrorCode::bad_value, "r1");
  expect_error(h + R"("messages":[{"content":"y"}]})", ErrorCode::missing_field, "r1");
  expect_error(h + R"("messages":[{"role":"user"}]})", ErrorCode::missing_field, "r1");
  expect_error(h + R"("messages":[{"role":"user","content":null}]})", ErrorCode::missing_field,
               "r1");
  expect_error(h + R"("messages":[{"role":"tool","content":"y"}]})", ErrorCode::bad_value, "r1");
  expect_error(h + R"("messages":[{"role":"User","content":"y"}]})", ErrorCode::bad_value, "r1");
  expect_error(h + R"("messages":[{"role":1,"content":"y"}]})", ErrorCode::bad_value, "r1");
  expect_error(h + R"("messages":[{"role":"user","content":[{"type":"text","text":"y"}]}]})",
               ErrorCode::bad_value, "r1");
  // The message names the offending element.
  ProtocolError e = as_error(parse_client_message(
      h + R"("messages":[{"role":"user","content":"a"},{"role":"bot","content":"b"}]})"));
  EXPECT_NE(e.message.find("messages[1].role"), std::string::npos) << e.message;
  ProtocolLimits lim;
  lim.max_messages = 2;
  const std::string m = R"({"role":"user","content":"a"})";
  EXPECT_FALSE(is_error(parse_client_message(h + R"("messages":[)" + m + "," + m + "]}", lim)));
  expect_error(h + R"("messages":[)" + m + "," + m + "," + m + "]}", ErrorCode::bad_value, "r1",
               lim);
}

TEST(ProtoParse, SamplingRangeErrors) {
  const std::string h = R"({"type":"generate","id":"r1","prompt":"x",)";
  for (std::string_view bad : {R"("temperature":-0.1)",
                               R"("temperature":-1e-30)",
                               R"("temperature":1e300)",
                               R"("temperature":"0.7")",
                               R"("temperature":true)",
                               R"("top_p":0)",
                               R"("top_p":1.0001)",
                               R"("top_p":-1)",
                               R"("top_p":1e-60)",
                               R"("top_p":[0.5])",
                               R"("min_p":-0.01)",
                               R"("min_p":1.5)",
                               R"("min_p":"0")",
                               R"("repetition_penalty":0)",
                               R"("repetition_penalty":-1)",
                               R"("repetition_penalty":1e-50)",
                               R"("repetition_penalty":1e39)",
                               R"("top_k":-1)",
                               R"("top_k":2.5)",
                               R"("top_k":40.0)",
                               R"("top_k":4e1)",
                               R"("top_k":2147483648)",
                               R"("top_k":"40")",
                               R"("seed":-1)",
                               R"("seed":1.5)",
                               R"("seed":"1")",
                               R"("ignore_eos":1)",
                               R"("ignore_eos":"true")"}) {
    expect_error(h + std::string(bad) + "}", ErrorCode::bad_value, "r1");
  }
  EXPECT_FALSE(is_error(parse_client_message(h + R"("top_k":2147483647})")));
  EXPECT_FALSE(is_error(parse_client_message(h + R"("temperature":3.4e38})")));
}

// The error for a negative seed names the range that is accepted: all of uint64.
TEST(ProtoParse, SeedErrorNamesTheAcceptedRange) {
  const std::string h = R"({"type":"generate","id":"r1","prompt":"x",)";
  EXPECT_EQ(as_generate(parse_client_message(h + R"("seed":18446744073709551615})")).sampling.seed,
            std::optional<uint64_t>(UINT64_MAX));
  for (std::string_view bad : {R"("seed":-1)", R"("seed":-9223372036854775808)"}) {
    const ProtocolError e = as_error(parse_client_message(h + std::string(bad) + "}"));
    EXPECT_EQ(e.code, ErrorCode::bad_value) << e.message;
    EXPECT_EQ(e.message, "seed: must be in [0, 18446744073709551615]");
  }
  // Beyond uint64 the number does not parse as an integer at all.
  expect_error(h + R"("seed":18446744073709551616})", ErrorCode::bad_json, std::nullopt);
}

TEST(ProtoParse, MaxTokensRangeAndLimit) {
  const std::string h = R"({"type":"generate","id":"r1","prompt":"x",)";
  for (std::string_view bad :
       {R"("max_tokens":0)", R"("max_tokens":-5)", R"("max_tokens":4097)", R"("max_tokens":1.5)",
        R"("max_tokens":"64")", R"("max_tokens":9223372036854775808)"})
    expect_error(h + std::string(bad) + "}", ErrorCode::bad_value, "r1");
  ProtocolLimits lim;
  lim.max_tokens = 100;
  EXPECT_EQ(as_generate(parse_client_message(h + R"("max_tokens":100})", lim)).max_tokens, 100);
  expect_error(h + R"("max_tokens":101})", ErrorCode::bad_value, "r1", lim);
  // The default is capped by the limit.
  EXPECT_EQ(as_generate(parse_client_message(h + "\"z\":0}", lim)).max_tokens, 100);
  EXPECT_EQ(as_generate(parse_client_message(h + "\"z\":0}")).max_tokens, 256);
}

TEST(ProtoParse, StopErrorsAndLimits) {
  const std::string h = R"({"type":"generate","id":"r1","prompt":"x",)";
  ProtocolLimits lim;
  lim.max_stop = 2;
  lim.max_stop_bytes = 3;
  EXPECT_EQ(as_generate(parse_client_message(h + R"("stop":["abc","d"]})", lim)).stop.size(), 2u);
  EXPECT_TRUE(as_generate(parse_client_message(h + R"("stop":[]})", lim)).stop.empty());
  for (std::string_view bad :
       {R"("stop":["a","b","c"])", R"("stop":["abcd"])", R"("stop":"abcd")", R"("stop":[""])",
        R"("stop":"")", R"("stop":[1])", R"("stop":["a",null])", R"("stop":5)",
        R"("stop":{"a":"b"})", R"("stop":["\u00e9\u00e9"])"})
    expect_error(h + std::string(bad) + "}", ErrorCode::bad_value, "r1", lim);
}

TEST(ProtoParse, TooLarge) {
  ProtocolLimits lim;
  lim.max_frame_bytes = 64;
  std::string ok = R"({"type":"generate","id":"r1","prompt":")";
  ok += std::string(64 - ok.size() - 2, 'a') + "\"}";
  ASSERT_EQ(ok.size(), 64u);
  EXPECT_FALSE(is_error(parse_client_message(ok, lim)));
  std::string big = R"({"type":"generate","id":"r1","prompt":")";
  big += std::string(64 - big.size() - 1, 'a') + "\"}";
  ASSERT_EQ(big.size(), 65u);
  // Not parsed at all, so not tied to its id.
  expect_error(big, ErrorCode::too_large, std::nullopt, lim);
  // Too large wins over bad JSON.
  expect_error(std::string(65, '{'), ErrorCode::too_large, std::nullopt, lim);
  // The default limit is 1 MiB.
  std::string huge =
      R"({"type":"generate","id":"r1","prompt":")" + std::string(1 << 20, 'a') + "\"}";
  expect_error(huge, ErrorCode::too_large, std::nullopt);
}

TEST(ProtoParse, ParserIsReusableAcrossFrames) {
  // A failed parse must not leave state behind that changes the next result.
  for (int i = 0; i < 3; ++i) {
    expect_error("{\"type\":", ErrorCode::bad_json, std::nullopt);
    std::string id = "r";
    id += std::to_string(i);
    auto r = parse_client_message(R"({"type":"cancel","id":")" + id + "\"}");
    ASSERT_TRUE(std::holds_alternative<CancelRequest>(r));
    EXPECT_EQ(std::get<CancelRequest>(r).id, id);
  }
}

TEST(ProtoParse, DeepNestingIsBadJsonNotACrash) {
  std::string deep =
      R"({"type":"ping","x":)" + std::string(5000, '[') + std::string(5000, ']') + "}";
  expect_error(deep, ErrorCode::bad_json, std::nullopt);
}

}  // namespace
}  // namespace rz::proto
