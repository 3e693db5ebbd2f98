// Plain HTTP routes of the server, as pure functions of a request line and a snapshot of the
// server's state (no sockets here, so they are unit-tested directly). net/server.cpp reads the
// request with Beast, calls route_http, and writes the answer; the WebSocket upgrade at /v1/ws
// is decided in net/server.cpp before this is reached.
//
//   GET /         the browser page (net/page.cpp)
//   GET /health   {"status":"ok"|"draining","model":...,"slots":{"active":A,"max":M},...}
//   GET /metrics  Prometheus text (net/metrics_text.cpp)
//   GET /v1/models  the OpenAI API's model list (the served model)
//   GET /v1/models/{model}  the served model's object (its id percent-encoded or not; another
//                 id: 404 model_not_found)
//   anything else 404 (a known path with another method: 405); under /v1/ in the OpenAI API's
//   error shape. POST /v1/chat/completions and /v1/completions are answered by
//   net/http_session.cpp (net/openai_exchange.hpp) before this is reached.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "actors/engine.hpp"
#include "net/metrics_text.hpp"
#include "proto/parse.hpp"  // ProtocolLimits, used by engine.hpp

namespace rz::net {

// What the HTTP routes show; taken only by the routes that need it.
struct ServerSnapshot {
  std::string model;         // model file name, as shown on /health
  std::string served_model;  // the model's id in the OpenAI API (/v1/models)
  int64_t started = 0;       // Unix seconds when the server started (the model's "created")
  bool draining = false;     // shutdown has begun
  engine::EngineMetrics engine;
  NetStats net;
};

struct HttpResponse {
  HttpResponse() = default;
  HttpResponse(int s, std::string type, std::string b, std::string a = "")
      : status(s), content_type(std::move(type)), body(std::move(b)), allow(std::move(a)) {}
  int status = 200;
  std::string content_type;
  std::string body;
  std::string allow;                                         // the Allow header of a 405
  std::vector<std::pair<std::string, std::string>> headers;  // more header fields
};

// The browser page (HTML with inline CSS and JavaScript; no external resources).
std::string_view page_html();

// `target` may carry a query string (ignored). HEAD is answered like GET (the caller sends no
// body).
HttpResponse route_http(std::string_view method, std::string_view target,
                        const std::function<ServerSnapshot()>& snapshot);

std::string health_json(const ServerSnapshot& s);

// The OpenAI API's generating paths (POST only).
bool is_openai_generate_path(std::string_view path);
// An answer in the OpenAI API's error shape.
HttpResponse openai_error_response(int status, std::string type, std::string message,
                                   std::string code = "");

}  // namespace rz::net
