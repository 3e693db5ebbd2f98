// Plain HTTP routes (see http_handler.hpp).
#include "net/http_handler.hpp"

#include <boost/url/pct_string_view.hpp>

#include "proto/json_writer.hpp"
#include "proto/openai_write.hpp"

namespace rz::net {

std::string health_json(const ServerSnapshot& s) {
  std::string out = "{\"status\":";
  out += s.draining ? "\"draining\"" : "\"ok\"";
  out += ",\"model\":";
  proto::append_json_string(out, s.model);
  out += ",\"slots\":{\"active\":" + std::to_string(s.engine.active_slots) +
         ",\"max\":" + std::to_string(s.engine.max_slots) + "}";
  out += ",\"queue_depth\":" + std::to_string(s.engine.queue_depth);
  out += ",\"connections\":" + std::to_string(s.net.connections_open) + "}";
  return out;
}

bool is_openai_generate_path(std::string_view path) {
  return path == "/v1/chat/completions" || path == "/v1/completions";
}

HttpResponse openai_error_response(int status, std::string type, std::string message,
                                   std::string code) {
  proto::ApiError e;
  e.status = status;
  e.type = std::move(type);
  e.message = std::move(message);
  e.code = std::move(code);
  return {status, "application/json", proto::error_json(e) + "\n", ""};
}

HttpResponse route_http(std::string_view method, std::string_view target,
                        const std::function<ServerSnapshot()>& snapshot) {
  const std::string_view path = target.substr(0, target.find('?'));
  if (is_openai_generate_path(path)) {  // reached only with another method than POST
    HttpResponse r = openai_error_response(405, "invalid_request_error",
                                           "method not allowed: use POST", "method_not_allowed");
    r.allow = "POST";
    return r;
  }
  constexpr std::string_view kModels = "/v1/models";
  if (path == kModels || path.starts_with("/v1/models/")) {
    if (method != "GET" && method != "HEAD") {
      HttpResponse r = openai_error_response(405, "invalid_request_error",
                                             "method not allowed: use GET", "method_not_allowed");
      r.allow = "GET, HEAD";
      return r;
    }
    const ServerSnapshot s = snapshot();
    if (path == kModels)
      return {200, "application/json", proto::models_json(s.served_model, s.started) + "\n", ""};
    // GET /v1/models/{model}: the served model under its id, percent-encoded as clients send it
    // ("Qwen%2FQwen2.5-1.5B" for an id with a slash); any other id is not here.
    const std::string_view raw = path.substr(kModels.size() + 1);
    const auto pct = boost::urls::make_pct_string_view(raw);
    if (!pct)
      return openai_error_response(400, "invalid_request_error",
                                   "malformed percent-encoding in the model id", "invalid_model");
    const std::string id = pct->decode();
    if (id != s.served_model)
      return openai_error_response(404, "invalid_request_error",
                                   "the model '" + id.substr(0, 128) +
                                       "' does not exist: this server serves '" + s.served_model +
                                       "'",
                                   "model_not_found");
    return {200, "application/json", proto::model_json(s.served_model, s.started) + "\n", ""};
  }
  if (path.substr(0, 4) == "/v1/" && path != "/v1/ws")
    return openai_error_response(404, "invalid_request_error",
                                 "no such endpoint: " + std::string(path.substr(0, 128)),
                                 "not_found");
  const bool known = path == "/" || path == "/index.html" || path == "/health" ||
                     path == "/metrics" || path == "/v1/ws";
  if (!known) return {404, "text/plain; charset=utf-8", "not found\n", ""};
  if (path == "/v1/ws")  // reached only without an Upgrade header
    return {426, "text/plain; charset=utf-8", "this is the WebSocket endpoint: upgrade to it\n",
            ""};
  if (method != "GET" && method != "HEAD")
    return {405, "text/plain; charset=utf-8", "method not allowed\n", "GET, HEAD"};
  if (path == "/" || path == "/index.html")
    return {200, "text/html; charset=utf-8", std::string(page_html()), ""};
  if (path == "/health") {
    const ServerSnapshot s = snapshot();
    return {s.draining ? 503 : 200, "application/json", health_json(s) + "\n", ""};
  }
  const ServerSnapshot s = snapshot();
  return {200, "text/plain; version=0.0.4; charset=utf-8", metrics_text(s.engine, s.net), ""};
}

}  // namespace rz::net
