// rz-wsbench's statistics: percentiles and summaries of latency samples, and the per-request
// metrics (TTFT, ITL, TPOT, end-to-end latency) computed from the times at which a request's
// frames arrived. Definitions follow vLLM's benchmark_serving; the one place where they need a
// rule of our own (a frame carrying several tokens) is documented at request_metrics() below.
// Header-only and free of networking, so tests/net/wsbench_stats_test.cpp can check it.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

namespace rz::wsbench {

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The p-th percentile (0 <= p <= 100) of an ascending vector, by linear interpolation between
// the closest ranks (numpy.percentile's default "linear" method, which benchmark_serving uses):
// rank r = p/100 * (n-1); result = x[floor r] + (r - floor r) * (x[floor r + 1] - x[floor r]).
// NaN for an empty vector.
inline double percentile_sorted(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return kNaN;
  const double r = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(sorted.size() - 1);
  const std::size_t lo = static_cast<std::size_t>(std::floor(r));
  const std::size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = r - static_cast<double>(lo);
  return sorted[lo] + frac * (sorted[hi] - sorted[lo]);
}

// Mean and the percentiles the report prints. All NaN when there are no samples.
struct Summary {
  std::size_t count = 0;
  double mean = kNaN;
  double p50 = kNaN;
  double p90 = kNaN;
  double p99 = kNaN;
};

inline Summary summarize(std::vector<double> v) {
  Summary s;
  s.count = v.size();
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  double sum = 0.0;
  for (double x : v) sum += x;
  s.mean = sum / static_cast<double>(v.size());
  s.p50 = percentile_sorted(v, 50.0);
  s.p90 = percentile_sorted(v, 90.0);
  s.p99 = percentile_sorted(v, 99.0);
  return s;
}

// One token frame as the client saw it: when it arrived (seconds on any one clock) and how many
// tokens it carried.
struct FrameArrival {
  double t = 0.0;
  std::size_t tokens = 0;
};

// The metrics of one finished request, in milliseconds.
struct RequestMetrics {
  std::size_t output_tokens = 0;  // sum of tokens over the token frames
  double e2e_ms = kNaN;           // request sent -> its done frame arrived
  double ttft_ms = kNaN;          // request sent -> first token frame arrived (NaN: no tokens)
  std::optional<double> tpot_ms;  // (e2e - ttft) / (output_tokens - 1); only when tokens > 1
  std::vector<double> itl_ms;     // one per token after the first (output_tokens - 1 values)
};

// Metrics of a request sent at `t_send` whose token frames arrived as `frames` (in order) and
// whose done frame arrived at `t_done` (all in seconds on the same clock).
//
// TTFT = first frame's time - t_send. E2E = t_done - t_send. TPOT = (E2E - TTFT) / (n - 1) for
// n > 1 output tokens.
//
// ITL rule (one value per output token except the first, so n - 1 values per request):
//   - a frame k > 0 that carries m tokens and arrived g seconds after the previous token frame
//     contributes m values of g / m (the gap is divided evenly among the tokens it delivered);
//   - the first frame's extra tokens (m - 1 of them when it carries m > 1) contribute 0 each:
//     they arrived together with the first token.
// So a request's ITL values sum to (last frame's time - first frame's time), and their mean is
// that span / (n - 1). With one token per frame this is vLLM's ITL exactly; vLLM appends one
// value per chunk whatever it carries, which undercounts coalesced frames. Frames with zero
// tokens (never sent by a correct server) are skipped.
inline RequestMetrics request_metrics(double t_send, const std::vector<FrameArrival>& frames,
                                      double t_done) {
  RequestMetrics m;
  m.e2e_ms = (t_done - t_send) * 1e3;
  bool first = true;
  double t_prev = 0.0;
  for (const FrameArrival& f : frames) {
    if (f.tokens == 0) continue;
    m.output_tokens += f.tokens;
    if (first) {
      m.ttft_ms = (f.t - t_send) * 1e3;
      m.itl_ms.insert(m.itl_ms.end(), f.tokens - 1, 0.0);
      first = false;
    } else {
      const double each = (f.t - t_prev) * 1e3 / static_cast<double>(f.tokens);
      m.itl_ms.insert(m.itl_ms.end(), f.tokens, each);
    }
    t_prev = f.t;
  }
  if (m.output_tokens > 1)
    m.tpot_ms = (m.e2e_ms - m.ttft_ms) / static_cast<double>(m.output_tokens - 1);
  return m;
}

}  // namespace rz::wsbench
