// Prometheus text format for GET /metrics (see metrics_text.hpp). Every family gets # HELP and
// # TYPE lines; histograms are exported cumulatively with an +Inf bucket, _sum and _count.
#include "net/metrics_text.hpp"

#include <charconv>
#include <cmath>

namespace rz::net {
namespace {

std::string number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);  // shortest text that reads back as v
  return std::string(buf, r.ptr);
}

void family(std::string& out, const char* name, const char* type, const char* help) {
  out += "# HELP ";
  out += name;
  out += ' ';
  out += help;
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
}

void sample(std::string& out, const std::string& name, const std::string& labels, double v) {
  out += name;
  if (!labels.empty()) out += "{" + labels + "}";
  out += ' ';
  out += number(v);
  out += '\n';
}

void scalar(std::string& out, const char* name, const char* type, const char* help, double v) {
  family(out, name, type, help);
  sample(out, name, "", v);
}

void histogram(std::string& out, const char* name, const char* help, const engine::Histogram& h) {
  family(out, name, "histogram", help);
  uint64_t cum = 0;
  for (std::size_t i = 0; i < h.bounds.size(); ++i) {
    if (i < h.counts.size()) cum += h.counts[i];
    sample(out, std::string(name) + "_bucket", "le=\"" + number(h.bounds[i]) + "\"",
           static_cast<double>(cum));
  }
  // The +Inf bucket holds every observation; h.count is the engine's own total.
  sample(out, std::string(name) + "_bucket", "le=\"+Inf\"", static_cast<double>(h.count));
  sample(out, std::string(name) + "_sum", "", h.sum);
  sample(out, std::string(name) + "_count", "", static_cast<double>(h.count));
}

}  // namespace

std::string metrics_text(const engine::EngineMetrics& m, const NetStats& n) {
  std::string out;
  out.reserve(4096);
  scalar(out, "rz_requests_started_total", "counter", "Generate requests accepted by the engine.",
         m.requests_started);
  family(out, "rz_requests_ended_total", "counter",
         "Generate requests ended, by outcome (finished: stop or length; cancelled; timed_out: "
         "their time bound ran out; failed: an error after acceptance; rejected: refused before "
         "acceptance).");
  sample(out, "rz_requests_ended_total", "outcome=\"finished\"", m.requests_finished);
  sample(out, "rz_requests_ended_total", "outcome=\"cancelled\"", m.requests_cancelled);
  sample(out, "rz_requests_ended_total", "outcome=\"timed_out\"", m.requests_timed_out);
  sample(out, "rz_requests_ended_total", "outcome=\"failed\"", m.requests_failed);
  sample(out, "rz_requests_ended_total", "outcome=\"rejected\"", m.requests_rejected);
  scalar(out, "rz_prompt_tokens_total", "counter", "Prompt tokens of accepted requests.",
         m.prompt_tokens);
  scalar(out, "rz_generated_tokens_total", "counter", "Tokens generated.", m.generated_tokens);
  scalar(out, "rz_queue_depth", "gauge", "Requests waiting for a slot.", m.queue_depth);
  scalar(out, "rz_active_slots", "gauge", "Slots running a request.", m.active_slots);
  scalar(out, "rz_max_slots", "gauge", "Slots of the executor.", m.max_slots);
  scalar(out, "rz_kv_blocks_used", "gauge",
         "KV cache blocks referenced by running requests (a shared prefix block counts once).",
         m.kv_blocks_used);
  scalar(out, "rz_kv_blocks_total", "gauge", "KV cache blocks of the executor.", m.kv_blocks_total);
  scalar(out, "rz_kv_block_tokens", "gauge", "Tokens per KV cache block.", m.kv_block_size);
  scalar(out, "rz_prefix_cache_lookups_total", "counter",
         "Admitted requests that looked up the prefix cache.", m.prefix_cache_lookups);
  scalar(out, "rz_prefix_cache_hit_tokens_total", "counter",
         "Prompt tokens whose KV was reused from the prefix cache.", m.prefix_cache_hit_tokens);
  scalar(out, "rz_prefix_cache_evictions_total", "counter",
         "Cached KV blocks evicted to make room for new ones.", m.prefix_cache_evictions);
  scalar(out, "rz_sessions", "gauge", "Open engine sessions.", m.sessions);
  for (const ExecutorCounter& c : m.executor_counters)
    scalar(out, c.name, "counter", c.help, static_cast<double>(c.value));
  histogram(out, "rz_step_seconds", "Executor step duration (decode tokens and prompt chunks).",
            m.step_seconds);
  histogram(out, "rz_ttft_seconds", "Time from a request's arrival to its first token.",
            m.ttft_seconds);
  scalar(out, "rz_ws_connections_open", "gauge", "WebSocket connections open.", n.connections_open);
  scalar(out, "rz_ws_connections_total", "counter", "WebSocket connections accepted.",
         n.connections_total);
  scalar(out, "rz_ws_connections_refused_total", "counter",
         "WebSocket upgrades refused with 503 (connection limits).", n.connections_refused);
  scalar(out, "rz_ws_origins_refused_total", "counter",
         "WebSocket upgrades refused with 403 (Origin not allowed).", n.origins_refused);
  scalar(out, "rz_sockets_refused_total", "counter",
         "Sockets closed at accept (open-socket cap, or the address's share).", n.sockets_refused);
  scalar(out, "rz_first_frame_timeouts_total", "counter",
         "Connections closed for sending no request or frame within the first-frame timeout.",
         n.first_frame_timeouts);
  scalar(out, "rz_ws_frames_received_total", "counter", "Client frames read.", n.frames_received);
  scalar(out, "rz_ws_frames_sent_total", "counter", "Server frames written.", n.frames_sent);
  scalar(out, "rz_ws_frames_coalesced_total", "counter",
         "Token frames merged into a waiting frame of the same request.", n.frames_coalesced);
  scalar(out, "rz_ws_slow_consumers_total", "counter",
         "Times a connection's outgoing queue overflowed its bound.", n.slow_consumers);
  scalar(out, "rz_http_requests_total", "counter", "Plain HTTP requests answered.",
         n.http_requests);
  scalar(out, "rz_tls_handshake_failures_total", "counter",
         "Connections to the TLS port dropped before their handshake was done: not TLS, a "
         "failed handshake, or none done within the first-frame timeout.",
         n.tls_handshake_failures);
  return out;
}

}  // namespace rz::net
