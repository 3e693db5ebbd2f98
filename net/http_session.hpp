// One accepted socket speaking HTTP/1.1 (keep-alive), on its own strand: plain routes answered
// through route_http (net/http_handler.hpp); the OpenAI API's POST /v1/chat/completions and
// /v1/completions run as an OpenAiExchange on an engine session of their own, streamed as
// server-sent events (chunked) or answered in one body; an upgrade at /v1/ws is handed to a
// WsSession (net/ws_session.hpp). When the server has a TLS context all of it runs over TLS
// (net/streams.hpp): the first bytes must be a TLS ClientHello (plain HTTP gets a plain 400 that
// says so) and the handshake must end within the first-request deadline.
//
//   request ─▶ route_http ─▶ reply ─▶ next request
//   POST API ─▶ parse ─▶ Engine::open_session + generate × n ─▶ frames ─▶ OpenAiExchange ─▶ bytes
//              └ error: 4xx/5xx JSON           a read stays pending: the peer gone ─▶ cancelled
#pragma once
#include <memory>
#include <string>

#include <boost/asio/ip/tcp.hpp>

#include "net/server_state.hpp"

namespace rz::net {

// Serves the socket until the peer or the server ends it. `slot` is the socket's place among
// the open sockets (given back when the last session holding the socket ends).
void serve_http(boost::asio::ip::tcp::socket&& socket, std::shared_ptr<ServerState> state,
                std::string address, SocketSlot slot);

}  // namespace rz::net
