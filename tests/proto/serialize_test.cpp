// Tests of proto/serialize.cpp: each server frame is written, read back with simdjson (an
// independent JSON reader) and checked field by field; client requests round-trip through
// parse_client_message.
#include "proto/serialize.hpp"

#include <gtest/gtest.h>
#include <simdjson.h>

#include <cmath>
#include <string>

#include "proto/parse.hpp"

namespace rz::proto {
namespace {

using namespace std::string_literals;

// Parses `json` with simdjson; fails the test (and returns an empty object) when it is invalid.
class Json {
 public:
  explicit Json(const std::string& json) : text_(json) {
    auto err = parser_.parse(text_).get(root_);
    EXPECT_EQ(err, simdjson::SUCCESS) << simdjson::error_message(err) << " in " << json;
  }
  simdjson::dom::element root() const { return root_; }
  std::string str(const char* key) const {
    std::string_view s;
    EXPECT_EQ(root_[key].get_string().get(s), simdjson::SUCCESS) << key;
    return std::string(s);
  }
  // The object's keys in order.
  std::vector<std::string> keys(simdjson::dom::element e) const {
    std::vector<std::string> out;
    simdjson::dom::object obj;
    if (e.get_object().get(obj)) return out;
    for (auto kv : obj) out.emplace_back(kv.key);
    return out;
  }

 private:
  simdjson::padded_string text_;
  simdjson::dom::parser parser_;
  simdjson::dom::element root_;
};

using Keys = std::vector<std::string>;

TEST(ProtoSerialize, Token) {
  TokenFrame f{"r1", "Hel\"lo\n", {9906, 0, 49151}, 17, std::nullopt, {}};
  std::string s = to_json(f);
  Json j(s);
  EXPECT_EQ(j.keys(j.root()), (Keys{"type", "id", "text", "tokens", "index"}));
  EXPECT_EQ(j.str("type"), "token");
  EXPECT_EQ(j.str("id"), "r1");
  EXPECT_EQ(j.str("text"), "Hel\"lo\n");
  simdjson::dom::array toks;
  ASSERT_EQ(j.root()["tokens"].get_array().get(toks), simdjson::SUCCESS);
  std::vector<int64_t> ids;
  for (auto t : toks) ids.push_back(t.get_int64().value());
  EXPECT_EQ(ids, (std::vector<int64_t>{9906, 0, 49151}));
  EXPECT_EQ(j.root()["index"].get_uint64().value(), 17u);
  // Compact: no spaces outside strings.
  EXPECT_EQ(s,
            R"({"type":"token","id":"r1","text":"Hel\"lo\n","tokens":[9906,0,49151],"index":17})");
}

// A choice of an n > 1 request, with log-probabilities (one per token, best alternatives first;
// -inf as -9999.0; token text that is not UTF-8 replaced, its bytes exact).
TEST(ProtoSerialize, TokenWithChoiceAndLogprobs) {
  TokenFrame f{"r1", "ab", {5, 6}, 3, 2, {}};
  f.logprobs.push_back({5, "a", -0.5f, {{5, "a", -0.5f}, {9, "\xE2\x80", -INFINITY}}});
  f.logprobs.push_back({6, "b", -1.25f, {}});
  const std::string s = to_json(f);
  Json j(s);
  EXPECT_EQ(j.keys(j.root()),
            (Keys{"type", "id", "choice", "text", "tokens", "index", "logprobs"}));
  EXPECT_EQ(s.substr(s.find("\"logprobs\"")),
            R"("logprobs":[{"token":5,"text":"a","bytes":[97],"logprob":-0.5,"top_logprobs":)"
            R"([{"token":5,"text":"a","bytes":[97],"logprob":-0.5},{"token":9,"text":")"
            "\xEF\xBF\xBD"
            R"(",)"
            R"("bytes":[226,128],"logprob":-9999.0}]},{"token":6,"text":"b","bytes":[98],)"
            R"("logprob":-1.25,"top_logprobs":[]}]})");
  DoneFrame d{"r1", FinishReason::stop, {}, {}, 2};
  EXPECT_EQ(Json(to_json(d)).keys(Json(to_json(d)).root()),
            (Keys{"type", "id", "choice", "finish_reason", "usage", "timings"}));
}

TEST(ProtoSerialize, TokenWithEmptyTextAndNoTokens) {
  Json j(to_json(TokenFrame{"x", "", {}, 0, std::nullopt, {}}));
  EXPECT_EQ(j.str("text"), "");
  EXPECT_EQ(j.root()["tokens"].get_array().value().size(), 0u);
}

TEST(ProtoSerialize, TokenTextWithInvalidUtf8IsStillValidJson) {
  std::string text = "ok \xF0\x9F\x98";  // an emoji cut short
  Json j(to_json(TokenFrame{"r", text, {1}, 0, std::nullopt, {}}));
  EXPECT_EQ(j.str("text"), "ok \xEF\xBF\xBD");
}

TEST(ProtoSerialize, Done) {
  DoneFrame f{"r1", FinishReason::length, {5, 12, 3}, {12.3, 250.1}, std::nullopt};
  std::string s = to_json(f);
  Json j(s);
  EXPECT_EQ(j.keys(j.root()), (Keys{"type", "id", "finish_reason", "usage", "timings"}));
  EXPECT_EQ(j.str("type"), "done");
  EXPECT_EQ(j.str("id"), "r1");
  EXPECT_EQ(j.str("finish_reason"), "length");
  EXPECT_EQ(j.keys(j.root()["usage"]),
            (Keys{"prompt_tokens", "completion_tokens", "cached_tokens"}));
  EXPECT_EQ(j.root()["usage"]["prompt_tokens"].get_uint64().value(), 5u);
  EXPECT_EQ(j.root()["usage"]["completion_tokens"].get_uint64().value(), 12u);
  EXPECT_EQ(j.root()["usage"]["cached_tokens"].get_uint64().value(), 3u);
  EXPECT_EQ(j.keys(j.root()["timings"]), (Keys{"ttft_ms", "total_ms"}));
  EXPECT_DOUBLE_EQ(j.root()["timings"]["ttft_ms"].get_double().value(), 12.3);
  EXPECT_DOUBLE_EQ(j.root()["timings"]["total_ms"].get_double().value(), 250.1);
  EXPECT_NE(s.find(R"("timings":{"ttft_ms":12.3,"total_ms":250.1})"), std::string::npos) << s;
}

TEST(ProtoSerialize, DoneFinishReasonsAndMissingTtft) {
  for (FinishReason r : {FinishReason::stop, FinishReason::length, FinishReason::cancelled}) {
    DoneFrame f{"q", r, {3, 0}, {std::nullopt, 0.5}, std::nullopt};
    Json j(to_json(f));
    EXPECT_EQ(j.str("finish_reason"), std::string(to_string(r)));
    EXPECT_TRUE(j.root()["timings"]["ttft_ms"].is_null());
    EXPECT_DOUBLE_EQ(j.root()["timings"]["total_ms"].get_double().value(), 0.5);
  }
  EXPECT_EQ(to_string(FinishReason::stop), "stop");
  EXPECT_EQ(to_string(FinishReason::length), "length");
  EXPECT_EQ(to_string(FinishReason::cancelled), "cancelled");
  EXPECT_EQ(to_string(FinishReason::timeout), "timeout");
}

TEST(ProtoSerialize, DoneWithNonFiniteTimingIsValidJson) {
  Json j(to_json(DoneFrame{"q", FinishReason::stop, {}, {NAN, INFINITY}, std::nullopt}));
  EXPECT_TRUE(j.root()["timings"]["ttft_ms"].is_null());
  EXPECT_TRUE(j.root()["timings"]["total_ms"].is_null());
}

TEST(ProtoSerialize, ErrorWithAndWithoutId) {
  for (ErrorCode c : kAllErrorCodes) {
    Json j(to_json(ErrorFrame{c, "it \"broke\"\n", "r9"}));
    EXPECT_EQ(j.keys(j.root()), (Keys{"type", "id", "code", "message"}));
    EXPECT_EQ(j.str("type"), "error");
    EXPECT_EQ(j.str("id"), "r9");
    EXPECT_EQ(j.str("code"), std::string(to_string(c)));
    EXPECT_EQ(j.str("message"), "it \"broke\"\n");
  }
  Json j(to_json(ErrorFrame{ErrorCode::bad_json, "x", std::nullopt}));
  EXPECT_EQ(j.keys(j.root()), (Keys{"type", "code", "message"}));
}

TEST(ProtoSerialize, ErrorCodeNames) {
  // The wire names the protocol specifies, one per code, and back.
  const char* names[] = {
      "bad_json",     "unknown_type",  "missing_field", "bad_value",
      "duplicate_id", "unknown_id",    "too_large",     "context_length_exceeded",
      "overloaded",   "slow_consumer", "internal",      "timeout"};
  ASSERT_EQ(std::size(names), std::size(kAllErrorCodes));
  for (std::size_t i = 0; i < std::size(names); ++i) {
    EXPECT_EQ(to_string(kAllErrorCodes[i]), names[i]);
    EXPECT_EQ(error_code_from_string(names[i]), kAllErrorCodes[i]);
  }
  EXPECT_FALSE(error_code_from_string("BAD_JSON").has_value());
  EXPECT_FALSE(error_code_from_string("").has_value());
}

TEST(ProtoSerialize, ParserErrorsBecomeFramesTiedToTheirId) {
  auto r = parse_client_message(R"({"type":"generate","id":"r7","prompt":"x","top_p":2})");
  ASSERT_TRUE(is_error(r));
  Json j(to_json(std::get<ProtocolError>(r)));
  EXPECT_EQ(j.str("id"), "r7");
  EXPECT_EQ(j.str("code"), "bad_value");
}

TEST(ProtoSerialize, PongAndVariant) {
  EXPECT_EQ(to_json(PongFrame{}), R"({"type":"pong"})");
  ServerFrame f = TokenFrame{"a", "b", {1}, 2, std::nullopt, {}};
  EXPECT_EQ(to_json(f), to_json(std::get<TokenFrame>(f)));
  f = PongFrame{};
  EXPECT_EQ(to_json(f), R"({"type":"pong"})");
}

TEST(ProtoSerialize, AppendKeepsWhatIsThere) {
  std::string out = "prefix|";
  append_json(out, PongFrame{});
  append_json(out, CancelRequest{"z"});
  EXPECT_EQ(out, R"(prefix|{"type":"pong"}{"type":"cancel","id":"z"})");
}

void expect_same(const GenerateRequest& a, const GenerateRequest& b) {
  EXPECT_EQ(a.id, b.id);
  EXPECT_EQ(a.prompt, b.prompt);
  ASSERT_EQ(a.messages.size(), b.messages.size());
  for (std::size_t i = 0; i < a.messages.size(); ++i) {
    EXPECT_EQ(a.messages[i].role, b.messages[i].role);
    EXPECT_EQ(a.messages[i].content, b.messages[i].content);
  }
  EXPECT_EQ(a.max_tokens, b.max_tokens);
  EXPECT_EQ(a.sampling.temperature, b.sampling.temperature);
  EXPECT_EQ(a.sampling.top_k, b.sampling.top_k);
  EXPECT_EQ(a.sampling.top_p, b.sampling.top_p);
  EXPECT_EQ(a.sampling.min_p, b.sampling.min_p);
  EXPECT_EQ(a.sampling.repetition_penalty, b.sampling.repetition_penalty);
  EXPECT_EQ(a.sampling.seed, b.sampling.seed);
  EXPECT_EQ(a.stop, b.stop);
  EXPECT_EQ(a.ignore_eos, b.ignore_eos);
}

TEST(ProtoSerialize, ClientRequestsRoundTrip) {
  GenerateRequest g;
  g.id = "req-\xE2\x9C\x93";
  g.prompt = "line1\nline2\t\"q\" \\ \0 end \xF0\x9F\xA6\x80"s;
  g.max_tokens = 77;
  g.sampling = {0.123456789f, 3, 0.3f, 0.01f, 1.3f, 42};
  g.stop = {"\n\n", "</s>"};
  g.ignore_eos = true;
  auto r = parse_client_message(to_json(g));
  ASSERT_TRUE(std::holds_alternative<GenerateRequest>(r)) << to_json(g);
  expect_same(std::get<GenerateRequest>(r), g);

  GenerateRequest chat;  // defaults, messages, no seed
  chat.id = "c";
  chat.messages = {{"system", "Be brief."}, {"user", "Hi \"you\""}, {"assistant", ""}};
  auto rc = parse_client_message(to_json(chat));
  ASSERT_TRUE(std::holds_alternative<GenerateRequest>(rc)) << to_json(chat);
  expect_same(std::get<GenerateRequest>(rc), chat);

  auto c = parse_client_message(to_json(ClientMessage{CancelRequest{"r1"}}));
  ASSERT_TRUE(std::holds_alternative<CancelRequest>(c));
  EXPECT_EQ(std::get<CancelRequest>(c).id, "r1");
  EXPECT_TRUE(std::holds_alternative<PingRequest>(parse_client_message(to_json(PingRequest{}))));
}

TEST(ProtoSerialize, FloatsRoundTripExactly) {
  // Every float written by the client writer reads back as the same float through the parser.
  GenerateRequest g;
  g.id = "f";
  g.prompt = "p";
  for (float t : {0.0f, 1e-7f, 0.1f, 0.7f, 1.0f / 3.0f, 1.5f, 2.0f, 123.456f, 3.4e38f}) {
    g.sampling.temperature = t;
    auto r = parse_client_message(to_json(g));
    ASSERT_TRUE(std::holds_alternative<GenerateRequest>(r)) << to_json(g);
    EXPECT_EQ(std::get<GenerateRequest>(r).sampling.temperature, t) << to_json(g);
  }
}

}  // namespace
}  // namespace rz::proto
