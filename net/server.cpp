// The listener, the plain HTTP sessions and the Server's start/shutdown (see server.hpp).
// An accepted socket gets its own strand; its HttpSession reads requests (keep-alive) and either
// answers them through route_http or hands the socket to a WsSession on an upgrade to /v1/ws.
#include "net/server.hpp"

#include <future>
#include <thread>
#include <vector>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>

#include "formats/common.hpp"
#include "net/http_handler.hpp"
#include "net/origin_policy.hpp"
#include "net/server_state.hpp"
#include "net/ws_session.hpp"

namespace rz::net {

namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

NetStats net_stats(ServerState& st) {
  NetStats n;
  n.connections_open = static_cast<uint64_t>(st.open_connections());
  n.connections_total = st.counters.connections_total;
  n.connections_refused = st.counters.connections_refused;
  n.origins_refused = st.counters.origins_refused;
  n.sockets_refused = st.counters.sockets_refused;
  n.first_frame_timeouts = st.counters.first_frame_timeouts;
  n.frames_received = st.counters.frames_received;
  n.frames_sent = st.counters.frames_sent;
  n.frames_coalesced = st.counters.frames_coalesced;
  n.slow_consumers = st.counters.slow_consumers;
  n.http_requests = st.counters.http_requests;
  return n;
}

ServerSnapshot take_snapshot(ServerState& st) {
  ServerSnapshot s;
  s.model = st.config.model_name;
  s.draining = st.draining;
  s.engine = st.engine->metrics();
  s.net = net_stats(st);
  return s;
}

class HttpSession : public std::enable_shared_from_this<HttpSession> {
 public:
  HttpSession(tcp::socket&& socket, std::shared_ptr<ServerState> state, std::string address,
              SocketSlot slot)
      : stream_(std::move(socket)),
        state_(std::move(state)),
        address_(std::move(address)),
        slot_(std::move(slot)) {}

  void run() {
    asio::dispatch(stream_.get_executor(),
                   beast::bind_front_handler(&HttpSession::do_read, shared_from_this()));
  }

 private:
  void do_read() {
    parser_.emplace();
    parser_->header_limit(16 << 10);
    parser_->body_limit(64 << 10);
    // The first request must come soon (an idle socket holds a place); later keep-alive ones
    // within the handshake timeout.
    const auto first = state_->config.first_frame_timeout;
    stream_.expires_after(!got_request_ && first.count() > 0 ? first
                                                             : state_->config.handshake_timeout);
    http::async_read(stream_, buf_, *parser_,
                     beast::bind_front_handler(&HttpSession::on_read, shared_from_this()));
  }

  void on_read(beast::error_code ec, std::size_t) {
    if (ec == http::error::end_of_stream) return shutdown_send();
    if (ec == beast::error::timeout && !got_request_) state_->counters.first_frame_timeouts++;
    if (ec) return;  // timeout, reset, malformed request: drop the connection
    got_request_ = true;
    http::request<http::string_body> req = parser_->release();
    if (websocket::is_upgrade(req)) {
      const std::string_view target(req.target().data(), req.target().size());
      if (target.substr(0, target.find('?')) == "/v1/ws") {
        const auto origin = req[http::field::origin];
        const auto host = req[http::field::host];
        if (!origin_allowed(std::string_view(origin.data(), origin.size()),
                            std::string_view(host.data(), host.size()), state_->origins)) {
          state_->counters.origins_refused++;
          return reply(req,
                       {403, "text/plain; charset=utf-8",
                        "this origin may not open the WebSocket (see --allowed-origins)\n", ""},
                       true);
        }
        const ServerState::Reserve r = state_->try_reserve(address_);
        if (r != ServerState::Reserve::ok) {
          state_->counters.connections_refused++;
          const char* why = r == ServerState::Reserve::draining ? "the server is shutting down\n"
                            : r == ServerState::Reserve::address_full
                                ? "too many connections from this address; retry later\n"
                                : "too many connections; retry later\n";
          return reply(req, {503, "text/plain; charset=utf-8", why, ""}, true);
        }
        auto ws =
            std::make_shared<WsSession>(std::move(stream_), state_, address_, std::move(slot_));
        ws->run(std::move(req));
        return;
      }
    }
    state_->counters.http_requests++;
    const std::string_view method(req.method_string().data(), req.method_string().size());
    const std::string_view target(req.target().data(), req.target().size());
    HttpResponse r = route_http(method, target, [this] { return take_snapshot(*state_); });
    reply(req, std::move(r), false);
  }

  void reply(const http::request<http::string_body>& req, HttpResponse r, bool close) {
    auto res = std::make_shared<http::response<http::string_body>>(
        static_cast<http::status>(r.status), req.version());
    res->set(http::field::server, "rz");
    res->set(http::field::content_type, r.content_type);
    res->set(http::field::cache_control, "no-store");
    if (!r.allow.empty()) res->set(http::field::allow, r.allow);
    res->keep_alive(req.keep_alive() && !close && !state_->draining);
    const bool head = req.method() == http::verb::head;
    res->body() = std::move(r.body);
    res->prepare_payload();
    if (head) res->body().clear();  // Content-Length stays that of the GET
    auto self = shared_from_this();
    if (head) {
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
    if (ec) return;
    if (!keep_alive) return shutdown_send();
    do_read();
  }

  void shutdown_send() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
  }

  beast::tcp_stream stream_;
  std::shared_ptr<ServerState> state_;
  std::string address_;  // the peer's IP
  SocketSlot slot_;
  bool got_request_ = false;
  beast::flat_buffer buf_;
  std::optional<http::request_parser<http::string_body>> parser_;
};

}  // namespace

struct Server::Impl {
  std::shared_ptr<ServerState> state = std::make_shared<ServerState>();
  asio::io_context ioc;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  tcp::acceptor acceptor{asio::make_strand(ioc)};
  asio::steady_timer accept_retry{acceptor.get_executor()};
  std::vector<std::thread> threads;
  uint16_t port = 0;
  bool started = false, stopped = false;

  void do_accept() {
    acceptor.async_accept(asio::make_strand(ioc), [this](beast::error_code ec, tcp::socket s) {
      if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
      if (!ec) on_accepted(std::move(s));
      if (ec == asio::error::no_descriptors || ec == asio::error::no_buffer_space ||
          ec == asio::error::no_memory ||
          ec == beast::error_code(ENFILE, boost::system::system_category())) {
        // Out of descriptors (the socket cap should prevent it): the pending connection stays
        // in the backlog, so accepting again at once would spin. Retry shortly.
        accept_retry.expires_after(std::chrono::milliseconds(100));
        accept_retry.async_wait([this](beast::error_code e) {
          if (!e && acceptor.is_open()) do_accept();
        });
        return;
      }
      do_accept();
    });
  }

  void on_accepted(tcp::socket s) {
    beast::error_code ignored;
    const tcp::endpoint peer = s.remote_endpoint(ignored);
    std::string address = ignored ? std::string("?") : peer.address().to_string();
    if (!state->try_open_socket(address)) {
      // At the cap, or this address holds its share: refuse cleanly (a best-effort 503 that
      // never blocks, then close).
      state->counters.sockets_refused++;
      static constexpr std::string_view kBusy =
          "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
          "Content-Length: 34\r\nConnection: close\r\n\r\ntoo many open connections; retry\r\n";
      s.non_blocking(true, ignored);
      s.write_some(asio::buffer(kBusy.data(), kBusy.size()), ignored);
      s.close(ignored);
      return;
    }
    SocketSlot slot(state, address);
    s.set_option(tcp::no_delay(true), ignored);
    if (state->config.socket_send_buffer > 0)
      s.set_option(asio::socket_base::send_buffer_size(state->config.socket_send_buffer), ignored);
    std::make_shared<HttpSession>(std::move(s), state, std::move(address), std::move(slot))->run();
  }
};

Server::Server(std::shared_ptr<engine::Engine> engine, ServerConfig config)
    : impl_(std::make_unique<Impl>()) {
  impl_->state->config = std::move(config);
  impl_->state->limits = engine->config().limits;
  impl_->state->engine = std::move(engine);
}

Server::~Server() { shutdown(std::chrono::milliseconds(0)); }

void Server::start() {
  Impl& m = *impl_;
  const ServerConfig& cfg = m.state->config;
  const std::string where = cfg.host + ":" + std::to_string(cfg.port);
  beast::error_code ec;
  tcp::resolver resolver(m.ioc);
  auto results = resolver.resolve(cfg.host, std::to_string(cfg.port), ec);
  if (ec || results.empty()) throw Error(where + ": cannot resolve the host: " + ec.message());
  const tcp::endpoint ep = results.begin()->endpoint();
  m.acceptor.open(ep.protocol(), ec);
  if (!ec) m.acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) m.acceptor.bind(ep, ec);
  if (!ec) m.acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) throw Error(where + ": " + ec.message());
  m.port = m.acceptor.local_endpoint().port();
  m.state->origins.allowed = cfg.allowed_origins;
  m.state->origins.loopback_bound = m.acceptor.local_endpoint().address().is_loopback();
  m.work.emplace(m.ioc.get_executor());
  m.do_accept();
  const int n = std::max(1, cfg.io_threads);
  for (int i = 0; i < n; ++i) m.threads.emplace_back([&m] { m.ioc.run(); });
  m.started = true;
}

uint16_t Server::port() const { return impl_->port; }

void Server::shutdown(std::chrono::milliseconds drain) {
  Impl& m = *impl_;
  if (m.stopped) return;
  m.stopped = true;
  m.state->draining = true;
  if (m.started) {  // stop accepting, on the acceptor's strand
    std::promise<void> closed;
    asio::post(m.acceptor.get_executor(), [&] {
      beast::error_code ignored;
      m.acceptor.close(ignored);
      m.accept_retry.cancel();
      closed.set_value();
    });
    closed.get_future().wait();
  }
  m.state->engine->shutdown(drain);
  if (m.started) {
    using Clock = std::chrono::steady_clock;
    auto wait_closed = [&](std::chrono::milliseconds budget) {
      const auto until = Clock::now() + budget;
      while (m.state->open_connections() > 0 && Clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return m.state->open_connections() == 0;
    };
    m.state->for_each_live([](Connection& c) { c.begin_close(); });
    if (!wait_closed(std::chrono::seconds(3))) {
      m.state->for_each_live([](Connection& c) { c.force_close(); });
      wait_closed(std::chrono::seconds(1));
    }
    m.work.reset();
    m.ioc.stop();  // idle keep-alive HTTP connections end here
    for (auto& t : m.threads) t.join();
    m.threads.clear();
  }
}

NetStats Server::stats() const { return net_stats(*impl_->state); }

}  // namespace rz::net
