// rz-wsbench's results: what a run collects (per-request metrics, errors by code) and the two ways
// it is printed, a table for people and one JSON object for scripts (--json). Header-only
// (tests/net/wsbench_report_test.cpp).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "bench/wsbench_options.hpp"
#include "bench/wsbench_stats.hpp"
#include "proto/json_writer.hpp"

namespace rz::wsbench {

// Error codes of the client's own making, next to the server's codes (docs/protocol.md).
inline constexpr const char* kErrConnectionLost = "connection_lost";  // dropped mid-request
inline constexpr const char* kErrTimeout = "timeout";                 // running at --timeout
inline constexpr const char* kErrNotSent = "not_sent";                // no connection to send on

struct Results {
  double duration_s = 0.0;                 // first request issued -> last request ended
  uint64_t issued = 0;                     // requests given to a connection
  uint64_t completed = 0;                  // ended with a done frame
  uint64_t failed = 0;                     // ended with an error (server or client)
  uint64_t prompt_tokens = 0;              // sum of usage.prompt_tokens over completed requests
  uint64_t output_tokens = 0;              // sum of tokens received over completed requests
  std::map<std::string, uint64_t> errors;  // by code
  std::map<std::string, uint64_t> finish_reasons;  // of completed requests
  std::map<std::string, uint64_t> untied_errors;   // error frames naming no request of ours
  uint64_t connect_failures = 0;     // failed connection attempts (reconnects included)
  uint64_t protocol_violations = 0;  // frames the client could not make sense of
  uint64_t usage_mismatches = 0;     // usage.completion_tokens != tokens received
  uint64_t peak_in_flight = 0;       // most requests running at once (all connections)
  std::vector<double> ttft_ms, itl_ms, tpot_ms, e2e_ms, server_ttft_ms;

  void add_completed(const RequestMetrics& m) {
    ++completed;
    output_tokens += m.output_tokens;
    if (m.output_tokens > 0) ttft_ms.push_back(m.ttft_ms);
    itl_ms.insert(itl_ms.end(), m.itl_ms.begin(), m.itl_ms.end());
    if (m.tpot_ms) tpot_ms.push_back(*m.tpot_ms);
    e2e_ms.push_back(m.e2e_ms);
  }
  void add_error(const std::string& code) {
    ++failed;
    ++errors[code];
  }
};

// Throughputs as benchmark_serving defines them: per second of the whole run.
inline double request_throughput(const Results& r) {
  return r.duration_s > 0 ? static_cast<double>(r.completed) / r.duration_s : kNaN;
}
inline double output_throughput(const Results& r) {
  return r.duration_s > 0 ? static_cast<double>(r.output_tokens) / r.duration_s : kNaN;
}

inline std::string range_text(const IntRange& r) {
  return r.min == r.max ? std::to_string(r.min)
                        : std::to_string(r.min) + ":" + std::to_string(r.max);
}

// What the run talked to: the WebSocket URL, or the OpenAI endpoint the requests were posted to.
inline std::string server_text(const Options& o) {
  if (o.api == Api::ws) return o.url.text;
  const std::string host =
      o.url.host.find(':') != std::string::npos ? "[" + o.url.host + "]" : o.url.host;
  return "http://" + host + ":" + o.url.port + o.url.path +
         (o.chat ? "/chat/completions" : "/completions") + " (OpenAI API, streamed)";
}

inline std::string mode_text(const Options& o) {
  char buf[160];
  if (o.rate)
    std::snprintf(buf, sizeof buf, "open loop, Poisson %.4g req/s over %lld connection(s)", *o.rate,
                  static_cast<long long>(o.connections));
  else
    std::snprintf(buf, sizeof buf, "closed loop, %lld connection(s)",
                  static_cast<long long>(o.connections));
  return buf;
}

namespace detail {

inline std::string fmt(double v, int decimals = 2) {
  if (!std::isfinite(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

inline void json_number(std::string& out, double v) {
  if (!std::isfinite(v)) {
    out += "null";
    return;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  out += buf;
}

inline void json_key(std::string& out, const char* k) {
  if (out.back() != '{') out.push_back(',');
  proto::append_json_string(out, k);
  out.push_back(':');
}

inline void json_summary(std::string& out, const char* k, const std::vector<double>& v) {
  const Summary s = summarize(v);
  json_key(out, k);
  out += '{';
  json_key(out, "count");
  out += std::to_string(s.count);
  json_key(out, "mean");
  json_number(out, s.mean);
  json_key(out, "p50");
  json_number(out, s.p50);
  json_key(out, "p90");
  json_number(out, s.p90);
  json_key(out, "p99");
  json_number(out, s.p99);
  out += '}';
}

inline void json_counts(std::string& out, const char* k, const std::map<std::string, uint64_t>& m) {
  json_key(out, k);
  out += '{';
  for (const auto& [code, n] : m) {
    json_key(out, code.c_str());
    out += std::to_string(n);
  }
  out += '}';
}

}  // namespace detail

// The table (vLLM's benchmark_serving layout, plus errors by code).
inline std::string format_table(const Options& o, const Results& r) {
  using detail::fmt;
  std::string s;
  char line[256];
  auto row = [&](const char* name, const std::string& value) {
    std::snprintf(line, sizeof line, "%-36s %s\n", name, value.c_str());
    s += line;
  };
  s += "================ rz-wsbench ================\n";
  row("Server:", server_text(o));
  row("Mode:", mode_text(o));
  row("Prompt words / max tokens:", range_text(o.prompt_tokens) + " / " + range_text(o.max_tokens));
  row("Requests issued:", std::to_string(r.issued));
  row("Successful requests:", std::to_string(r.completed));
  row("Failed requests:", std::to_string(r.failed));
  row("Benchmark duration (s):", fmt(r.duration_s));
  row("Total input tokens:", std::to_string(r.prompt_tokens));
  row("Total generated tokens:", std::to_string(r.output_tokens));
  row("Request throughput (req/s):", fmt(request_throughput(r), 3));
  row("Output token throughput (tok/s):", fmt(output_throughput(r)));
  row("Peak requests in flight:", std::to_string(r.peak_in_flight));
  std::snprintf(line, sizeof line, "%-16s %10s %10s %10s %10s %8s\n", "metric (ms)", "mean", "p50",
                "p90", "p99", "count");
  s += line;
  auto metric = [&](const char* name, const std::vector<double>& v) {
    const Summary m = summarize(v);
    std::snprintf(line, sizeof line, "%-16s %10s %10s %10s %10s %8zu\n", name, fmt(m.mean).c_str(),
                  fmt(m.p50).c_str(), fmt(m.p90).c_str(), fmt(m.p99).c_str(), m.count);
    s += line;
  };
  metric("TTFT", r.ttft_ms);
  metric("ITL", r.itl_ms);
  metric("TPOT", r.tpot_ms);
  metric("E2E latency", r.e2e_ms);
  metric("server TTFT", r.server_ttft_ms);
  if (!r.finish_reasons.empty()) {
    std::string f;
    for (const auto& [k, n] : r.finish_reasons)
      f += (f.empty() ? "" : ", ") + k + " " + std::to_string(n);
    row("Finish reasons:", f);
  }
  if (r.errors.empty()) {
    row("Errors:", "none");
  } else {
    s += "Errors by code:\n";
    for (const auto& [code, n] : r.errors) {
      std::snprintf(line, sizeof line, "  %-34s %llu\n", code.c_str(),
                    static_cast<unsigned long long>(n));
      s += line;
    }
  }
  for (const auto& [code, n] : r.untied_errors) {
    const std::string label = "Error frames for no request (" + code + "):";
    row(label.c_str(), std::to_string(n));
  }
  if (r.connect_failures) row("Failed connection attempts:", std::to_string(r.connect_failures));
  if (r.protocol_violations)
    row("Unreadable server frames:", std::to_string(r.protocol_violations));
  if (r.usage_mismatches) row("usage != tokens received:", std::to_string(r.usage_mismatches));
  s += "============================================\n";
  return s;
}

// One JSON object on one line. Times in ms, durations in s; null where undefined (no samples).
inline std::string format_json(const Options& o, const Results& r) {
  using namespace detail;
  std::string s = "{";
  json_key(s, "config");
  s += '{';
  json_key(s, "url");
  proto::append_json_string(s, o.url.text);
  json_key(s, "api");
  proto::append_json_string(s, o.api == Api::openai ? "openai" : "ws");
  json_key(s, "mode");
  proto::append_json_string(s, o.rate ? "open" : "closed");
  json_key(s, "connections");
  s += std::to_string(o.connections);
  json_key(s, "rate");
  json_number(s, o.rate ? *o.rate : kNaN);
  json_key(s, "requests");
  s += o.requests ? std::to_string(*o.requests) : "null";
  json_key(s, "duration_s");
  json_number(s, o.duration_s ? *o.duration_s : kNaN);
  json_key(s, "prompt_tokens");
  proto::append_json_string(s, range_text(o.prompt_tokens));
  json_key(s, "max_tokens");
  proto::append_json_string(s, range_text(o.max_tokens));
  json_key(s, "seed");
  s += std::to_string(o.seed);
  json_key(s, "temperature");
  json_number(s, o.temperature);
  json_key(s, "ignore_eos");
  s += o.ignore_eos ? "true" : "false";
  json_key(s, "chat");
  s += o.chat ? "true" : "false";
  s += '}';
  json_key(s, "duration_s");
  json_number(s, r.duration_s);
  json_key(s, "issued");
  s += std::to_string(r.issued);
  json_key(s, "completed");
  s += std::to_string(r.completed);
  json_key(s, "failed");
  s += std::to_string(r.failed);
  json_key(s, "total_input_tokens");
  s += std::to_string(r.prompt_tokens);
  json_key(s, "total_output_tokens");
  s += std::to_string(r.output_tokens);
  json_key(s, "request_throughput");
  json_number(s, request_throughput(r));
  json_key(s, "output_throughput");
  json_number(s, output_throughput(r));
  json_key(s, "peak_in_flight");
  s += std::to_string(r.peak_in_flight);
  json_summary(s, "ttft_ms", r.ttft_ms);
  json_summary(s, "itl_ms", r.itl_ms);
  json_summary(s, "tpot_ms", r.tpot_ms);
  json_summary(s, "e2e_ms", r.e2e_ms);
  json_summary(s, "server_ttft_ms", r.server_ttft_ms);
  json_counts(s, "errors", r.errors);
  json_counts(s, "finish_reasons", r.finish_reasons);
  json_counts(s, "untied_errors", r.untied_errors);
  json_key(s, "connect_failures");
  s += std::to_string(r.connect_failures);
  json_key(s, "protocol_violations");
  s += std::to_string(r.protocol_violations);
  json_key(s, "usage_mismatches");
  s += std::to_string(r.usage_mismatches);
  s += "}\n";
  return s;
}

}  // namespace rz::wsbench
