// The figures a measured workload comes to against the limits (bench_results.hpp): tokens/s and
// step time, and its share of the limit that bounds it. Decode (tg, batched) is bound by memory
// bandwidth: MBU = bytes per step / step time / bandwidth, ceiling = B / (bytes per step /
// bandwidth) tokens/s. Prefill (pp) is bound by compute: TFLOP/s = FLOPs / time (bench_cost.hpp
// counts them) against the peak, ceiling = tokens x peak / FLOPs tokens/s.
#pragma once
#include <cmath>

#include "apps/bench/bench_results.hpp"

namespace rz::bench {

// NaN where a figure does not apply, the workload failed, or no limit is known.
struct Figures {
  double tokens_per_s = NAN;          // pp: prompt tokens/s; tg, batched: generated (S_TG)
  double step_ms = NAN;               // pp: the prefill; tg, batched: one decode step
  double tflops = NAN;                // achieved
  double mbu = NAN;                   // tg, batched
  double flops_share = NAN;           // pp: achieved / peak FLOP/s
  double ceiling_tokens_per_s = NAN;  // at the limit that applies
  double prefill_tokens_per_s = NAN;  // batched: the B prompts' prefill
  double prefill_tflops = NAN;        // batched
  bool bandwidth_bound = false;       // the limit that applies: bandwidth (tg, batched) or compute
  double limit_share() const { return bandwidth_bound ? mbu : flops_share; }
};

Figures figures(const Workload& w, const Limits& lim);

}  // namespace rz::bench
