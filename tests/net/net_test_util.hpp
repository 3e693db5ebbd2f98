// Helpers of the network tests: a WebSocket client (Beast) whose every wait is bounded in time,
// a plain-HTTP GET over a POSIX socket, and a reader of server frames (simdjson). Header-only;
// included by tests/net/server_test.cpp only, so Beast is compiled once for the tests.
#pragma once
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <simdjson.h>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>

namespace rz::net::testing {

namespace beast = boost::beast;
namespace websocket = beast::websocket;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using namespace std::chrono_literals;

// One server frame, read back with simdjson.
struct Frame {
  std::string raw, type, id, text, code, finish_reason;
  std::vector<int64_t> tokens;
  uint64_t index = 0, completion_tokens = 0, prompt_tokens = 0, cached_tokens = 0;
  bool has_id = false;
};

inline Frame parse_frame(const std::string& raw) {
  Frame f;
  f.raw = raw;
  simdjson::dom::parser p;
  simdjson::dom::element doc;
  if (p.parse(raw).get(doc)) throw std::runtime_error("server frame is not JSON: " + raw);
  std::string_view s;
  if (!doc["type"].get_string().get(s)) f.type = s;
  if (!doc["id"].get_string().get(s)) f.id = s, f.has_id = true;
  if (!doc["text"].get_string().get(s)) f.text = s;
  if (!doc["code"].get_string().get(s)) f.code = s;
  if (!doc["finish_reason"].get_string().get(s)) f.finish_reason = s;
  simdjson::dom::array toks;
  if (!doc["tokens"].get_array().get(toks))
    for (auto t : toks) f.tokens.push_back(int64_t(t));
  uint64_t u;
  if (!doc["index"].get_uint64().get(u)) f.index = u;
  if (!doc["usage"]["completion_tokens"].get_uint64().get(u)) f.completion_tokens = u;
  if (!doc["usage"]["prompt_tokens"].get_uint64().get(u)) f.prompt_tokens = u;
  if (!doc["usage"]["cached_tokens"].get_uint64().get(u)) f.cached_tokens = u;
  return f;
}

class WsClient {
 public:
  // rcvbuf > 0 shrinks the socket's receive buffer before connecting (a slow reader); `source`
  // binds the client to that local address first (any of 127.0.0.0/8 is loopback on Linux).
  explicit WsClient(uint16_t port, int rcvbuf = 0, const std::string& source = "") : ws_(ioc_) {
    auto& sock = beast::get_lowest_layer(ws_).socket();
    sock.open(tcp::v4());
    if (rcvbuf > 0) sock.set_option(asio::socket_base::receive_buffer_size(rcvbuf));
    if (!source.empty()) sock.bind(tcp::endpoint(asio::ip::make_address(source), 0));
    sock.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
    ws_.handshake(response_, "127.0.0.1:" + std::to_string(port), "/v1/ws");
    ws_.text(true);
  }
  // Connect and try the upgrade; returns the HTTP status (101 when it was accepted). `origin`:
  // an Origin header to send (none when empty); `source`: the local address to connect from.
  static int try_upgrade(uint16_t port, const std::string& origin = "",
                         const std::string& source = "") {
    asio::io_context ioc;
    websocket::stream<beast::tcp_stream> ws(ioc);
    auto& sock = beast::get_lowest_layer(ws).socket();
    sock.open(tcp::v4());
    if (!source.empty()) sock.bind(tcp::endpoint(asio::ip::make_address(source), 0));
    sock.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
    if (!origin.empty())
      ws.set_option(websocket::stream_base::decorator(
          [origin](websocket::request_type& req) { req.set(beast::http::field::origin, origin); }));
    websocket::response_type res;
    beast::error_code ec;
    ws.handshake(res, "127.0.0.1:" + std::to_string(port), "/v1/ws", ec);
    return static_cast<int>(res.result_int());
  }

  // The upgrade with an Authorization header and a Sec-WebSocket-Protocol offer (each left out
  // when empty); returns the HTTP status and the subprotocol the server selected.
  static std::pair<int, std::string> try_upgrade_auth(uint16_t port,
                                                      const std::string& authorization,
                                                      const std::string& protocols) {
    asio::io_context ioc;
    websocket::stream<beast::tcp_stream> ws(ioc);
    beast::get_lowest_layer(ws).connect(
        tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
    ws.set_option(websocket::stream_base::decorator([&](websocket::request_type& req) {
      if (!authorization.empty()) req.set(beast::http::field::authorization, authorization);
      if (!protocols.empty()) req.set(beast::http::field::sec_websocket_protocol, protocols);
    }));
    websocket::response_type res;
    beast::error_code ec;
    ws.handshake(res, "127.0.0.1:" + std::to_string(port), "/v1/ws", ec);
    const auto p = res[beast::http::field::sec_websocket_protocol];
    return {static_cast<int>(res.result_int()), std::string(p.data(), p.size())};
  }

  void send(const std::string& text) {
    beast::error_code ec;
    ws_.write(asio::buffer(text), ec);
    if (ec) throw std::runtime_error("write failed: " + ec.message());
  }

  // The next frame within `timeout`; nullopt when the connection closed (close_reason() says
  // how). Throws on timeout.
  std::optional<std::string> read(std::chrono::milliseconds timeout = 30s) {
    beast::error_code result;
    bool done = false;
    buf_.clear();
    ws_.async_read(buf_, [&](beast::error_code ec, std::size_t) {
      result = ec;
      done = true;
    });
    ioc_.restart();
    ioc_.run_for(timeout);
    if (!done) {
      beast::get_lowest_layer(ws_).socket().cancel();
      ioc_.restart();
      ioc_.run_for(5s);
      throw std::runtime_error("no frame within the timeout");
    }
    if (result) {
      closed_ = true;
      error_ = result;
      return std::nullopt;
    }
    return beast::buffers_to_string(buf_.data());
  }
  Frame read_frame(std::chrono::milliseconds timeout = 30s) {
    auto s = read(timeout);
    if (!s) throw std::runtime_error("connection closed: " + error_.message());
    return parse_frame(*s);
  }
  // Frames until the one that ends request `id` (done or an error with that id), in order.
  // Frames of other requests go to `others` when given.
  std::vector<Frame> until_end(const std::string& id, std::vector<Frame>* others = nullptr,
                               std::chrono::milliseconds timeout = 60s) {
    std::vector<Frame> out;
    const auto until = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          until - std::chrono::steady_clock::now());
      if (left.count() <= 0) throw std::runtime_error("request " + id + " did not end in time");
      Frame f = read_frame(left);
      if (f.id != id) {
        if (others) others->push_back(std::move(f));
        continue;
      }
      out.push_back(f);
      if (f.type == "done" || f.type == "error") return out;
    }
  }
  websocket::close_reason close_reason() const { return ws_.reason(); }
  beast::error_code error() const { return error_; }
  bool closed() const { return closed_; }
  void close() {
    beast::error_code ec;
    ws_.close(websocket::close_code::normal, ec);
  }
  void drop() {  // no close handshake: the TCP connection just goes away
    beast::error_code ec;
    beast::get_lowest_layer(ws_).socket().close(ec);
  }

 private:
  asio::io_context ioc_;
  websocket::stream<beast::tcp_stream> ws_;
  websocket::response_type response_;
  beast::flat_buffer buf_;
  bool closed_ = false;
  beast::error_code error_;
};

struct HttpResult {
  int status = 0;
  std::string headers, body;
};

// A TCP connection to 127.0.0.1:port from `source` (a loopback address; "" lets the kernel
// choose), reads bounded by SO_RCVTIMEO (10 s). Throws when it cannot connect.
inline int connect_loopback(uint16_t port, const std::string& source = "") {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error("socket failed");
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (!source.empty()) {
    sockaddr_in from{};
    from.sin_family = AF_INET;
    inet_pton(AF_INET, source.c_str(), &from.sin_addr);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof from) != 0) {
      ::close(fd);
      throw std::runtime_error("bind to " + source + " failed");
    }
  }
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    throw std::runtime_error("connect failed");
  }
  return fd;
}

// Sends `request` on a fresh connection from `source` (when given) and reads the answer until
// the server closes; every wait bounded by SO_RCVTIMEO. A chunked body is decoded.
inline HttpResult exchange_http(uint16_t port, const std::string& request,
                                const std::string& source = "", int timeout_s = 10);

// GET (or another method) with Connection: close, from `source` when given.
inline HttpResult http_request(uint16_t port, const std::string& target,
                               const std::string& method = "GET", const std::string& source = "") {
  return exchange_http(
      port, method + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
      source);
}

// A chunked HTTP/1.1 body decoded (throws when the framing is wrong or the last chunk is
// missing).
inline std::string dechunk(const std::string& body) {
  std::string out;
  std::size_t pos = 0;
  for (;;) {
    const auto eol = body.find("\r\n", pos);
    if (eol == std::string::npos) throw std::runtime_error("chunked body: no size line");
    const std::size_t n = std::stoul(body.substr(pos, eol - pos), nullptr, 16);
    if (n == 0) return out;
    if (body.compare(eol + 2 + n, 2, "\r\n") != 0)
      throw std::runtime_error("chunked body: a chunk does not end with CRLF");
    out.append(body, eol + 2, n);
    pos = eol + 2 + n + 2;
  }
}

// A request with a body (POST by default), Connection: close, `headers` added as they are
// ("Name: value\r\n" lines); a chunked answer is decoded.
inline HttpResult http_send(uint16_t port, const std::string& target, const std::string& body,
                            const std::string& method = "POST", const std::string& headers = "") {
  return exchange_http(port, method + " " + target +
                                 " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                                 "Content-Type: application/json\r\nContent-Length: " +
                                 std::to_string(body.size()) + "\r\n" + headers + "\r\n" + body,
                       "", 300);  // a whole generation under the sanitizers' slow CPU model
}

inline HttpResult exchange_http(uint16_t port, const std::string& request,
                                const std::string& source, int timeout_s) {
  const int fd = connect_loopback(port, source);
  timeval tv{timeout_s, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  (void)!::write(fd, request.data(), request.size());
  std::string all;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    all.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  const auto head_end = all.find("\r\n\r\n");
  if (all.rfind("HTTP/1.1 ", 0) != 0 || head_end == std::string::npos)
    throw std::runtime_error("not an HTTP response: " + all.substr(0, 200));
  HttpResult r;
  r.status = std::stoi(all.substr(9, 3));
  r.headers = all.substr(0, head_end);
  r.body = all.substr(head_end + 4);
  if (r.headers.find("Transfer-Encoding: chunked") != std::string::npos) r.body = dechunk(r.body);
  return r;
}

// The "data: " payloads of a server-sent-event body, in order.
inline std::vector<std::string> sse_events(const std::string& body) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos < body.size()) {
    if (body.compare(pos, 6, "data: ") != 0)
      throw std::runtime_error("not an SSE data line: " + body.substr(pos, 80));
    const auto end = body.find("\n\n", pos);
    if (end == std::string::npos) throw std::runtime_error("an SSE event without its blank line");
    out.push_back(body.substr(pos + 6, end - pos - 6));
    pos = end + 2;
  }
  return out;
}

// The value of a sample line "NAME VALUE" in a /metrics body; -1 when absent.
inline double metric(const std::string& body, const std::string& name) {
  const std::string key = "\n" + name + " ";
  const auto p = ("\n" + body).find(key);
  if (p == std::string::npos) return -1;
  return std::stod(body.substr(p + key.size() - 1));
}

}  // namespace rz::net::testing
