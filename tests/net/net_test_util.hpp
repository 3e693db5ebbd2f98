// Helpers of the network tests: a WebSocket client (Beast) whose every wait is bounded in time,
// over TCP (WsClient) or TLS (WssClient); HTTP requests over a POSIX socket, plain or TLS
// (ClientConn, exchange_http); and a reader of server frames (simdjson). Header-only; included by
// the server tests through tests/net/server_fixture.hpp.
//
// A server is reached through an Endpoint: its port, and for a TLS server the client context
// that trusts its certificate (tls_client_context). A bare port converts to a plain Endpoint.
#pragma once
#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <simdjson.h>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/beast/websocket.hpp>

namespace rz::net::testing {

namespace beast = boost::beast;
namespace websocket = beast::websocket;
namespace asio = boost::asio;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;
using namespace std::chrono_literals;

// Where a test client connects: 127.0.0.1:port, over TLS when `tls` (a client context) is set.
struct Endpoint {
  Endpoint(uint16_t p, ssl::context* t = nullptr) : port(p), tls(t) {}  // implicit from a port
  uint16_t port;
  ssl::context* tls;
};

// A TLS client context that trusts `ca_pem` (the test certificate, tests/net/test_certificate.hpp)
// and nothing else, and checks the server's certificate. `max_version`: 0, or the highest
// version to offer (TLS1_1_VERSION: an old client; security level 0, which TLS 1.1 needs).
inline std::unique_ptr<ssl::context> tls_client_context(const std::string& ca_pem,
                                                        int max_version = 0) {
  auto c = std::make_unique<ssl::context>(ssl::context::tls_client);
  c->add_certificate_authority(asio::buffer(ca_pem));
  c->set_verify_mode(ssl::verify_peer);
  if (max_version) {
    SSL_CTX_set_max_proto_version(c->native_handle(), max_version);
    if (max_version < TLS1_2_VERSION) {
      SSL_CTX_set_min_proto_version(c->native_handle(), max_version);
      SSL_CTX_set_security_level(c->native_handle(), 0);
    }
  }
  return c;
}

// The server's certificate must name 127.0.0.1 (besides chaining to the trusted one).
inline void expect_loopback_certificate(SSL* ssl) {
  X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), "127.0.0.1");
}

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

// A WebSocket client over `Stream`: beast::tcp_stream (WsClient) or TLS over it (WssClient).
template <class Stream>
class BasicWsClient {
 public:
  static constexpr bool kTls = !std::is_same_v<Stream, beast::tcp_stream>;

  // rcvbuf > 0 shrinks the socket's receive buffer before connecting (a slow reader); `source`
  // binds the client to that local address first (any of 127.0.0.0/8 is loopback on Linux).
  explicit BasicWsClient(const Endpoint& ep, int rcvbuf = 0, const std::string& source = "")
      : ws_(next_layer(ioc_, ep)) {
    connect(ws_, ep, rcvbuf, source);
    ws_.handshake(response_, "127.0.0.1:" + std::to_string(ep.port), "/v1/ws");
    ws_.text(true);
  }
  // Connect and try the upgrade; returns the HTTP status (101 when it was accepted). `origin`:
  // an Origin header to send (none when empty); `source`: the local address to connect from.
  static int try_upgrade(const Endpoint& ep, const std::string& origin = "",
                         const std::string& source = "") {
    auto add_origin = [&](websocket::request_type& req) {
      if (!origin.empty()) req.set(beast::http::field::origin, origin);
    };
    return upgrade_status(ep, source, add_origin).first;
  }

  // The upgrade with an Authorization header and a Sec-WebSocket-Protocol offer (each left out
  // when empty); returns the HTTP status and the subprotocol the server selected.
  static std::pair<int, std::string> try_upgrade_auth(const Endpoint& ep,
                                                      const std::string& authorization,
                                                      const std::string& protocols) {
    return upgrade_status(ep, "", [&](websocket::request_type& req) {
      if (!authorization.empty()) req.set(beast::http::field::authorization, authorization);
      if (!protocols.empty()) req.set(beast::http::field::sec_websocket_protocol, protocols);
    });
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
  static Stream next_layer(asio::io_context& ioc, const Endpoint& ep) {
    if constexpr (kTls) {
      if (!ep.tls) throw std::runtime_error("a TLS client needs an Endpoint with a TLS context");
      return Stream(ioc, *ep.tls);
    } else {
      if (ep.tls) throw std::runtime_error("a plain client was given a TLS Endpoint");
      return Stream(ioc);
    }
  }

  // The TCP connection (and over TLS the handshake, checking the certificate); throws on failure.
  static void connect(websocket::stream<Stream>& ws, const Endpoint& ep, int rcvbuf,
                      const std::string& source) {
    auto& sock = beast::get_lowest_layer(ws).socket();
    sock.open(tcp::v4());
    if (rcvbuf > 0) sock.set_option(asio::socket_base::receive_buffer_size(rcvbuf));
    if (!source.empty()) sock.bind(tcp::endpoint(asio::ip::make_address(source), 0));
    sock.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), ep.port));
    if constexpr (kTls) {
      expect_loopback_certificate(ws.next_layer().native_handle());
      ws.next_layer().handshake(ssl::stream_base::client);
    }
  }

  // Connects and tries the upgrade with request fields from `decorate`: the HTTP status and the
  // selected subprotocol.
  template <class Decorate>
  static std::pair<int, std::string> upgrade_status(const Endpoint& ep, const std::string& source,
                                                    Decorate decorate) {
    asio::io_context ioc;
    websocket::stream<Stream> ws(next_layer(ioc, ep));
    connect(ws, ep, 0, source);
    ws.set_option(websocket::stream_base::decorator(decorate));
    websocket::response_type res;
    beast::error_code ec;
    ws.handshake(res, "127.0.0.1:" + std::to_string(ep.port), "/v1/ws", ec);
    const auto p = res[beast::http::field::sec_websocket_protocol];
    return {static_cast<int>(res.result_int()), std::string(p.data(), p.size())};
  }

  asio::io_context ioc_;
  websocket::stream<Stream> ws_;
  websocket::response_type response_;
  beast::flat_buffer buf_;
  bool closed_ = false;
  beast::error_code error_;
};

using WsClient = BasicWsClient<beast::tcp_stream>;
using WssClient = BasicWsClient<beast::ssl_stream<beast::tcp_stream>>;

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

// One client connection to a server (an Endpoint) from `source` (when given): plain TCP, or TLS
// over it checking the server's certificate (OpenSSL on the socket). Every read is bounded by
// SO_RCVTIMEO, the TLS handshake's too. Throws when it cannot connect or the handshake fails.
class ClientConn {
 public:
  explicit ClientConn(const Endpoint& ep, const std::string& source = "", int timeout_s = 10)
      : fd_(connect_loopback(ep.port, source)) {
    // A write to a connection the server closed fails (EPIPE) instead of killing the test.
    static const bool sigpipe_ignored = std::signal(SIGPIPE, SIG_IGN) != SIG_ERR;
    (void)sigpipe_ignored;
    timeval tv{timeout_s, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (!ep.tls) return;
    ssl_ = SSL_new(ep.tls->native_handle());
    expect_loopback_certificate(ssl_);
    SSL_set_fd(ssl_, fd_);
    if (SSL_connect(ssl_) != 1) {
      char why[256];
      ERR_error_string_n(ERR_get_error(), why, sizeof why);
      ERR_clear_error();
      close();
      throw std::runtime_error(std::string("TLS handshake failed: ") + why);
    }
  }
  ~ClientConn() { close(); }
  ClientConn(const ClientConn&) = delete;
  ClientConn& operator=(const ClientConn&) = delete;

  // Writes all of `data`; false when the connection failed.
  bool write(const std::string& data) {
    std::size_t done = 0;
    while (done < data.size()) {
      const ssize_t n =
          ssl_ ? SSL_write(ssl_, data.data() + done, static_cast<int>(data.size() - done))
               : ::write(fd_, data.data() + done, data.size() - done);
      if (n <= 0) return false;
      done += static_cast<std::size_t>(n);
    }
    return true;
  }
  // Some bytes into `buf`; <= 0 when the peer closed, the connection failed or the read timed
  // out.
  ssize_t read(char* buf, std::size_t size) {
    return ssl_ ? SSL_read(ssl_, buf, static_cast<int>(size)) : ::read(fd_, buf, size);
  }
  // Everything until the peer closes (or a read fails or times out).
  std::string read_all() {
    std::string all;
    char buf[4096];
    for (ssize_t n; (n = read(buf, sizeof buf)) > 0;) all.append(buf, static_cast<std::size_t>(n));
    return all;
  }
  // Reads until `all` (what came so far, appended to) holds `needle`; false when the connection
  // ended first.
  bool read_until(std::string& all, std::string_view needle) {
    char buf[4096];
    while (all.find(needle) == std::string::npos) {
      const ssize_t n = read(buf, sizeof buf);
      if (n <= 0) return false;
      all.append(buf, static_cast<std::size_t>(n));
    }
    return true;
  }
  // Closes without a TLS close_notify: the client just goes away.
  void close() {
    if (ssl_) SSL_free(ssl_);
    ssl_ = nullptr;
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
  SSL* ssl_ = nullptr;
};

// Sends `request` on a fresh connection from `source` (when given) and reads the answer until
// the server closes; every wait bounded by SO_RCVTIMEO. A chunked body is decoded.
inline HttpResult exchange_http(const Endpoint& ep, const std::string& request,
                                const std::string& source = "", int timeout_s = 10);

// GET (or another method) with Connection: close, from `source` when given.
inline HttpResult http_request(const Endpoint& ep, const std::string& target,
                               const std::string& method = "GET", const std::string& source = "") {
  return exchange_http(
      ep, method + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
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
inline HttpResult http_send(const Endpoint& ep, const std::string& target, const std::string& body,
                            const std::string& method = "POST", const std::string& headers = "") {
  return exchange_http(ep,
                       method + " " + target +
                           " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                           "Content-Type: application/json\r\nContent-Length: " +
                           std::to_string(body.size()) + "\r\n" + headers + "\r\n" + body,
                       "", 300);  // a whole generation under the sanitizers' slow CPU model
}

inline HttpResult exchange_http(const Endpoint& ep, const std::string& request,
                                const std::string& source, int timeout_s) {
  ClientConn conn(ep, source, timeout_s);
  conn.write(request);
  const std::string all = conn.read_all();
  conn.close();
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
