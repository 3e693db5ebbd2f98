// The listener and the Server's start/shutdown (see server.hpp). An accepted socket gets its own
// strand and an HTTP session (net/http_session.hpp; over TLS when the server has a certificate),
// which may hand it to a WsSession.
#include "net/server.hpp"

#include <future>
#include <thread>
#include <vector>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>

#include "formats/common.hpp"
#include "net/http_session.hpp"
#include "net/server_state.hpp"
#include "net/tls.hpp"

namespace rz::net {

namespace beast = boost::beast;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

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
    serve_http(std::move(s), state, std::move(address), std::move(slot));
  }
};

Server::Server(std::shared_ptr<engine::Engine> engine, ServerConfig config)
    : impl_(std::make_unique<Impl>()) {
  impl_->state->config = std::move(config);
  impl_->state->limits = engine->config().limits;
  impl_->state->auth.keys = impl_->state->config.api_keys;
  impl_->state->auth.metrics_public = impl_->state->config.metrics_public;
  impl_->state->engine = std::move(engine);
}

Server::~Server() { shutdown(std::chrono::milliseconds(0)); }

void Server::start() {
  Impl& m = *impl_;
  const ServerConfig& cfg = m.state->config;
  const std::string where = cfg.host + ":" + std::to_string(cfg.port);
  if (!cfg.tls_cert_file.empty() || !cfg.tls_key_file.empty())
    m.state->tls = load_tls_context(cfg.tls_cert_file, cfg.tls_key_file);
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
  m.state->served_model = cfg.served_model_name;
  if (m.state->served_model.empty()) {
    m.state->served_model = cfg.model_name;
    for (std::string_view ext : {".gguf", ".safetensors"})
      if (m.state->served_model.size() > ext.size() && m.state->served_model.ends_with(ext))
        m.state->served_model.resize(m.state->served_model.size() - ext.size());
  }
  m.state->started = std::chrono::duration_cast<std::chrono::seconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
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
