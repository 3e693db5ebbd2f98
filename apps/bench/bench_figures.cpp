// Figures of a measured workload against the limits (see bench_figures.hpp).
#include "apps/bench/bench_figures.hpp"

namespace rz::bench {

Figures figures(const Workload& w, const Limits& lim) {
  Figures f;
  f.bandwidth_bound = w.kind != WorkloadKind::pp;
  if (w.kind == WorkloadKind::batched && w.error.empty() && w.prefill_seconds > 0) {
    f.prefill_tokens_per_s = double(w.batch) * w.prompt / w.prefill_seconds;
    f.prefill_tflops = w.prefill_flops / w.prefill_seconds / 1e12;
  }
  if (!w.ok() || w.tokens <= 0) return f;
  f.tflops = w.flops / w.seconds / 1e12;
  if (w.kind == WorkloadKind::pp) {
    f.tokens_per_s = w.tokens / w.seconds;
    f.step_ms = w.seconds * 1e3;
    if (lim.peak_flops > 0) {
      f.flops_share = w.flops / w.seconds / lim.peak_flops;
      if (w.flops > 0) f.ceiling_tokens_per_s = w.tokens * lim.peak_flops / w.flops;
    }
    return f;
  }
  const double step = w.seconds / w.tokens;
  f.tokens_per_s = double(w.batch) * w.tokens / w.seconds;
  f.step_ms = step * 1e3;
  if (lim.bandwidth > 0 && w.bytes_per_step > 0) {
    f.mbu = w.bytes_per_step / step / lim.bandwidth;
    f.ceiling_tokens_per_s = w.batch / (w.bytes_per_step / lim.bandwidth);
  }
  return f;
}

}  // namespace rz::bench
