// The two streams a connection runs on: plain TCP, or TLS over TCP when the server has a
// certificate (net/tls.hpp). HttpSession (net/http_session.cpp) and WsSession
// (net/ws_session.hpp) are templates on the stream, one code path for both; what differs (the
// TLS handshake after accept, the close_notify before closing) is `if constexpr (kIsTls<S>)`
// there. Both streams' lowest layer is a beast::tcp_stream: its timeouts and its socket.
#pragma once
#include <type_traits>

#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>

namespace rz::net {

using PlainStream = boost::beast::tcp_stream;
using TlsStream = boost::beast::ssl_stream<boost::beast::tcp_stream>;

template <class Stream>
inline constexpr bool kIsTls = std::is_same_v<Stream, TlsStream>;

}  // namespace rz::net
