// The HTTP side of a connection (see http_session.hpp), over plain TCP or TLS: HttpSession is a
// template on the stream (net/streams.hpp), both instances made by serve_http at the end.
#include "net/http_session.hpp"

#include <chrono>
#include <optional>
#include <random>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/core/detect_ssl.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>

#include "net/auth.hpp"
#include "net/http_handler.hpp"
#include "net/openai_exchange.hpp"
#include "net/origin_policy.hpp"
#include "net/streams.hpp"
#include "net/ws_session.hpp"
#include "proto/openai.hpp"
#include "proto/openai_write.hpp"

namespace rz::net {

namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

ServerSnapshot take_snapshot(ServerState& st) {
  ServerSnapshot s;
  s.model = st.config.model_name;
  s.served_model = st.served_model;
  s.started = st.started;
  s.draining = st.draining;
  s.engine = st.engine->metrics();
  s.net = net_stats(st);
  return s;
}

std::string response_id(proto::ApiKind kind) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id = kind == proto::ApiKind::chat ? "chatcmpl-" : "cmpl-";
  for (int i = 0; i < 24; ++i) id.push_back(kHex[rng() & 15]);
  return id;
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void append_chunk(std::string& out, std::string_view data) {  // HTTP/1.1 chunked framing
  static constexpr char kHex[] = "0123456789abcdef";
  char size[16];
  int n = 0;
  std::size_t v = data.size();
  do {
    size[n++] = kHex[v & 15];
    v >>= 4;
  } while (v);
  while (n) out.push_back(size[--n]);
  out.append("\r\n");
  out.append(data);
  out.append("\r\n");
}

// The engine session's sink of one exchange: frames go onto the connection's strand, tagged with
// the exchange they belong to (frames of an ended exchange are dropped there).
template <class Session>
class ApiSink : public engine::FrameSink {
 public:
  ApiSink(std::weak_ptr<Session> s, uint64_t exchange, asio::any_io_executor ex)
      : session_(std::move(s)), exchange_(exchange), ex_(std::move(ex)) {}
  void deliver(proto::ServerFrame frame) override {
    asio::post(ex_, [s = session_, id = exchange_, f = std::move(frame)]() mutable {
      if (auto p = s.lock()) p->on_api_frame(id, std::move(f));
    });
  }

 private:
  std::weak_ptr<Session> session_;
  uint64_t exchange_;
  asio::any_io_executor ex_;
};

// The answer to a client that speaks plain HTTP (or anything but TLS) to the TLS port.
constexpr std::string_view kNotTls =
    "HTTP/1.1 400 Bad Request\r\nServer: rz\r\nContent-Type: text/plain; charset=utf-8\r\n"
    "Content-Length: 63\r\nConnection: close\r\n\r\n"
    "this port speaks TLS: use https:// (wss:// for the WebSocket)\r\n";

template <class Stream>
class HttpSession : public Connection, public std::enable_shared_from_this<HttpSession<Stream>> {
 public:
  HttpSession(Stream&& stream, std::shared_ptr<ServerState> state, std::string address,
              SocketSlot slot)
      : stream_(std::move(stream)),
        state_(std::move(state)),
        address_(std::move(address)),
        slot_(std::move(slot)) {}

  ~HttpSession() override { state_->remove_exchange(this); }

  void run() {
    asio::dispatch(stream_.get_executor(),
                   beast::bind_front_handler(&HttpSession::start, this->shared_from_this()));
  }

  // Shutdown (the engine has drained already): an exchange still running is cut off.
  void begin_close() override { force_close(); }
  void force_close() override {
    asio::post(stream_.get_executor(), [self = this->shared_from_this()] {
      beast::error_code ignored;
      self->tcp().socket().close(ignored);
      self->end_exchange();
    });
  }

  void on_api_frame(uint64_t exchange, proto::ServerFrame frame) {
    if (!ex_ || exchange != exchange_id_) return;
    write_api(ex_->on_frame(frame));
  }

 private:
  beast::tcp_stream& tcp() { return beast::get_lowest_layer(stream_); }

  // ---- TLS -----------------------------------------------------------------------------------

  // The first request must come soon (an idle socket holds a place): on the TLS port the
  // handshake too, within the same deadline.
  void start() {
    const auto first = state_->config.first_frame_timeout;
    first_deadline_ = std::chrono::steady_clock::now() +
                      (first.count() > 0 ? first : state_->config.handshake_timeout);
    if constexpr (kIsTls<Stream>) {
      tcp().expires_at(first_deadline_);
      beast::async_detect_ssl(
          tcp(), buf_,
          beast::bind_front_handler(&HttpSession::on_detect, this->shared_from_this()));
    } else {
      do_read();
    }
  }

  // The first bytes say whether the client speaks TLS at all.
  void on_detect(beast::error_code ec, bool tls) {
    if (!ec && tls)
      return stream_.async_handshake(
          asio::ssl::stream_base::server, buf_.data(),
          beast::bind_front_handler(&HttpSession::on_handshake, this->shared_from_this()));
    tls_failed(ec);
    if (ec) return;  // gone, or silent until the deadline
    // Plain HTTP (say) to the TLS port: a plain answer that says so, then the rest of the request
    // read and dropped (closing with unread bytes would reset the answer away), bounded by the
    // deadline and a byte count.
    asio::async_write(tcp(), asio::buffer(kNotTls),
                      [self = this->shared_from_this()](beast::error_code e, std::size_t) {
                        if (e) return;
                        beast::error_code ignored;
                        self->tcp().socket().shutdown(tcp::socket::shutdown_send, ignored);
                        self->discard_input(0);
                      });
  }

  void discard_input(std::size_t so_far) {
    if (so_far > (64 << 10)) return;  // the session ends: the socket closes
    buf_.clear();
    tcp().async_read_some(buf_.prepare(4096), [self = this->shared_from_this(), so_far](
                                                  beast::error_code e, std::size_t n) {
      if (!e) self->discard_input(so_far + n);
    });
  }

  void on_handshake(beast::error_code ec, std::size_t used) {
    if (ec) return tls_failed(ec);  // not TLS after all, no shared version or cipher, too slow...
    buf_.consume(used);             // the ClientHello bytes read while detecting
    do_read();
  }

  void tls_failed(beast::error_code ec) {
    state_->counters.tls_handshake_failures++;
    if (ec == beast::error::timeout) state_->counters.first_frame_timeouts++;
  }

  // After the last response of a connection: TLS says close_notify first (bounded by the
  // handshake timeout: a peer that never answers it holds the socket no longer), plain TCP just
  // stops sending. The session, and with it the socket, ends after that.
  void close_gracefully() {
    if constexpr (kIsTls<Stream>) {
      tcp().expires_after(state_->config.handshake_timeout);
      stream_.async_shutdown([self = this->shared_from_this()](beast::error_code) {});
    } else {
      beast::error_code ignored;
      tcp().socket().shutdown(tcp::socket::shutdown_send, ignored);
    }
  }

  // ---- plain HTTP ----------------------------------------------------------------------------

  void do_read() {
    parser_.emplace();
    parser_->header_limit(16 << 10);
    parser_->body_limit(body_limit());
    // The first request by the deadline set at start; later keep-alive ones within the handshake
    // timeout.
    if (got_request_)
      tcp().expires_after(state_->config.handshake_timeout);
    else
      tcp().expires_at(first_deadline_);
    http::async_read(stream_, buf_, *parser_,
                     beast::bind_front_handler(&HttpSession::on_read, this->shared_from_this()));
  }

  static std::string_view header(const http::request<http::string_body>& req, http::field f) {
    const auto v = req[f];
    return std::string_view(v.data(), v.size());
  }

  void on_read(beast::error_code ec, std::size_t) {
    if (ec == http::error::end_of_stream) return close_gracefully();
    if (ec == beast::error::timeout && !got_request_) state_->counters.first_frame_timeouts++;
    if (ec == http::error::body_limit) return refuse_large_body();
    if (ec) return;  // timeout, reset, malformed request: drop the connection
    got_request_ = true;
    http::request<http::string_body> req = parser_->release();
    const std::string_view target(req.target().data(), req.target().size());
    const std::string_view path = target.substr(0, target.find('?'));
    version_ = req.version();
    keep_alive_ = req.keep_alive();
    head_ = req.method() == http::verb::head;
    cors_.clear();
    if (websocket::is_upgrade(req) && path == "/v1/ws") return upgrade(std::move(req));
    state_->counters.http_requests++;
    const bool api = path.substr(0, 4) == "/v1/";
    const bool options = req.method() == http::verb::options;
    // CORS: browsers may use the API from the origins allowed to open the WebSocket (and are
    // told so); a request or preflight from another origin gets 403.
    if (const std::string_view origin = header(req, http::field::origin);
        !origin.empty() && (api || options)) {
      if (!origin_allowed(origin, header(req, http::field::host), state_->origins)) {
        state_->counters.origins_refused++;
        return reply(
            openai_error_response(403, "invalid_request_error",
                                  "this origin may not use the API (see --allowed-origins)",
                                  "origin_not_allowed"),
            false);
      }
      cors_.emplace_back("Access-Control-Allow-Origin", std::string(origin));
      cors_.emplace_back("Vary", "Origin");
    }
    if (options)
      return reply(preflight(header(req, http::field::access_control_request_headers)), false);
    if (!authorized(state_->auth, path, header(req, http::field::authorization)))
      return reply(unauthorized(api), false);
    if (req.method() == http::verb::post && is_openai_generate_path(path))
      return start_exchange(
          req, path == "/v1/completions" ? proto::ApiKind::completion : proto::ApiKind::chat);
    const std::string_view method(req.method_string().data(), req.method_string().size());
    reply(route_http(method, target, [this] { return take_snapshot(*state_); }), false);
  }

  // A body over the parser's limit (do_read): Beast stopped reading, at a Content-Length field
  // over the limit (the header not yet done) or where a chunked body passed it; the request line
  // was parsed. The client gets the 413 of any over-long body (parse_openai_request's, OpenAI's
  // error shape) and the connection closes after it, since the rest of the request was never
  // read; that rest is read and dropped first (drain), as closing a socket with unread bytes
  // resets the connection, which can destroy the answer before the client reads it.
  void refuse_large_body() {
    got_request_ = true;
    state_->counters.http_requests++;
    const auto& head = parser_->get();
    version_ = head.version();
    keep_alive_ = false;
    head_ = false;
    cors_.clear();
    drain_before_close_ = true;
    // Beast refuses a Content-Length over the limit while it reads the header (so the length is
    // not to be asked of it then), a chunked body when the chunks pass it.
    const auto length = parser_->is_header_done() ? parser_->content_length() : boost::none;
    reply(openai_error_response(413, "invalid_request_error",
                                (length ? "the body of " + std::to_string(*length) + " bytes"
                                        : std::string("the body")) +
                                    " exceeds the limit of " + std::to_string(body_limit()) +
                                    " bytes",
                                "too_large"),
          true);
  }

  std::size_t body_limit() const {
    return std::max<std::size_t>(64 << 10, state_->limits.max_frame_bytes);
  }

  // After a refused body: what the client still sends is read and dropped until it closes or
  // stops (the handshake timeout, or kDrainMax bytes), then the connection closes as usual.
  static constexpr std::size_t kDrainMax = std::size_t{64} << 20;
  void drain() {
    if constexpr (!kIsTls<Stream>) {  // the answer is whole: say so, then read what is left
      beast::error_code ignored;
      tcp().socket().shutdown(tcp::socket::shutdown_send, ignored);
    }
    tcp().expires_after(state_->config.handshake_timeout);
    drain_more(0);
  }
  void drain_more(std::size_t drained) {
    buf_.consume(buf_.size());
    if (drained >= kDrainMax) return close_gracefully();
    stream_.async_read_some(buf_.prepare(64 << 10), [self = this->shared_from_this(), drained](
                                                        beast::error_code ec, std::size_t n) {
      if (ec) {
        if constexpr (kIsTls<Stream>) self->close_gracefully();
        return;
      }
      self->buf_.commit(n);
      self->drain_more(drained + n);
    });
  }

  // The answer to an OPTIONS request: a CORS preflight (the origin was checked) or a plain one.
  static HttpResponse preflight(std::string_view requested_headers) {
    HttpResponse r{204, "text/plain; charset=utf-8", "", ""};
    r.headers.emplace_back("Allow", "GET, HEAD, POST, OPTIONS");
    r.headers.emplace_back("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    r.headers.emplace_back("Access-Control-Allow-Headers",
                           requested_headers.empty() ? std::string("Authorization, Content-Type")
                                                     : std::string(requested_headers));
    r.headers.emplace_back("Access-Control-Max-Age", "600");
    return r;
  }

  static HttpResponse unauthorized(bool api) {
    HttpResponse r =
        api ? openai_error_response(
                  401, "invalid_request_error",
                  "a valid API key is needed: send it as Authorization: Bearer KEY",
                  "invalid_api_key")
            : HttpResponse{401, "text/plain; charset=utf-8",
                           "this server needs an API key: Authorization: Bearer KEY\n", ""};
    r.headers.emplace_back("WWW-Authenticate", "Bearer");
    return r;
  }

  void upgrade(http::request<http::string_body> req) {
    head_ = false;
    if (!origin_allowed(header(req, http::field::origin), header(req, http::field::host),
                        state_->origins)) {
      state_->counters.origins_refused++;
      return reply({403, "text/plain; charset=utf-8",
                    "this origin may not open the WebSocket (see --allowed-origins)\n", ""},
                   true);
    }
    if (!authorized(state_->auth, "/v1/ws", header(req, http::field::authorization),
                    header(req, http::field::sec_websocket_protocol)))
      return reply(unauthorized(false), true);
    const ServerState::Reserve r = state_->try_reserve(address_);
    if (r != ServerState::Reserve::ok) {
      state_->counters.connections_refused++;
      const char* why = r == ServerState::Reserve::draining ? "the server is shutting down\n"
                        : r == ServerState::Reserve::address_full
                            ? "too many connections from this address; retry later\n"
                            : "too many connections; retry later\n";
      return reply({503, "text/plain; charset=utf-8", why, ""}, true);
    }
    auto ws =
        std::make_shared<WsSession<Stream>>(std::move(stream_), state_, address_, std::move(slot_));
    ws->run(std::move(req));
  }

  void reply(HttpResponse r, bool close) {
    auto res = std::make_shared<http::response<http::string_body>>(
        static_cast<http::status>(r.status), version_);
    res->set(http::field::server, "rz");
    res->set(http::field::content_type, r.content_type);
    res->set(http::field::cache_control, "no-store");
    if (!r.allow.empty()) res->set(http::field::allow, r.allow);
    for (const auto& [name, value] : cors_) res->set(name, value);
    for (const auto& [name, value] : r.headers) res->set(name, value);
    res->keep_alive(keep_alive_ && !close && !state_->draining);
    res->body() = std::move(r.body);
    res->prepare_payload();
    if (head_) res->body().clear();  // Content-Length stays that of the GET
    auto self = this->shared_from_this();
    tcp().expires_after(state_->config.idle_timeout);
    if (head_) {
      auto sr = std::make_shared<http::response_serializer<http::string_body>>(*res);
      http::async_write_header(stream_, *sr, [self, res, sr](beast::error_code ec, std::size_t) {
        self->after_write(ec, res->keep_alive());
      });
      return;
    }
    http::async_write(stream_, *res, [self, res](beast::error_code ec, std::size_t) {
      self->after_write(ec, res->keep_alive());
    });
  }

  void after_write(beast::error_code ec, bool keep_alive) {
    if (ec) return end_exchange();
    end_exchange();
    if (!keep_alive) return drain_before_close_ ? drain() : close_gracefully();
    if (watching_) {  // the peer watch read is still pending: cancel it, then read on
      resume_after_watch_ = true;
      // Bounded: over TLS a read that got part of a record reads on, past the cancel.
      tcp().expires_after(state_->config.handshake_timeout);
      tcp().socket().cancel();
      return;
    }
    do_read();
  }

  // ---- the OpenAI API ------------------------------------------------------------------------

  void start_exchange(const http::request<http::string_body>& req, proto::ApiKind kind) {
    if (state_->draining)
      return reply(
          openai_error_response(503, "server_error", "the server is shutting down", "overloaded"),
          true);
    proto::OpenAiParse parsed = proto::parse_openai_request(kind, req.body(), state_->limits);
    if (auto* e = std::get_if<proto::ApiError>(&parsed))
      return reply({e->status, "application/json", proto::error_json(*e) + "\n", ""}, false);
    auto& request = std::get<proto::OpenAiRequest>(parsed);
    std::vector<proto::GenerateRequest> gens = proto::to_generate_requests(request, state_->limits);
    proto::ResponseMeta meta{kind, response_id(kind), unix_now(), state_->served_model};
    ex_.emplace(std::move(request), std::move(meta));
    ++exchange_id_;
    // The engine holds the sink only weakly: the session holds itself, until end_exchange.
    self_ = this->shared_from_this();
    state_->add_exchange(this, this->weak_from_this());
    sink_ = std::make_shared<ApiSink<HttpSession>>(this->weak_from_this(), exchange_id_,
                                                   stream_.get_executor());
    session_ = state_->engine->open_session(std::weak_ptr<engine::FrameSink>(sink_));
    for (auto& g : gens) session_.generate(std::move(g));
    tcp().expires_never();  // the watch read waits as long as the generation takes
    watch_peer();
  }

  // A read stays pending while the exchange runs: it fails when the peer goes away, which
  // cancels the requests. Bytes that arrive (a pipelined request) stay in buf_ for later.
  void watch_peer() {
    if (watching_ || !ex_) return;
    watching_ = true;
    stream_.async_read_some(
        buf_.prepare(4096),
        beast::bind_front_handler(&HttpSession::on_peer, this->shared_from_this()));
  }

  void on_peer(beast::error_code ec, std::size_t n) {
    watching_ = false;
    if (resume_after_watch_) {  // cancelled on purpose: the response is out, read the next one
      resume_after_watch_ = false;
      if (!ec) buf_.commit(n);
      return do_read();
    }
    if (ec) {  // the peer closed or reset: cancel its requests, close the socket
      beast::error_code ignored;
      tcp().socket().close(ignored);
      return end_exchange();
    }
    buf_.commit(n);
  }

  void write_api(OpenAiExchange::Output out) {
    if (out.status > 0 && !out.event_stream)  // one whole response (or an error before any)
      return reply({out.status, out.content_type, std::move(out.body), ""}, false);
    if (out.status > 0) {
      pending_.append(
          "HTTP/1.1 200 OK\r\nServer: rz\r\nContent-Type: text/event-stream\r\n"
          "Cache-Control: no-cache\r\nX-Accel-Buffering: no\r\n"
          "Transfer-Encoding: chunked\r\n");
      for (const auto& [name, value] : cors_) pending_.append(name + ": " + value + "\r\n");
      pending_.append(keep_alive_ ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n");
    }
    if (!ex_->streaming()) return;  // a whole response: nothing until its end
    if (!out.body.empty()) append_chunk(pending_, out.body);
    if (out.end) {
      pending_.append("0\r\n\r\n");
      stream_done_ = true;
    }
    // The peer reads nothing: past the per-connection byte bound (--queue-bytes, as on the
    // WebSocket) the connection is closed and its requests cancelled.
    if (pending_.size() > state_->config.queue.max_bytes) {
      state_->counters.slow_consumers++;
      beast::error_code ignored;
      tcp().socket().close(ignored);
      return end_exchange();
    }
    pump();
  }

  void pump() {
    if (writing_ || pending_.empty()) return;
    writing_ = true;
    wbuf_.swap(pending_);
    pending_.clear();
    tcp().expires_after(state_->config.idle_timeout);  // a write that never completes ends it
    asio::async_write(
        stream_, asio::buffer(wbuf_),
        beast::bind_front_handler(&HttpSession::on_stream_write, this->shared_from_this()));
  }

  void on_stream_write(beast::error_code ec, std::size_t) {
    writing_ = false;
    wbuf_.clear();
    if (ec) {
      beast::error_code ignored;
      tcp().socket().close(ignored);
      return end_exchange();
    }
    tcp().expires_never();
    if (!pending_.empty()) return pump();
    if (stream_done_) {
      stream_done_ = false;
      after_write({}, keep_alive_ && !state_->draining);
    }
  }

  // The exchange is over (answered, failed, or the peer is gone): its engine session closes
  // (cancelling whatever still runs) and later frames are dropped.
  void end_exchange() {
    if (!ex_) return;
    ex_.reset();
    ++exchange_id_;
    if (session_.valid()) session_.close();
    session_ = {};
    sink_.reset();
    state_->remove_exchange(this);
    pending_.clear();
    stream_done_ = false;
    self_.reset();  // every caller runs in a handler that holds its own reference
  }

  Stream stream_;
  std::shared_ptr<ServerState> state_;
  std::string address_;  // the peer's IP
  SocketSlot slot_;
  std::chrono::steady_clock::time_point first_deadline_;  // of the first request (and TLS)
  bool got_request_ = false;
  beast::flat_buffer buf_;
  std::optional<http::request_parser<http::string_body>> parser_;
  unsigned version_ = 11;
  bool keep_alive_ = true;
  bool head_ = false;
  bool drain_before_close_ = false;                        // refuse_large_body
  std::vector<std::pair<std::string, std::string>> cors_;  // CORS header fields of this request

  std::optional<OpenAiExchange> ex_;
  uint64_t exchange_id_ = 0;
  std::shared_ptr<HttpSession> self_;
  std::shared_ptr<ApiSink<HttpSession>> sink_;
  engine::Session session_;
  bool watching_ = false, resume_after_watch_ = false;
  bool stream_done_ = false, writing_ = false;
  std::string pending_, wbuf_;
};

}  // namespace

void serve_http(tcp::socket&& socket, std::shared_ptr<ServerState> state, std::string address,
                SocketSlot slot) {
  if (state->tls) {
    TlsStream stream(std::move(socket), *state->tls);
    std::make_shared<HttpSession<TlsStream>>(std::move(stream), std::move(state),
                                             std::move(address), std::move(slot))
        ->run();
  } else {
    std::make_shared<HttpSession<PlainStream>>(PlainStream(std::move(socket)), std::move(state),
                                               std::move(address), std::move(slot))
        ->run();
  }
}

}  // namespace rz::net
