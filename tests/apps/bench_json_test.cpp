// rz bench's JSON (apps/bench/json_builder.hpp, bench_json.hpp): the writer's layout, numbers in
// shortest form and null for NaN, strings that stay valid JSON whatever bytes they hold, and a
// whole report that simdjson parses back with every field the tables have.
#include <gtest/gtest.h>
#include <simdjson.h>

#include <cmath>
#include <limits>
#include <string>

#include "apps/bench/bench_json.hpp"
#include "apps/bench/json_builder.hpp"
#include "tests/apps/bench_test_run.hpp"

namespace rz::bench {
namespace {

TEST(JsonBuilder, NestsWithCommasAndIndentation) {
  JsonBuilder j;
  j.begin_object();
  j.key("name").value("pp512");
  j.key("batches").begin_array().value(1).value(4).end_array();
  j.key("empty").begin_object().end_object();
  j.key("none").begin_array().end_array();
  j.key("ok").value(true);
  j.key("x").null();
  j.end_object();
  EXPECT_EQ(j.str(),
            "{\n  \"name\": \"pp512\",\n  \"batches\": [\n    1,\n    4\n  ],\n  \"empty\": {},\n"
            "  \"none\": [],\n  \"ok\": true,\n  \"x\": null\n}");
}

TEST(JsonBuilder, Numbers) {
  EXPECT_EQ(json_number(0.1), "0.1");
  EXPECT_EQ(json_number(25), "25");
  EXPECT_EQ(json_number(-2.5), "-2.5");
  EXPECT_EQ(json_number(4.3e12), "4.3e+12");  // shortest: valid JSON
  EXPECT_EQ(json_number(96436224), "96436224");
  EXPECT_EQ(json_number(1e300), "1e+300");
  EXPECT_EQ(json_number(NAN), "null");
  EXPECT_EQ(json_number(std::numeric_limits<double>::infinity()), "null");
  EXPECT_EQ(json_number(-std::numeric_limits<double>::infinity()), "null");
  JsonBuilder j;
  j.begin_array()
      .value(uint64_t{18446744073709551615ull})
      .value(int64_t{-9})
      .value(false)
      .value(NAN)
      .end_array();
  EXPECT_EQ(j.str(), "[\n  18446744073709551615,\n  -9,\n  false,\n  null\n]");
}

TEST(JsonBuilder, StringsAreEscapedAndRepaired) {
  // Quote, backslash, newline, tab, a control byte, UTF-8 "é", and a lone continuation byte.
  const std::string nasty = std::string("a\"b\\c\nd\te") + '\x01' + "\xC3\xA9" + '\x80' + "z";
  JsonBuilder j;
  j.begin_object().key(nasty).value(nasty).end_object();
  simdjson::dom::parser p;
  simdjson::dom::element doc;
  ASSERT_EQ(p.parse(j.str()).get(doc), simdjson::SUCCESS) << j.str();
  simdjson::dom::object obj = doc.get_object();
  ASSERT_EQ(obj.size(), 1u);
  const std::string want =
      std::string("a\"b\\c\nd\te") + '\x01' + "\xC3\xA9" + "\xEF\xBF\xBD" + "z";
  for (auto field : obj) {
    EXPECT_EQ(std::string(field.key), want);
    EXPECT_EQ(std::string(std::string_view(field.value)), want);
  }
  EXPECT_NE(j.str().find("\\u0001"), std::string::npos) << j.str();
  EXPECT_EQ(j.str().find('\n', j.str().find('"')), j.str().find("\n}")) << "a raw newline inside";
}

std::string str(simdjson::dom::element e) { return std::string(std::string_view(e)); }

TEST(BenchJson, ReportParsesWithEveryFigure) {
  BenchRun r = test::sample_run();
  r.options.label = "qwen \"1.5b\"\n\\ Q4_K_M";  // escaped on the way out
  const std::string text = json_report(r);
  simdjson::dom::parser p;
  simdjson::dom::element d;
  ASSERT_EQ(p.parse(text).get(d), simdjson::SUCCESS) << text;
  EXPECT_EQ(str(d["tool"]), "rz bench");
  EXPECT_EQ(str(d["commit"]), "0123456789ab");
  EXPECT_EQ(str(d["device"]["kind"]), "cuda");
  EXPECT_EQ(str(d["device"]["name"]), "NVIDIA H200");
  EXPECT_EQ(str(d["model"]["label"]), r.options.label);
  EXPECT_EQ(str(d["model"]["path"]), r.options.model);
  EXPECT_EQ(int64_t(d["model"]["n_layer"]), 28);
  EXPECT_DOUBLE_EQ(double(d["model"]["weight_bytes_per_step"]), 1e9);
  EXPECT_EQ(int64_t(d["options"]["pp"]), 0 + r.options.pp);
  EXPECT_EQ(d["options"]["batches"].get_array().size(), 2u);
  EXPECT_TRUE(d["options"]["context"].is_null());
  EXPECT_TRUE(bool(d["options"]["cuda_graphs"]));
  EXPECT_DOUBLE_EQ(double(d["limits"]["bandwidth_bytes_per_s"]), 4e12);
  EXPECT_DOUBLE_EQ(double(d["limits"]["peak_flops"]), 1e15);
  EXPECT_EQ(str(d["limits"]["bandwidth_source"]), "test table");
  EXPECT_EQ(uint64_t(d["peak_mem_bytes"]), 5ull << 30);
  EXPECT_FALSE(bool(d["ok"]));

  simdjson::dom::array ws = d["workloads"];
  ASSERT_EQ(ws.size(), 4u);
  simdjson::dom::element pp = ws.at(0), tg = ws.at(1), b1 = ws.at(2), b4 = ws.at(3);
  EXPECT_EQ(str(pp["name"]), "pp512");
  EXPECT_EQ(str(pp["kind"]), "pp");
  EXPECT_EQ(str(pp["limit"]), "compute");
  EXPECT_DOUBLE_EQ(double(pp["tokens_per_s"]), 51200);
  EXPECT_DOUBLE_EQ(double(pp["tflops"]), 500);
  EXPECT_DOUBLE_EQ(double(pp["limit_share"]), 0.5);
  EXPECT_DOUBLE_EQ(double(pp["limit_value"]), 1e15);
  EXPECT_TRUE(pp["mbu"].is_null());
  EXPECT_TRUE(pp["bytes_per_step"].is_null());
  EXPECT_TRUE(pp["error"].is_null());
  EXPECT_EQ(uint64_t(pp["peak_mem_bytes"]), 3ull << 30);

  EXPECT_EQ(str(tg["name"]), "tg128");
  EXPECT_EQ(str(tg["limit"]), "bandwidth");
  EXPECT_DOUBLE_EQ(double(tg["tokens_per_s"]), 200);
  EXPECT_DOUBLE_EQ(double(tg["step_ms"]), 5);
  EXPECT_DOUBLE_EQ(double(tg["mbu"]), 0.2);
  EXPECT_DOUBLE_EQ(double(tg["ceiling_tokens_per_s"]), 1000);
  EXPECT_DOUBLE_EQ(double(tg["bytes_per_step"]), 4e9);
  EXPECT_EQ(int64_t(tg["batch"]), 1);

  EXPECT_EQ(str(b1["name"]), "B=1");
  EXPECT_EQ(str(b1["kind"]), "batched");
  EXPECT_DOUBLE_EQ(double(b1["prefill_tokens_per_s"]), 12800);  // 128 / 0.01 s
  EXPECT_TRUE(bool(b1["ok"]));

  EXPECT_EQ(str(b4["name"]), "B=4");
  EXPECT_FALSE(bool(b4["ok"]));
  EXPECT_EQ(str(b4["error"]), "no free KV block");
  EXPECT_TRUE(b4["tokens_per_s"].is_null());
  EXPECT_TRUE(b4["mbu"].is_null());
  EXPECT_TRUE(b4["seconds"].is_null());
}

TEST(BenchJson, UnknownCommitAndLimitsAreLeftOutOrNull) {
  BenchRun r = test::sample_run();
  r.commit.clear();
  r.limits = Limits{};
  r.memory_plan.clear();
  const std::string text = json_report(r);
  simdjson::dom::parser p;
  simdjson::dom::element d;
  ASSERT_EQ(p.parse(text).get(d), simdjson::SUCCESS) << text;
  EXPECT_EQ(d["commit"].error(), simdjson::NO_SUCH_FIELD);
  EXPECT_EQ(d["device"]["memory_plan"].error(), simdjson::NO_SUCH_FIELD);
  EXPECT_TRUE(d["limits"]["bandwidth_bytes_per_s"].is_null());
  EXPECT_TRUE(d["limits"]["peak_flops"].is_null());
  simdjson::dom::element tg = d["workloads"].at(1);
  EXPECT_DOUBLE_EQ(double(tg["tokens_per_s"]), 200);
  EXPECT_TRUE(tg["mbu"].is_null());
  EXPECT_TRUE(tg["limit_value"].is_null());
  EXPECT_TRUE(tg["ceiling_tokens_per_s"].is_null());
}

}  // namespace
}  // namespace rz::bench
