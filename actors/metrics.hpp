// The engine's metrics registry: counters, gauges and fixed-bound histograms that the session
// and batcher actors update and any thread can read as one consistent EngineMetrics snapshot
// (actors/engine.hpp). A mutex guards one plain struct; every update and snapshot is a few
// dozen instructions under it.
#pragma once
#include <mutex>
#include <vector>

#include "actors/engine.hpp"

namespace rz::engine {

// A histogram with these ascending upper bounds and zero counts.
Histogram make_histogram(std::vector<double> bounds);
// Counts `v` in the first bucket whose bound is >= v (the last, +Inf, bucket otherwise). NaN is
// counted in +Inf and left out of the sum.
void observe(Histogram& h, double v);

// Bounds in seconds: executor steps (1 ms .. 10 s) and time to first token (5 ms .. 60 s).
std::vector<double> step_seconds_bounds();
std::vector<double> ttft_seconds_bounds();

class MetricsRegistry {
 public:
  // kv_blocks_total / kv_block_size: the executor's KV cache as the scheduler counts it.
  explicit MetricsRegistry(int max_slots, int64_t kv_blocks_total = 0, int kv_block_size = 0);

  EngineMetrics snapshot() const;

  // Session side (frames).
  void request_started(int prompt_tokens);
  void request_done(proto::FinishReason reason);
  void request_failed();
  void request_rejected();
  void tokens_generated(int n);
  void first_token(double seconds);
  void session_opened();
  void session_closed();

  // Batcher side.
  void step(double seconds);
  void scheduler(int queue_depth, int active_slots, int64_t kv_blocks_used = 0);
  // Totals since the start (the scheduler's counters): admissions that looked up the prefix
  // cache, prompt tokens they reused, cached blocks evicted for new ones.
  void prefix_cache(uint64_t lookups, uint64_t hit_tokens, uint64_t evictions);

  // Gpu actor side: the executor's own counters (Executor::counters), after each step.
  void executor_counters(std::vector<ExecutorCounter> counters);

 private:
  mutable std::mutex mu_;
  EngineMetrics m_;
};

}  // namespace rz::engine
