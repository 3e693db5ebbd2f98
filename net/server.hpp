// The network edge: one listening port serving plain HTTP (the browser page, /health, /metrics),
// the OpenAI-compatible API (docs/openai.md) and the WebSocket protocol at /v1/ws
// (docs/protocol.md), in front of an engine::Engine; all of it over TLS instead (HTTPS, WSS) when
// given a certificate (net/tls.hpp). No Boost types here: the Beast code lives in
// net/server.cpp (listener), net/http_session.cpp (HTTP and the OpenAI API) and
// net/ws_session.cpp (one WebSocket connection), so only those files pay its compile time.
//
//   Server::start ─▶ io threads ─▶ accept ─▶ HttpSession ─(upgrade /v1/ws)─▶ WsSession
//                                      │          │ POST /v1/chat/completions       │ one strand
//                                      │          ▼ /v1/completions                  ▼ each
//                                      │   OpenAiExchange ─▶ Engine::open_session(weak sink)
//                                      ▼ GET / /health /metrics /v1/models
//                              net/http_handler.cpp
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actors/engine.hpp"
#include "net/metrics_text.hpp"
#include "net/outgoing_queue.hpp"
#include "proto/parse.hpp"  // ProtocolLimits, used by engine.hpp

namespace rz::net {

struct ServerConfig {
  std::string host = "127.0.0.1";
  uint16_t port = 8080;       // 0: an ephemeral port (Server::port() says which)
  int io_threads = 1;         // threads running the connections' strands
  int max_connections = 256;  // open WebSocket connections; more get HTTP 503
  // Open WebSocket connections from one address; more get 503. Sockets of any kind from one
  // address: at most twice this plus 8 (more are closed at accept).
  int max_connections_per_ip = 32;
  // Accepted sockets (HTTP and WebSocket together); at the cap a new socket is closed at once.
  // 0: no cap (rz serve sets it from the open-file limit, see net/fd_limit.hpp).
  int max_open_sockets = 0;
  // A connection must send its first HTTP request, and an upgraded one its first WebSocket
  // frame, within this time; otherwise it is closed (an idle socket holds a place).
  std::chrono::milliseconds first_frame_timeout{std::chrono::seconds(10)};
  // Origins allowed to open /v1/ws besides the server's own (and, when bound to a loopback
  // address, http(s)://localhost, 127.0.0.1 and [::1] on any port); "*" allows every origin.
  // A request without an Origin header (not a browser) is always allowed.
  std::vector<std::string> allowed_origins;
  std::chrono::milliseconds idle_timeout{std::chrono::seconds(60)};       // silent peer -> closed
  std::chrono::milliseconds handshake_timeout{std::chrono::seconds(15)};  // and HTTP reads
  // A frame above the protocol's max_frame_bytes (the engine's limits) gets a `too_large` error;
  // above this hard cap the connection is closed with close code 1009 (message too big).
  // 0: 4 x max_frame_bytes, at least 64 KiB.
  std::size_t hard_frame_cap = 0;
  OutgoingQueueLimits queue;   // per connection
  int socket_send_buffer = 0;  // SO_SNDBUF of accepted sockets in bytes; 0: the OS default
  std::string model_name;      // shown by /health and the page
  // The model's id in the OpenAI API (/v1/models, and the "model" of every response); "":
  // model_name without its extension. Requests may name any model: this one answers.
  std::string served_model_name;
  // API keys (net/auth.hpp): when any is set, /v1/* and the WebSocket need one, and /metrics
  // unless metrics_public. Never logged.
  std::vector<std::string> api_keys;
  bool metrics_public = false;
  // TLS (net/tls.hpp): with both set the port speaks only HTTPS and WSS, from this PEM
  // certificate (chain) and its PEM private key; with neither, plain TCP. Server::start throws
  // rz::Error when only one is set or a file cannot be used.
  std::string tls_cert_file, tls_key_file;
};

class Server {
 public:
  Server(std::shared_ptr<engine::Engine> engine, ServerConfig config);
  ~Server();  // shuts down (no drain) if shutdown() was not called
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Loads the TLS certificate and key (when configured), binds and listens, then runs the io
  // threads. Throws rz::Error when a TLS file cannot be used (net/tls.hpp) or the address cannot
  // be bound ("127.0.0.1:8080: Address already in use").
  void start();
  uint16_t port() const;  // the bound port (after start)

  // Stops accepting, drains the engine (Engine::shutdown(drain): running requests may finish,
  // new ones get `overloaded`), then closes every connection with a WebSocket close frame
  // (after its queued frames are written; a peer that reads nothing is cut off after a short
  // grace period) and joins the io threads. Idempotent.
  void shutdown(std::chrono::milliseconds drain);

  NetStats stats() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace rz::net
