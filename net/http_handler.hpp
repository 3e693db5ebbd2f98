// Plain HTTP routes of the server, as pure functions of a request line and a snapshot of the
// server's state (no sockets here, so they are unit-tested directly). net/server.cpp reads the
// request with Beast, calls route_http, and writes the answer; the WebSocket upgrade at /v1/ws
// is decided in net/server.cpp before this is reached.
//
//   GET /         the browser page (net/page.cpp)
//   GET /health   {"status":"ok"|"draining","model":...,"slots":{"active":A,"max":M},...}
//   GET /metrics  Prometheus text (net/metrics_text.cpp)
//   anything else 404 (a known path with another method: 405)
#pragma once
#include <functional>
#include <string>
#include <string_view>

#include "actors/engine.hpp"
#include "net/metrics_text.hpp"
#include "proto/parse.hpp"  // ProtocolLimits, used by engine.hpp

namespace rz::net {

// What the HTTP routes show; taken only by the routes that need it.
struct ServerSnapshot {
  std::string model;      // model file name, as shown on /health
  bool draining = false;  // shutdown has begun
  engine::EngineMetrics engine;
  NetStats net;
};

struct HttpResponse {
  int status = 200;
  std::string content_type;
  std::string body;
  std::string allow;  // the Allow header of a 405
};

// The browser page (HTML with inline CSS and JavaScript; no external resources).
std::string_view page_html();

// `target` may carry a query string (ignored). HEAD is answered like GET (the caller sends no
// body).
HttpResponse route_http(std::string_view method, std::string_view target,
                        const std::function<ServerSnapshot()>& snapshot);

std::string health_json(const ServerSnapshot& s);

}  // namespace rz::net
