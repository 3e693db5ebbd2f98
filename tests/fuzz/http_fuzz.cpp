// libFuzzer target: the server's HTTP request path without a socket. The input is the bytes a
// client sends on a connection: Beast's request parser reads them with the server's limits
// (net/http_session.cpp: 16 KiB of header, the frame limit for a body), one pipelined request
// after another, and each request goes where the server sends it: the origin check
// (net/origin_policy.hpp), the key check (net/auth.hpp; a server with one key), the WebSocket
// key subprotocol, the OpenAI API's body parser for POSTs to its generating paths, and the plain
// routes (net/http_handler.hpp). Every answer, with the headers the server copies from the request
// (the CORS origin and requested headers), is serialized by Beast and must parse back as one
// valid response with the same status.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include "net/auth.hpp"
#include "net/http_handler.hpp"
#include "net/origin_policy.hpp"
#include "proto/openai.hpp"
#include "proto/openai_write.hpp"

namespace http = boost::beast::http;

namespace {

std::string_view field(const http::request<http::string_body>& req, http::field f) {
  auto it = req.find(f);
  return it == req.end() ? std::string_view()
                         : std::string_view(it->value().data(), it->value().size());
}

// The answer as the server writes it, serialized and read back.
void check_response(const rz::net::HttpResponse& r, std::string_view origin,
                    std::string_view requested_headers) {
  http::response<http::string_body> res{static_cast<http::status>(r.status), 11};
  res.set(http::field::server, "rz");
  res.set(http::field::content_type, r.content_type);
  if (!r.allow.empty()) res.set(http::field::allow, r.allow);
  for (const auto& [name, value] : r.headers) res.set(name, value);
  if (!origin.empty()) res.set(http::field::access_control_allow_origin, origin);
  if (!requested_headers.empty())
    res.set(http::field::access_control_allow_headers, requested_headers);
  res.body() = r.body;
  res.prepare_payload();
  std::string wire;
  {
    http::response_serializer<http::string_body> sr(res);
    boost::beast::error_code ec;
    while (!sr.is_done()) {
      sr.next(ec, [&](boost::beast::error_code&, const auto& buffers) {
        std::size_t n = 0;
        for (auto b : boost::beast::buffers_range_ref(buffers)) {
          wire.append(static_cast<const char*>(b.data()), b.size());
          n += b.size();
        }
        sr.consume(n);
      });
      if (ec) std::abort();
    }
  }
  http::response_parser<http::string_body> p;
  p.body_limit(1u << 30);
  p.eager(true);
  boost::beast::error_code ec;
  const std::size_t used = p.put(boost::asio::buffer(wire), ec);
  if (!ec && !p.is_done()) p.put_eof(ec);
  if (ec || !p.is_done() || used != wire.size() || p.get().result_int() != unsigned(r.status)) {
    std::fprintf(stderr, "http_fuzz: the answer is not one valid response: %s\n%s\n",
                 ec.message().c_str(), wire.substr(0, 2048).c_str());
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const rz::net::AuthPolicy auth{{"fuzz-key"}, false};
  static const rz::net::OriginPolicy origins{{"http://allowed.example"}, true};
  rz::proto::ProtocolLimits limits;
  limits.max_frame_bytes = 64 << 10;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  for (int n = 0; n < 16 && !in.empty(); ++n) {  // pipelined requests
    http::request_parser<http::string_body> parser;
    parser.header_limit(16 << 10);
    parser.body_limit(limits.max_frame_bytes);
    parser.eager(true);
    boost::beast::error_code ec;
    const std::size_t used = parser.put(boost::asio::buffer(in.data(), in.size()), ec);
    if (ec || !parser.is_done()) return 0;  // the server drops the connection (or reads on)
    in.remove_prefix(used);
    const auto& req = parser.get();
    const std::string_view target(req.target().data(), req.target().size());
    const std::string_view path = target.substr(0, target.find('?'));
    const std::string_view origin = field(req, http::field::origin);
    const std::string_view requested = field(req, http::field::access_control_request_headers);
    const bool api = path.substr(0, 4) == "/v1/";
    if (!origin.empty() && api &&
        !rz::net::origin_allowed(origin, field(req, http::field::host), origins)) {
      check_response(rz::net::openai_error_response(403, "invalid_request_error", "origin",
                                                    "origin_not_allowed"),
                     {}, {});
      continue;
    }
    const std::string_view protocols = field(req, http::field::sec_websocket_protocol);
    (void)rz::net::selected_subprotocol(protocols);
    if (!rz::net::authorized(auth, path, field(req, http::field::authorization), protocols)) {
      check_response({401, "text/plain", "key\n", ""}, origin, {});
      continue;
    }
    if (req.method() == http::verb::options) {
      check_response({204, "text/plain", "", ""}, origin, requested);
      continue;
    }
    if (req.method() == http::verb::post && rz::net::is_openai_generate_path(path)) {
      const auto kind =
          path == "/v1/completions" ? rz::proto::ApiKind::completion : rz::proto::ApiKind::chat;
      const rz::proto::OpenAiParse p = rz::proto::parse_openai_request(kind, req.body(), limits);
      if (const auto* e = std::get_if<rz::proto::ApiError>(&p))
        check_response({e->status, "application/json", rz::proto::error_json(*e), ""}, origin, {});
      continue;
    }
    const std::string_view method(req.method_string().data(), req.method_string().size());
    const rz::net::HttpResponse r = rz::net::route_http(method, target, [] {
      rz::net::ServerSnapshot s;
      s.model = "m.gguf";
      s.served_model = "m";
      return s;
    });
    check_response(r, origin, {});
  }
  return 0;
}
