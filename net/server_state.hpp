// What the listener, the HTTP sessions and the WebSocket sessions share: the configuration, the
// engine, the edge's counters and the registry of open WebSocket connections (for the connection
// limit and for closing them all at shutdown). Shared by shared_ptr, so a connection that
// outlives the listener for a moment still has it. No Boost types here.
#pragma once
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "proto/parse.hpp"  // ProtocolLimits, used by engine.hpp
#include "actors/engine.hpp"
#include "net/metrics_text.hpp"
#include "net/server.hpp"

namespace rz::net {

struct NetCounters {
  std::atomic<uint64_t> connections_total{0}, connections_refused{0}, frames_received{0},
      frames_sent{0}, frames_coalesced{0}, slow_consumers{0}, http_requests{0};
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

  // Reserves a connection place; false when the limit is reached or shutdown has begun.
  bool try_reserve() {
    std::lock_guard lk(mu);
    if (draining || reserved >= config.max_connections) return false;
    ++reserved;
    return true;
  }
  void add(Connection* c, std::weak_ptr<Connection> w) {
    std::lock_guard lk(mu);
    live[c] = std::move(w);
  }
  // Gives back a reserved place (and the registry entry, if any).
  void release(Connection* c) {
    std::lock_guard lk(mu);
    live.erase(c);
    --reserved;
  }
  int open_connections() {
    std::lock_guard lk(mu);
    return reserved;
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
  std::unordered_map<Connection*, std::weak_ptr<Connection>> live;
};

}  // namespace rz::net
