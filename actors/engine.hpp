// The engine's public face: start the actors (gpu actor owning an Executor, batcher actor owning
// the BatchedDecodeState) inside a caller's caf::actor_system, open sessions on it, and read its
// metrics. net/ uses exactly this header; so can any other service that embeds rz (see
// examples/), with no network.
//
//   client ──proto::GenerateRequest/CancelRequest/PingRequest──▶ Session (session actor)
//     ▲                                                        │ tokenized BatchRequest
//     │ proto::ServerFrame (token/done/error/pong)              ▼
//     └──────────── FrameSink::deliver ◀── detokenize,     batcher actor ◀─▶ gpu actor (Executor)
//                                          stop strings        one message = one step
//
// Threading: every method here is thread-safe; they only send messages. FrameSink::deliver is
// called from the session actor's thread, one call at a time per session, in order.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/executor.hpp"
#include "proto/messages.hpp"
#include "proto/parse.hpp"  // ProtocolLimits
#include "tokenizer/chat_template.hpp"
#include "tokenizer/tokenizer.hpp"

namespace caf {
class actor_system;
}

namespace rz::engine {

// Where a session's frames go. The network connection implements it (serialize, queue, write);
// an embedding service may implement it directly. A session holds its sink only weakly: when the
// sink is gone, the session cancels its requests at the next step boundary and stops.
class FrameSink {
 public:
  virtual ~FrameSink() = default;
  virtual void deliver(proto::ServerFrame frame) = 0;
};

struct EngineConfig {
  int max_slots = 0;        // 0: the executor's max_slots()
  int max_queue = 64;       // waiting requests beyond the slots; more get `overloaded`
  int max_step_tokens = 0;  // tokens per step, decode + prefill; 0: the default
  // Tokens of a step without decodes (prompts into an idle server), where more than
  // max_step_tokens; 0: kDefaultIdleStepTokens (sched/batch_state.hpp), -1: max_step_tokens.
  int idle_step_tokens = 0;
  bool prefix_cache = true;           // reuse the KV of prompts' cached prefixes
  int max_inflight_per_session = 16;  // live requests of one session; more get `overloaded`
  proto::ProtocolLimits limits;       // max_tokens is also capped by the context
  std::string step_log;               // a CSV line per step to this file (sched/step_log.hpp)
  // Plan each step while the step before it runs (actors/batcher.hpp), so that
  // the host's work between steps overlaps the executor's; false: one step at a time.
  bool plan_ahead = true;
  // A bound on every request's wall time, from its arrival; 0: none. A request's own timeout_ms
  // may make it shorter, never longer.
  uint32_t request_timeout_ms = 0;
};

// Histogram with fixed upper bounds (Prometheus style: cumulative on export).
struct Histogram {
  std::vector<double> bounds;    // upper bounds, ascending (the +Inf bucket is implicit)
  std::vector<uint64_t> counts;  // per bucket, bounds.size() + 1 entries, not cumulative
  double sum = 0.0;
  uint64_t count = 0;
};

// A consistent snapshot, cheap to take (the HTTP /metrics handler calls it).
struct EngineMetrics {
  uint64_t requests_started = 0;    // accepted generate requests
  uint64_t requests_finished = 0;   // done frames (stop, length)
  uint64_t requests_cancelled = 0;  // done frames (cancelled)
  uint64_t requests_timed_out = 0;  // ended by their time bound (done frames or timeout errors)
  uint64_t requests_failed = 0;     // error frames tied to an accepted request
  uint64_t requests_rejected = 0;   // error frames for requests never accepted
  uint64_t prompt_tokens = 0;
  uint64_t generated_tokens = 0;
  int queue_depth = 0;
  int active_slots = 0;
  int max_slots = 0;
  int64_t kv_blocks_used = 0;            // KV cache blocks referenced by running requests
  int64_t kv_blocks_total = 0;           // KV cache blocks of the executor (0: not paged/limited)
  int kv_block_size = 0;                 // tokens per block
  uint64_t prefix_cache_lookups = 0;     // admissions that looked up the prefix cache
  uint64_t prefix_cache_hit_tokens = 0;  // prompt tokens reused from it
  uint64_t prefix_cache_evictions = 0;   // cached blocks reused for other tokens
  int sessions = 0;                      // open sessions
  std::vector<ExecutorCounter> executor_counters;  // Executor::counters() after the last step
  Histogram step_seconds;                          // executor step duration (prefill and decode)
  Histogram ttft_seconds;                          // request arrival to first token
};

class Engine;

// A handle to one session actor. Cheap to copy; all calls are asynchronous messages.
// When the last copy of a handle is destroyed without close(), the session finishes its live
// requests (frames still go to the sink) and then stops.
class Session {
 public:
  Session() = default;
  void generate(proto::GenerateRequest req) const;
  void cancel(std::string id) const;
  void ping() const;
  // The sink could not keep up (its bounded queue overflowed): every live request of this
  // session ends with an `slow_consumer` error frame; the session stays open.
  void slow_consumer() const;
  // The connection closed: cancel every live request (their slots free within one step) and
  // stop the session actor. No more frames are delivered.
  void close() const;
  bool valid() const { return impl_ != nullptr; }

 private:
  friend class Engine;
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

class Engine {
 public:
  // Spawns the gpu and batcher actors in `sys`; the executor moves into the gpu actor, which is
  // then the only code that touches it. `chat` is used for requests that send `messages`; when
  // absent, such requests get a `bad_value` error naming the cause.
  static std::shared_ptr<Engine> start(caf::actor_system& sys, std::unique_ptr<Executor> executor,
                                       const std::shared_ptr<const Tokenizer>& tokenizer,
                                       std::optional<ChatTemplate> chat, EngineConfig config);
  ~Engine();

  Session open_session(std::weak_ptr<FrameSink> sink);
  EngineMetrics metrics() const;
  const EngineConfig& config() const;
  int max_context() const;

  // Stops admitting (new generate requests get `overloaded`), lets running and queued requests
  // finish for up to `drain`, then cancels what is left and stops the actors. Blocks until done.
  // The destructor does shutdown(0ms) if it has not run. Shut down or destroy the Engine (and
  // drop Session handles) before the actor_system, and not from inside an actor of that system.
  void shutdown(std::chrono::milliseconds drain);

  struct Impl;

 private:
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace rz::engine
