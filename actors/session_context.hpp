// What every session actor of one engine shares (read-only data plus a few counters): the
// tokenizer and chat template, the limits, the batcher's address, the metrics, and the
// bookkeeping Engine::shutdown waits on (live requests, open sessions). Built by actors/engine.cpp.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>

#include <caf/actor.hpp>
#include <caf/actor_addr.hpp>

#include "actors/engine.hpp"
#include "actors/metrics.hpp"

namespace rz::engine {

struct EngineContext {
  std::shared_ptr<const Tokenizer> tokenizer;
  std::optional<ChatTemplate> chat;
  EngineConfig config;  // effective values (max_slots filled in, max_tokens capped)
  int max_context = 0;
  caf::actor batcher;
  std::shared_ptr<MetricsRegistry> metrics;

  std::atomic<bool> accepting{true};         // false once shutdown began: generate -> overloaded
  std::atomic<uint64_t> next_request_id{1};  // RequestRef::id, unique per engine
  std::atomic<uint64_t> next_session_id{1};  // RequestRef::owner

  // Requests a session has taken and not ended yet, and the open session actors.
  std::mutex mu;
  std::condition_variable cv;
  int live_requests = 0;
  std::unordered_map<uint64_t, caf::actor_addr> sessions;

  void request_began() {
    std::lock_guard<std::mutex> lock(mu);
    ++live_requests;
  }
  void request_ended() {
    {
      std::lock_guard<std::mutex> lock(mu);
      --live_requests;
    }
    cv.notify_all();
  }
  void session_ended(uint64_t owner) {
    {
      std::lock_guard<std::mutex> lock(mu);
      sessions.erase(owner);
    }
    cv.notify_all();
  }
};

}  // namespace rz::engine
