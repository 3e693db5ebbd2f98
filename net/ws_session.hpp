// One WebSocket connection at /v1/ws (Beast), created by the HTTP session that read the upgrade
// request. Everything it does runs on its strand (the socket's executor): one async_read always
// pending, at most one async_write, and the bounded OutgoingQueue of typed frames between the
// engine and the writer. It is the engine session's FrameSink; the engine holds it only weakly,
// and deliver() just posts the frame onto the strand. Pending operations keep it alive.
//
//   client text frame ─▶ parse_client_message ─▶ Session::generate / cancel / ping
//                                 └─ ProtocolError ─▶ queue (error frame)
//   engine frame ─deliver─▶ post(strand) ─▶ queue ─▶ serialize ─▶ async_write
//   queue over its bound ─▶ Session::slow_consumer() once (re-armed when the queue empties)
//   queue past its hard bound (any frames, error frames too) ─▶ socket closed (slow consumer)
//   no frame within first_frame_timeout ─▶ closed with 1008 (policy violation)
//   read error / peer close ─▶ Session::close() (requests cancelled, slots freed)
//
// A template on the stream below the WebSocket (net/streams.hpp): PlainStream, or TlsStream for
// WSS (the close then ends with TLS close_notify, which Beast's teardown sends). Both are
// instantiated in ws_session.cpp.
#pragma once
#include <memory>
#include <string>

#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>

#include "net/outgoing_queue.hpp"
#include "net/server_state.hpp"
#include "net/streams.hpp"

namespace rz::net {

template <class Stream>
class WsSession : public engine::FrameSink,
                  public Connection,
                  public std::enable_shared_from_this<WsSession<Stream>> {
 public:
  // `stream` carries the upgrade request already read; a place was reserved in `state` for the
  // peer `address`; `slot` is the socket's place among the open sockets.
  WsSession(Stream&& stream, std::shared_ptr<ServerState> state, std::string address,
            SocketSlot slot);
  ~WsSession() override;

  // Accepts the upgrade (answers the handshake) and starts reading.
  void run(const boost::beast::http::request<boost::beast::http::string_body>& req);

  void deliver(proto::ServerFrame frame) override;  // any thread
  void begin_close() override;                      // any thread
  void force_close() override;                      // any thread

 private:
  void on_accept(boost::beast::error_code ec);
  void do_read();
  void on_read(boost::beast::error_code ec, std::size_t bytes);
  void handle_text(std::string_view text);
  void enqueue(proto::ServerFrame frame);
  void do_write();
  void on_write(boost::beast::error_code ec, std::size_t bytes);
  void on_close(boost::beast::error_code ec);
  void on_first_frame_deadline(boost::beast::error_code ec);
  void close_slow_consumer();  // the queue went past its hard bound: drop the connection
  void end();  // the connection is over: close the engine session once, drop the queue

  boost::beast::websocket::stream<Stream> ws_;
  std::shared_ptr<ServerState> state_;
  std::string address_;  // the peer's IP, for the per-address limit
  SocketSlot slot_;
  boost::asio::steady_timer first_frame_timer_;
  bool got_frame_ = false;
  boost::beast::flat_buffer rbuf_;
  std::string wbuf_;  // the frame being written
  OutgoingQueue queue_;
  engine::Session session_;
  bool accepted_ = false;
  bool writing_ = false;
  bool closing_ = false;  // shutdown: close once the queue is written
  bool close_sent_ = false;
  bool ended_ = false;
  bool slow_signalled_ = false;
};

extern template class WsSession<PlainStream>;
extern template class WsSession<TlsStream>;

}  // namespace rz::net
