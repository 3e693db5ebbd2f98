// The Prometheus text exposition (format 0.0.4) of the server's counters: the engine's
// EngineMetrics snapshot plus the network edge's own counters. GET /metrics serves it.
#pragma once
#include <cstdint>
#include <string>

#include "actors/engine.hpp"
#include "proto/parse.hpp"  // ProtocolLimits, used by engine.hpp

namespace rz::net {

// Counters of the network edge (net/server.cpp keeps them as atomics and copies them here).
struct NetStats {
  uint64_t connections_open = 0;      // WebSocket connections now open
  uint64_t connections_total = 0;     // WebSocket connections accepted since start
  uint64_t connections_refused = 0;   // upgrades refused with 503 (connection limits)
  uint64_t origins_refused = 0;       // upgrades refused with 403 (Origin not allowed)
  uint64_t sockets_refused = 0;       // sockets closed at accept (cap, or the address's share)
  uint64_t first_frame_timeouts = 0;  // connections closed for sending nothing in time
  uint64_t frames_received = 0;       // client text frames read
  uint64_t frames_sent = 0;           // server frames written
  uint64_t frames_coalesced = 0;      // token frames merged into a waiting one
  uint64_t slow_consumers = 0;        // times a connection's queue overflowed
  uint64_t http_requests = 0;         // plain HTTP requests answered
  // TLS port: connections dropped before their TLS handshake was done: not TLS, a failed
  // handshake, or one not done by the first-request deadline
  uint64_t tls_handshake_failures = 0;
};

std::string metrics_text(const engine::EngineMetrics& m, const NetStats& n);

}  // namespace rz::net
