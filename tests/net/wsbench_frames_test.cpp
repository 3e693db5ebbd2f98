// Tests of bench/wsbench_frames.hpp (reading the server's frames, as written by the server's own
// writers in proto/serialize.cpp) and bench/wsbench_report.hpp (the --json object reads back with
// simdjson and carries the same numbers as the statistics it summarises; the table lists errors).
#include "bench/wsbench_frames.hpp"

#include <gtest/gtest.h>

#include "bench/wsbench_report.hpp"
#include "proto/serialize.hpp"

namespace rz::wsbench {
namespace {

ServerFrameInfo read(const std::string& text) {
  simdjson::dom::parser parser;
  ServerFrameInfo f;
  std::string why;
  EXPECT_TRUE(parse_server_frame(parser, text, f, why)) << why << ": " << text;
  return f;
}

std::string why_not(const std::string& text) {
  simdjson::dom::parser parser;
  ServerFrameInfo f;
  std::string why;
  EXPECT_FALSE(parse_server_frame(parser, text, f, why)) << text;
  return why;
}

TEST(WsbenchFrames, ReadsTheServersFrames) {
  proto::TokenFrame t;  // field by field: later fields keep their defaults
  t.id = "r7";
  t.text = "Hel\"lo\n";
  t.tokens = {1, 2, 3};
  t.index = 12;
  ServerFrameInfo f = read(proto::to_json(t));
  EXPECT_EQ(f.kind, ServerFrameInfo::Kind::token);
  EXPECT_EQ(f.id, "r7");
  EXPECT_EQ(f.n_tokens, 3u);
  EXPECT_EQ(f.index, 12u);

  proto::DoneFrame d;
  d.id = "r7";
  d.finish_reason = proto::FinishReason::length;
  d.usage.prompt_tokens = 17;
  d.usage.completion_tokens = 64;
  d.timings.ttft_ms = 12.5;
  d.timings.total_ms = 250.0;
  f = read(proto::to_json(d));
  EXPECT_EQ(f.kind, ServerFrameInfo::Kind::done);
  EXPECT_EQ(f.id, "r7");
  EXPECT_EQ(f.finish_reason, "length");
  EXPECT_EQ(f.prompt_tokens, 17u);
  EXPECT_EQ(f.completion_tokens, 64u);
  ASSERT_TRUE(f.server_ttft_ms.has_value());
  EXPECT_DOUBLE_EQ(*f.server_ttft_ms, 12.5);

  d.timings.ttft_ms.reset();  // written as null
  d.finish_reason = proto::FinishReason::cancelled;
  f = read(proto::to_json(d));
  EXPECT_FALSE(f.server_ttft_ms.has_value());
  EXPECT_EQ(f.finish_reason, "cancelled");

  proto::ErrorFrame e{proto::ErrorCode::overloaded, "queue full", std::string("q1")};
  f = read(proto::to_json(e));
  EXPECT_EQ(f.kind, ServerFrameInfo::Kind::error);
  EXPECT_EQ(f.id, "q1");
  EXPECT_EQ(f.code, "overloaded");
  EXPECT_EQ(f.message, "queue full");

  e.id.reset();
  e.code = proto::ErrorCode::bad_json;
  f = read(proto::to_json(e));
  EXPECT_FALSE(f.id.has_value());
  EXPECT_EQ(f.code, "bad_json");

  f = read(proto::to_json(proto::PongFrame{}));
  EXPECT_EQ(f.kind, ServerFrameInfo::Kind::pong);
}

TEST(WsbenchFrames, RejectsWhatIsNotAFrame) {
  EXPECT_NE(why_not("{\"type\":\"token\",").find("not JSON"), std::string::npos);
  EXPECT_EQ(why_not("[1,2]"), "not a JSON object");
  EXPECT_EQ(why_not("{\"id\":\"r1\"}"), "no string \"type\"");
  EXPECT_EQ(why_not("{\"type\":\"tokens\"}"), "unknown frame type 'tokens'");
  EXPECT_EQ(why_not("{\"type\":\"token\",\"id\":\"r1\",\"tokens\":[1]}"),
            "token frame without id, tokens or index");
  EXPECT_EQ(why_not("{\"type\":\"token\",\"tokens\":[1],\"index\":0}"),
            "token frame without id, tokens or index");
  EXPECT_EQ(why_not("{\"type\":\"done\",\"id\":\"r1\",\"finish_reason\":\"stop\"}"),
            "done frame without id, finish_reason or usage");
  EXPECT_EQ(why_not("{\"type\":\"error\",\"id\":\"r1\"}"), "error frame without code");
}

TEST(WsbenchReport, JsonReadsBackWithTheSameNumbers) {
  Options o = parse_args(
      {"--url", "ws://h:1/v1/ws", "--rate", "3", "--connections", "2", "--prompt-tokens", "8:16"});
  Results r;
  r.duration_s = 4.0;
  r.issued = 5;
  r.add_completed(request_metrics(0.0, {{0.1, 1}, {0.2, 2}, {0.25, 1}}, 0.3));
  r.add_completed(request_metrics(1.0, {{1.3, 1}, {1.4, 1}}, 1.5));
  r.add_error("overloaded");
  r.add_error("overloaded");
  r.add_error("connection_lost");
  r.prompt_tokens = 30;
  r.finish_reasons["length"] = 2;
  r.untied_errors["bad_json"] = 1;

  const std::string json = format_json(o, r);
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  ASSERT_EQ(parser.parse(json).get(doc), simdjson::SUCCESS) << json;
  EXPECT_EQ(doc["completed"].get_uint64().value(), 2u);
  EXPECT_EQ(doc["failed"].get_uint64().value(), 3u);
  EXPECT_EQ(doc["total_output_tokens"].get_uint64().value(), 6u);
  EXPECT_NEAR(doc["output_throughput"].get_double().value(), 6 / 4.0, 1e-6);
  EXPECT_NEAR(doc["request_throughput"].get_double().value(), 2 / 4.0, 1e-6);
  EXPECT_EQ(doc["errors"]["overloaded"].get_uint64().value(), 2u);
  EXPECT_EQ(doc["errors"]["connection_lost"].get_uint64().value(), 1u);
  EXPECT_EQ(doc["untied_errors"]["bad_json"].get_uint64().value(), 1u);
  EXPECT_EQ(std::string(doc["config"]["mode"].get_string().value()), "open");
  EXPECT_EQ(std::string(doc["config"]["prompt_tokens"].get_string().value()), "8:16");
  // TTFT values 100 and 300 ms: mean 200, p50 200, p90 280, p99 298 (linear interpolation)
  EXPECT_EQ(doc["ttft_ms"]["count"].get_uint64().value(), 2u);
  EXPECT_NEAR(doc["ttft_ms"]["mean"].get_double().value(), 200.0, 1e-3);
  EXPECT_NEAR(doc["ttft_ms"]["p90"].get_double().value(), 280.0, 1e-3);
  EXPECT_NEAR(doc["ttft_ms"]["p99"].get_double().value(), 298.0, 1e-3);
  // ITL values: 50, 50 (frame of 2 after 100 ms), 50, then 100 for the second request
  EXPECT_EQ(doc["itl_ms"]["count"].get_uint64().value(), 4u);
  EXPECT_NEAR(doc["itl_ms"]["mean"].get_double().value(), 62.5, 1e-3);
  // no server TTFTs were recorded: null statistics
  EXPECT_TRUE(doc["server_ttft_ms"]["mean"].is_null());
}

TEST(WsbenchReport, NamesTheApi) {
  Options ws = parse_args({"--url", "ws://h:1/v1/ws"});
  EXPECT_NE(format_table(ws, {}).find("Server:                              ws://h:1/v1/ws\n"),
            std::string::npos);
  EXPECT_NE(format_json(ws, {}).find("\"api\":\"ws\""), std::string::npos);
  Options oa = parse_args({"--api", "openai", "--url", "http://[::1]:7/v1", "--chat"});
  EXPECT_NE(format_table(oa, {}).find(
                "Server:                              http://[::1]:7/v1/chat/completions (OpenAI "
                "API, streamed)\n"),
            std::string::npos)
      << format_table(oa, {});
  const std::string json = format_json(oa, {});
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  ASSERT_EQ(parser.parse(json).get(doc), simdjson::SUCCESS) << json;
  EXPECT_EQ(std::string(doc["config"]["api"].get_string().value()), "openai");
  EXPECT_EQ(std::string(doc["config"]["url"].get_string().value()), "http://[::1]:7/v1");
}

TEST(WsbenchReport, TableListsErrorsByCode) {
  Options o = parse_args({});
  Results r;
  r.add_error("timeout");
  const std::string t = format_table(o, r);
  EXPECT_NE(t.find("Errors by code:"), std::string::npos);
  EXPECT_NE(t.find("timeout"), std::string::npos);
  EXPECT_NE(t.find("TTFT"), std::string::npos);
  Results ok;
  EXPECT_NE(format_table(o, ok).find("Errors:                              none"),
            std::string::npos);
}

}  // namespace
}  // namespace rz::wsbench
