// What the listener, the HTTP sessions and the WebSocket sessions share: the configuration, the
// engine, the edge's counters, the registry of open WebSocket connections (for the connection
// limits, total and per address, and for closing them all at shutdown) and the count of open
// sockets, and the TLS context when the port speaks TLS. Shared by shared_ptr, so a connection
// that outlives the listener for a moment still has it. No Boost types here (the TLS context only
// declared, net/tls.hpp).
#pragma once
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "actors/engine.hpp"
#include "net/auth.hpp"
#include "net/metrics_text.hpp"
#include "net/origin_policy.hpp"
#include "net/server.hpp"
#include "net/tls.hpp"
#include "proto/parse.hpp"  // ProtocolLimits, used by engine.hpp

namespace rz::net {

struct NetCounters {
  std::atomic<uint64_t> connections_total{0}, connections_refused{0}, origins_refused{0},
      sockets_refused{0}, first_frame_timeouts{0}, frames_received{0}, frames_sent{0},
      frames_coalesced{0}, slow_consumers{0}, http_requests{0}, tls_handshake_failures{0};
};

// A live WebSocket connection as the registry sees it.
class Connection {
 public:
  virtual ~Connection() = default;
  // Any thread: send the queued frames, then a close frame (code 1001 going away).
  virtual void begin_close() = 0;
  // Any thread: close the socket now (a peer that did not take the close in time).
  virtual void force_close() = 0;
};

struct ServerState {
  ServerConfig config;
  std::shared_ptr<engine::Engine> engine;
  proto::ProtocolLimits limits;  // the engine's, read once
  NetCounters counters;
  std::atomic<bool> draining{false};

  OriginPolicy origins;      // set by Server::start (loopback_bound from the bound address)
  AuthPolicy auth;           // from the config's api_keys and metrics_public
  std::string served_model;  // config.served_model_name, or model_name without its extension
  int64_t started = 0;       // Unix seconds at Server::start
  // Set by Server::start from config.tls_cert_file and tls_key_file: every accepted socket then
  // speaks TLS (net/streams.hpp). Null: plain TCP.
  std::shared_ptr<boost::asio::ssl::context> tls;

  enum class Reserve { ok, full, address_full, draining };
  // Reserves a WebSocket connection place for a peer at `address` (its IP as text); refused when
  // the total or that address's limit is reached, or shutdown has begun.
  Reserve try_reserve(const std::string& address) {
    std::lock_guard lk(mu);
    if (draining) return Reserve::draining;
    if (reserved >= config.max_connections) return Reserve::full;
    int& mine = per_address[address];
    if (mine >= config.max_connections_per_ip) {
      if (mine == 0) per_address.erase(address);
      return Reserve::address_full;
    }
    ++mine;
    ++reserved;
    return Reserve::ok;
  }
  void add(Connection* c, std::weak_ptr<Connection> w) {
    std::lock_guard lk(mu);
    live[c] = std::move(w);
  }
  // An HTTP request of the OpenAI API in progress (closed at shutdown like a WebSocket; counted
  // by open_connections()).
  void add_exchange(Connection* c, std::weak_ptr<Connection> w) {
    std::lock_guard lk(mu);
    live[c] = std::move(w);
    ++exchanges;
  }
  void remove_exchange(Connection* c) {
    std::lock_guard lk(mu);
    if (live.erase(c)) --exchanges;
  }
  // Gives back a reserved place of `address` (and the registry entry, if any).
  void release(Connection* c, const std::string& address) {
    std::lock_guard lk(mu);
    live.erase(c);
    --reserved;
    if (auto it = per_address.find(address); it != per_address.end() && --it->second <= 0)
      per_address.erase(it);
  }

  // Sockets (HTTP or WebSocket) one address may hold: its WebSocket share twice over, plus 8
  // for plain HTTP (a browser opens several), so one address cannot fill the open-socket cap.
  int sockets_per_address_limit() const { return 2 * config.max_connections_per_ip + 8; }
  // Takes a place for a socket accepted from `address`; false at the open-socket cap
  // (config.max_open_sockets, 0: none) or at the address's limit.
  bool try_open_socket(const std::string& address) {
    std::lock_guard lk(mu);
    if (config.max_open_sockets > 0 && open_sockets >= config.max_open_sockets) return false;
    int& mine = sockets_per_address[address];
    if (mine >= sockets_per_address_limit()) return false;
    ++mine;
    ++open_sockets;
    return true;
  }
  void close_socket(const std::string& address) {
    std::lock_guard lk(mu);
    --open_sockets;
    if (auto it = sockets_per_address.find(address);
        it != sockets_per_address.end() && --it->second <= 0)
      sockets_per_address.erase(it);
  }
  int ws_connections() {
    std::lock_guard lk(mu);
    return reserved;
  }
  // WebSocket connections and OpenAI API requests in progress.
  int open_connections() {
    std::lock_guard lk(mu);
    return reserved + exchanges;
  }
  void for_each_live(const std::function<void(Connection&)>& f) {
    std::vector<std::shared_ptr<Connection>> all;
    {
      std::lock_guard lk(mu);
      for (auto& [p, w] : live)
        if (auto s = w.lock()) all.push_back(std::move(s));
    }
    for (auto& s : all) f(*s);
  }

 private:
  std::mutex mu;
  int reserved = 0;
  int exchanges = 0;                                 // OpenAI API requests in progress
  std::unordered_map<std::string, int> per_address;  // WebSocket places held per peer address
  int open_sockets = 0;                              // accepted sockets open
  std::unordered_map<std::string, int> sockets_per_address;
  std::unordered_map<Connection*, std::weak_ptr<Connection>> live;
};

inline NetStats net_stats(ServerState& st) {
  NetStats n;
  n.connections_open = static_cast<uint64_t>(st.ws_connections());
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
  n.tls_handshake_failures = st.counters.tls_handshake_failures;
  return n;
}

// One accepted socket's place (ServerState::try_open_socket), given back when the session that
// holds the socket (HTTP, then WebSocket after an upgrade) goes away. Movable, not copyable.
class SocketSlot {
 public:
  SocketSlot() = default;
  // `st` gave the place to `address` (try_open_socket returned true).
  SocketSlot(std::shared_ptr<ServerState> st, std::string address)
      : st_(std::move(st)), address_(std::move(address)) {}
  SocketSlot(SocketSlot&& o) noexcept = default;
  SocketSlot& operator=(SocketSlot&& o) noexcept {
    reset();
    st_ = std::move(o.st_);
    address_ = std::move(o.address_);
    return *this;
  }
  ~SocketSlot() { reset(); }
  void reset() {
    if (st_) st_->close_socket(address_);
    st_.reset();
  }

 private:
  std::shared_ptr<ServerState> st_;
  std::string address_;
};

}  // namespace rz::net
