// The engine's metrics registry (actors/metrics.hpp).
#include "actors/metrics.hpp"

#include <cmath>
#include <utility>

namespace rz::engine {

Histogram make_histogram(std::vector<double> bounds) {
  Histogram h;
  h.counts.assign(bounds.size() + 1, 0);
  h.bounds = std::move(bounds);
  return h;
}

void observe(Histogram& h, double v) {
  size_t i = 0;
  if (!std::isnan(v))
    while (i < h.bounds.size() && v > h.bounds[i]) ++i;
  else
    i = h.bounds.size();
  ++h.counts[i];
  ++h.count;
  if (!std::isnan(v)) h.sum += v;
}

std::vector<double> step_seconds_bounds() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0};
}

std::vector<double> ttft_seconds_bounds() {
  return {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0};
}

MetricsRegistry::MetricsRegistry(int max_slots, int64_t kv_blocks_total, int kv_block_size) {
  m_.max_slots = max_slots;
  m_.kv_blocks_total = kv_blocks_total;
  m_.kv_block_size = kv_block_size;
  m_.step_seconds = make_histogram(step_seconds_bounds());
  m_.ttft_seconds = make_histogram(ttft_seconds_bounds());
}

EngineMetrics MetricsRegistry::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return m_;
}

void MetricsRegistry::request_started(int prompt_tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  ++m_.requests_started;
  m_.prompt_tokens += static_cast<uint64_t>(prompt_tokens);
}

void MetricsRegistry::request_done(proto::FinishReason reason) {
  std::lock_guard<std::mutex> lock(mu_);
  if (reason == proto::FinishReason::cancelled)
    ++m_.requests_cancelled;
  else if (reason == proto::FinishReason::timeout)
    ++m_.requests_timed_out;
  else
    ++m_.requests_finished;
}

void MetricsRegistry::request_failed() {
  std::lock_guard<std::mutex> lock(mu_);
  ++m_.requests_failed;
}

void MetricsRegistry::request_rejected() {
  std::lock_guard<std::mutex> lock(mu_);
  ++m_.requests_rejected;
}

void MetricsRegistry::tokens_generated(int n) {
  std::lock_guard<std::mutex> lock(mu_);
  m_.generated_tokens += static_cast<uint64_t>(n);
}

void MetricsRegistry::first_token(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  observe(m_.ttft_seconds, seconds);
}

void MetricsRegistry::session_opened() {
  std::lock_guard<std::mutex> lock(mu_);
  ++m_.sessions;
}

void MetricsRegistry::session_closed() {
  std::lock_guard<std::mutex> lock(mu_);
  --m_.sessions;
}

void MetricsRegistry::step(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  observe(m_.step_seconds, seconds);
}

void MetricsRegistry::prefix_cache(uint64_t lookups, uint64_t hit_tokens, uint64_t evictions) {
  std::lock_guard<std::mutex> lock(mu_);
  m_.prefix_cache_lookups = lookups;
  m_.prefix_cache_hit_tokens = hit_tokens;
  m_.prefix_cache_evictions = evictions;
}

void MetricsRegistry::executor_counters(std::vector<ExecutorCounter> counters) {
  std::lock_guard lock(mu_);
  m_.executor_counters = std::move(counters);
}

void MetricsRegistry::scheduler(int queue_depth, int active_slots, int64_t kv_blocks_used) {
  std::lock_guard<std::mutex> lock(mu_);
  m_.queue_depth = queue_depth;
  m_.active_slots = active_slots;
  m_.kv_blocks_used = kv_blocks_used;
}

}  // namespace rz::engine
