// Plain HTTP routes and the Prometheus text: 404 for unknown paths, 405 for other methods, the
// page, /health's JSON (read back with simdjson), and /metrics checked line by line against the
// text exposition format (HELP/TYPE before samples, names, label syntax, cumulative buckets
// ending in +Inf = _count).
#include "net/http_handler.hpp"

#include <gtest/gtest.h>
#include <simdjson.h>

#include <map>
#include <regex>
#include <sstream>

namespace rz::net {
namespace {

ServerSnapshot sample_snapshot() {
  ServerSnapshot s;
  s.model = "Small \"model\".gguf";
  s.served_model = "org/Small model";
  s.started = 1700000000;
  s.engine.requests_started = 7;
  s.engine.requests_finished = 4;
  s.engine.requests_cancelled = 1;
  s.engine.requests_failed = 1;
  s.engine.requests_rejected = 2;
  s.engine.generated_tokens = 321;
  s.engine.executor_counters = {{"rz_cuda_graphs_built_total", "Graphs.", 12},
                                {"rz_cuda_graph_replays_total", "Replays.", 3456}};
  s.engine.prompt_tokens = 55;
  s.engine.queue_depth = 3;
  s.engine.active_slots = 2;
  s.engine.kv_blocks_used = 40;
  s.engine.kv_blocks_total = 256;
  s.engine.kv_block_size = 16;
  s.engine.max_slots = 4;
  s.engine.step_seconds = {{0.001, 0.01, 0.1}, {5, 10, 1, 2}, 1.25, 18};
  s.engine.ttft_seconds = {{0.05, 0.5}, {0, 3, 1}, 1.5, 4};
  s.net.connections_open = 2;
  s.net.frames_coalesced = 9;
  return s;
}

HttpResponse get(std::string_view target, std::string_view method = "GET") {
  return route_http(method, target, [] { return sample_snapshot(); });
}

TEST(HttpRoutes, UnknownPathsAre404) {
  for (const char* t : {"/nope", "/v1", "/v1/ws/x", "/health/", "/metricsx", "/../etc/passwd", ""})
    EXPECT_EQ(get(t).status, 404) << t;
}

TEST(HttpRoutes, OtherMethodsAre405) {
  const HttpResponse r = get("/health", "POST");
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.allow, "GET, HEAD");
  EXPECT_EQ(get("/", "DELETE").status, 405);
}

// GET /v1/models/{model}: the served model's object under its id, percent-encoded (as the openai
// package sends "org/Small model") or not; another id 404 model_not_found; a broken escape 400;
// other methods 405. The list holds the same object.
TEST(HttpRoutes, ModelRetrieval) {
  simdjson::dom::parser p;
  for (const char* t : {"/v1/models/org%2FSmall%20model", "/v1/models/org/Small%20model",
                        "/v1/models/org%2fSmall model", "/v1/models/org%2FSmall%20model?x=1"}) {
    const HttpResponse r = get(t);
    ASSERT_EQ(r.status, 200) << t << ": " << r.body;
    EXPECT_EQ(r.content_type, "application/json");
    simdjson::dom::element m = p.parse(r.body);
    EXPECT_EQ(std::string_view(m["id"]), "org/Small model") << t;
    EXPECT_EQ(std::string_view(m["object"]), "model");
    EXPECT_EQ(int64_t(m["created"]), 1700000000);
    EXPECT_EQ(std::string_view(m["owned_by"]), "rz");
  }
  const HttpResponse list = get("/v1/models");
  ASSERT_EQ(list.status, 200);
  simdjson::dom::element l = p.parse(list.body);
  EXPECT_EQ(std::string_view(l["data"].at(0)["id"]), "org/Small model");
  for (const char* t :
       {"/v1/models/gpt-4", "/v1/models/org%2FSmall", "/v1/models/", "/v1/models//"}) {
    const HttpResponse r = get(t);
    EXPECT_EQ(r.status, 404) << t;
    simdjson::dom::element e = p.parse(r.body);
    EXPECT_EQ(std::string_view(e["error"]["code"]), "model_not_found") << t;
  }
  const HttpResponse bad = get("/v1/models/org%2GSmall");
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(std::string_view(p.parse(bad.body)["error"]["code"]), "invalid_model");
  const HttpResponse post = get("/v1/models/org%2FSmall%20model", "POST");
  EXPECT_EQ(post.status, 405);
  EXPECT_EQ(post.allow, "GET, HEAD");
}

TEST(HttpRoutes, WebSocketPathWithoutUpgradeIs426) { EXPECT_EQ(get("/v1/ws").status, 426); }

TEST(HttpRoutes, PageIsSelfContainedHtml) {
  const HttpResponse r = get("/?x=1");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.content_type, "text/html; charset=utf-8");
  EXPECT_NE(r.body.find("<!doctype html>"), std::string::npos);
  EXPECT_NE(r.body.find("/v1/ws"), std::string::npos);
  for (const char* id : {"id=\"prompt\"", "id=\"send\"", "id=\"cancel\"", "id=\"temperature\"",
                         "id=\"top_k\"", "id=\"top_p\"", "id=\"min_p\"", "id=\"max_tokens\"",
                         "id=\"seed\"", "id=\"tps\"", "id=\"status\""})
    EXPECT_NE(r.body.find(id), std::string::npos) << id;
  // No external resources: nothing is loaded from another origin.
  EXPECT_EQ(r.body.find("http://"), std::string::npos);
  EXPECT_EQ(r.body.find("https://"), std::string::npos);
  EXPECT_EQ(r.body.find("src="), std::string::npos);
  EXPECT_EQ(r.body.find("<link"), std::string::npos);
  EXPECT_EQ(get("/", "HEAD").status, 200);
}

// The key for `rz serve --api-key` (docs/security.md): a password field, offered as the
// subprotocol rz-key.KEY next to rz, kept in sessionStorage only; tests/net/page_browser.py
// checks the behaviour in Chromium.
TEST(HttpRoutes, PageKeyFieldIsAPasswordKeptForTheTabOnly) {
  const std::string page = get("/").body;
  EXPECT_NE(page.find("<input id=\"key\" type=\"password\""), std::string::npos);
  EXPECT_NE(page.find("id=\"keymsg\""), std::string::npos);
  EXPECT_NE(page.find("[\"rz\", \"rz-key.\" + key]"), std::string::npos);
  EXPECT_NE(page.find("sessionStorage.setItem"), std::string::npos);
  EXPECT_EQ(page.find("localStorage"), std::string::npos);
  EXPECT_NE(page.find("Authorization: \"Bearer \" + key"), std::string::npos);  // the 401 check
}

TEST(HttpRoutes, HealthIsJson) {
  const HttpResponse r = get("/health");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.content_type, "application/json");
  simdjson::dom::parser p;
  simdjson::dom::element doc;
  ASSERT_FALSE(p.parse(r.body).get(doc)) << r.body;
  EXPECT_EQ(std::string_view(doc["status"]), "ok");
  EXPECT_EQ(std::string_view(doc["model"]), "Small \"model\".gguf");
  EXPECT_EQ(int64_t(doc["slots"]["active"]), 2);
  EXPECT_EQ(int64_t(doc["slots"]["max"]), 4);
  EXPECT_EQ(int64_t(doc["queue_depth"]), 3);
  EXPECT_EQ(int64_t(doc["connections"]), 2);
  ServerSnapshot s = sample_snapshot();
  s.draining = true;
  ASSERT_FALSE(p.parse(health_json(s)).get(doc));
  EXPECT_EQ(std::string_view(doc["status"]), "draining");
}

// A sample line: name{labels} value (the 0.0.4 text format, no timestamps).
struct Sample {
  std::string name, labels;
  double value;
};

std::vector<Sample> check_exposition(const std::string& text) {
  static const std::regex help(R"(^# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) .+$)");
  static const std::regex type(
      R"(^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram|summary|untyped)$)");
  static const std::regex sample(
      R"re(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="[^"\\\n]*"(,[a-zA-Z_][a-zA-Z0-9_]*="[^"\\\n]*")*)\})? ([-+]?(Inf|NaN|[0-9.eE+-]+))$)re");
  std::vector<Sample> out;
  std::map<std::string, std::string> types;
  std::istringstream in(text);
  std::string line;
  EXPECT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_match(line, m, type)) {
      EXPECT_EQ(types.count(m[1]), 0u) << "TYPE twice: " << line;
      types[m[1]] = m[2];
      continue;
    }
    if (std::regex_match(line, m, help)) continue;
    EXPECT_TRUE(std::regex_match(line, m, sample)) << "not a sample line: " << line;
    if (m.empty()) continue;
    std::string name = m[1], base = name;
    for (const char* suf : {"_bucket", "_sum", "_count"}) {
      const std::string s(suf);
      if (base.size() > s.size() && base.ends_with(s) &&
          types.count(base.substr(0, base.size() - s.size())))
        base = base.substr(0, base.size() - s.size());
    }
    EXPECT_TRUE(types.count(base)) << "sample before its TYPE: " << line;
    const std::string v = m[5];
    const double val = v == "+Inf" ? INFINITY : std::stod(v);
    EXPECT_FALSE(std::isnan(val)) << line;
    out.push_back({name, m[3], val});
  }
  return out;
}

double value_of(const std::vector<Sample>& s, const std::string& name,
                const std::string& labels = "") {
  for (const auto& x : s)
    if (x.name == name && x.labels == labels) return x.value;
  ADD_FAILURE() << "no sample " << name << "{" << labels << "}";
  return NAN;
}

TEST(Metrics, PrometheusTextFormat) {
  const HttpResponse r = get("/metrics");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.content_type.rfind("text/plain; version=0.0.4", 0), 0u);
  const auto s = check_exposition(r.body);
  EXPECT_EQ(value_of(s, "rz_requests_started_total"), 7);
  EXPECT_EQ(value_of(s, "rz_requests_ended_total", "outcome=\"finished\""), 4);
  EXPECT_EQ(value_of(s, "rz_requests_ended_total", "outcome=\"rejected\""), 2);
  EXPECT_EQ(value_of(s, "rz_generated_tokens_total"), 321);
  EXPECT_EQ(value_of(s, "rz_queue_depth"), 3);
  EXPECT_EQ(value_of(s, "rz_active_slots"), 2);
  EXPECT_EQ(value_of(s, "rz_kv_blocks_used"), 40);
  EXPECT_EQ(value_of(s, "rz_kv_blocks_total"), 256);
  EXPECT_EQ(value_of(s, "rz_kv_block_tokens"), 16);
  EXPECT_EQ(value_of(s, "rz_ws_frames_coalesced_total"), 9);
  EXPECT_EQ(value_of(s, "rz_cuda_graphs_built_total"), 12);  // the executor's own counters
  EXPECT_EQ(value_of(s, "rz_cuda_graph_replays_total"), 3456);
  // Buckets are cumulative: 5, 15, 16, then +Inf = count.
  EXPECT_EQ(value_of(s, "rz_step_seconds_bucket", "le=\"0.001\""), 5);
  EXPECT_EQ(value_of(s, "rz_step_seconds_bucket", "le=\"0.01\""), 15);
  EXPECT_EQ(value_of(s, "rz_step_seconds_bucket", "le=\"0.1\""), 16);
  EXPECT_EQ(value_of(s, "rz_step_seconds_bucket", "le=\"+Inf\""), 18);
  EXPECT_EQ(value_of(s, "rz_step_seconds_count"), 18);
  EXPECT_DOUBLE_EQ(value_of(s, "rz_step_seconds_sum"), 1.25);
  EXPECT_EQ(value_of(s, "rz_ttft_seconds_bucket", "le=\"0.5\""), 3);
  EXPECT_EQ(value_of(s, "rz_ttft_seconds_bucket", "le=\"+Inf\""), 4);
  // Every histogram's buckets never decrease.
  double prev = -1;
  std::string prev_name;
  for (const auto& x : s) {
    if (!x.name.ends_with("_bucket")) continue;
    if (x.name == prev_name) {
      EXPECT_GE(x.value, prev) << x.name << " " << x.labels;
    }
    prev_name = x.name;
    prev = x.value;
  }
}

TEST(Metrics, EmptyHistogramsStillExport) {
  const auto s = check_exposition(metrics_text(engine::EngineMetrics{}, NetStats{}));
  EXPECT_EQ(value_of(s, "rz_step_seconds_bucket", "le=\"+Inf\""), 0);
  EXPECT_EQ(value_of(s, "rz_ttft_seconds_count"), 0);
}

}  // namespace
}  // namespace rz::net
