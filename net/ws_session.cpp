// One WebSocket connection (see ws_session.hpp): read loop, typed outgoing queue with one write
// at a time, slow-consumer signal, clean close at shutdown; over plain TCP or TLS (both
// instantiated at the end).
#include "net/ws_session.hpp"

#include <boost/asio/post.hpp>

#include "proto/parse.hpp"
#include "proto/serialize.hpp"

namespace rz::net {

namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;

template <class Stream>
WsSession<Stream>::WsSession(Stream&& stream, std::shared_ptr<ServerState> state,
                             std::string address, SocketSlot slot)
    : ws_(std::move(stream)),
      state_(std::move(state)),
      address_(std::move(address)),
      slot_(std::move(slot)),
      first_frame_timer_(ws_.get_executor()),
      queue_(state_->config.queue) {}

template <class Stream>
WsSession<Stream>::~WsSession() {
  if (session_.valid() && !ended_) session_.close();
  state_->release(this, address_);
}

template <class Stream>
void WsSession<Stream>::run(const http::request<http::string_body>& req) {
  const ServerConfig& cfg = state_->config;
  beast::get_lowest_layer(ws_).expires_never();  // the websocket stream keeps its own timers
  websocket::stream_base::timeout t;
  t.handshake_timeout = cfg.handshake_timeout;
  t.idle_timeout = cfg.idle_timeout;  // a ping at half of it; no answer at all -> closed
  t.keep_alive_pings = true;
  ws_.set_option(t);
  // A browser that offered subprotocols (the key as "rz-key.KEY", net/auth.hpp) needs one back.
  const auto offered = req[http::field::sec_websocket_protocol];
  std::string protocol = selected_subprotocol(std::string_view(offered.data(), offered.size()));
  ws_.set_option(websocket::stream_base::decorator([protocol](websocket::response_type& res) {
    res.set(http::field::server, "rz");
    if (!protocol.empty()) res.set(http::field::sec_websocket_protocol, protocol);
  }));
  std::size_t cap = cfg.hard_frame_cap;
  if (cap == 0) cap = std::max<std::size_t>(4 * state_->limits.max_frame_bytes, 64 << 10);
  cap = std::max(cap, state_->limits.max_frame_bytes + 1);
  ws_.read_message_max(cap);  // beyond: Beast closes with 1009 (too big)
  ws_.text(true);
  state_->add(this, this->weak_from_this());
  ws_.async_accept(req, beast::bind_front_handler(&WsSession::on_accept, this->shared_from_this()));
}

template <class Stream>
void WsSession<Stream>::on_accept(beast::error_code ec) {
  if (ec) return end();
  accepted_ = true;
  state_->counters.connections_total++;
  session_ =
      state_->engine->open_session(std::weak_ptr<engine::FrameSink>(this->shared_from_this()));
  if (closing_) return do_write();  // shutdown began during the handshake
  if (state_->config.first_frame_timeout.count() > 0) {
    first_frame_timer_.expires_after(state_->config.first_frame_timeout);
    first_frame_timer_.async_wait(
        beast::bind_front_handler(&WsSession::on_first_frame_deadline, this->shared_from_this()));
  }
  do_read();
}

template <class Stream>
void WsSession<Stream>::on_first_frame_deadline(beast::error_code ec) {
  if (ec || got_frame_ || ended_ || close_sent_) return;  // cancelled, or a frame came in time
  state_->counters.first_frame_timeouts++;
  if (writing_) {  // cannot send a close frame now: just drop the socket
    beast::error_code ignored;
    beast::get_lowest_layer(ws_).socket().close(ignored);
    return;
  }
  close_sent_ = true;
  ws_.async_close(websocket::close_reason(websocket::close_code::policy_error,
                                          "no frame within the first-frame timeout"),
                  beast::bind_front_handler(&WsSession::on_close, this->shared_from_this()));
}

template <class Stream>
void WsSession<Stream>::do_read() {
  ws_.async_read(rbuf_, beast::bind_front_handler(&WsSession::on_read, this->shared_from_this()));
}

template <class Stream>
void WsSession<Stream>::on_read(beast::error_code ec, std::size_t) {
  if (ec) return end();  // peer closed, timed out, too big (Beast sent 1009), reset, ...
  state_->counters.frames_received++;
  if (!got_frame_) {
    got_frame_ = true;
    first_frame_timer_.cancel();
  }
  if (!ws_.got_text()) {
    enqueue(proto::ErrorFrame{
        proto::ErrorCode::bad_json, "binary frames are not accepted: send JSON text frames", {}});
  } else {
    const auto data = rbuf_.cdata();
    handle_text(std::string_view(static_cast<const char*>(data.data()), data.size()));
  }
  rbuf_.consume(rbuf_.size());
  if (ended_) return;  // closed as a slow consumer while handling the frame
  do_read();
}

template <class Stream>
void WsSession<Stream>::handle_text(std::string_view text) {
  proto::ParseResult r = proto::parse_client_message(text, state_->limits);
  std::visit(
      [&](auto& m) {
        using T = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<T, proto::ProtocolError>)
          enqueue(std::move(m));
        else if constexpr (std::is_same_v<T, proto::GenerateRequest>)
          session_.generate(std::move(m));
        else if constexpr (std::is_same_v<T, proto::CancelRequest>)
          session_.cancel(std::move(m.id));
        else
          session_.ping();
      },
      r);
}

template <class Stream>
void WsSession<Stream>::deliver(proto::ServerFrame frame) {
  boost::asio::post(ws_.get_executor(),
                    [self = this->shared_from_this(), f = std::move(frame)]() mutable {
                      self->enqueue(std::move(f));
                    });
}

template <class Stream>
void WsSession<Stream>::enqueue(proto::ServerFrame frame) {
  if (ended_) return;
  const OutgoingQueue::PushResult r = queue_.push(std::move(frame));
  if (r.coalesced) state_->counters.frames_coalesced++;
  if (r.over_limit && !slow_signalled_) {
    slow_signalled_ = true;
    state_->counters.slow_consumers++;
    session_.slow_consumer();
  }
  if (queue_.over_hard_limit()) return close_slow_consumer();
  do_write();
}

template <class Stream>
void WsSession<Stream>::close_slow_consumer() {
  // A peer that reads nothing would never take a close frame either: close the socket. The
  // pending read and write complete with an error and end() is a no-op then.
  beast::error_code ignored;
  beast::get_lowest_layer(ws_).socket().close(ignored);
  end();
}

template <class Stream>
void WsSession<Stream>::do_write() {
  if (writing_ || close_sent_ || ended_ || !accepted_) return;
  if (queue_.empty()) {
    slow_signalled_ = false;
    if (closing_) {
      close_sent_ = true;
      ws_.async_close(websocket::close_code::going_away,
                      beast::bind_front_handler(&WsSession::on_close, this->shared_from_this()));
    }
    return;
  }
  wbuf_.clear();
  proto::append_json(wbuf_, *queue_.pop());
  writing_ = true;
  ws_.async_write(boost::asio::buffer(wbuf_),
                  beast::bind_front_handler(&WsSession::on_write, this->shared_from_this()));
}

template <class Stream>
void WsSession<Stream>::on_write(beast::error_code ec, std::size_t) {
  writing_ = false;
  if (ec) return end();
  state_->counters.frames_sent++;
  do_write();
}

template <class Stream>
void WsSession<Stream>::on_close(beast::error_code) {
  // The pending read completes when the peer answers the close (or the socket fails).
  end();
}

template <class Stream>
void WsSession<Stream>::begin_close() {
  boost::asio::post(ws_.get_executor(), [self = this->shared_from_this()] {
    self->closing_ = true;
    self->do_write();
  });
}

template <class Stream>
void WsSession<Stream>::force_close() {
  boost::asio::post(ws_.get_executor(), [self = this->shared_from_this()] {
    beast::error_code ignored;
    beast::get_lowest_layer(self->ws_).socket().close(ignored);
  });
}

template <class Stream>
void WsSession<Stream>::end() {
  if (ended_) return;
  ended_ = true;
  first_frame_timer_.cancel();
  queue_.clear();
  if (session_.valid()) session_.close();
}

template class WsSession<PlainStream>;
template class WsSession<TlsStream>;

}  // namespace rz::net
