// gpu_verify's arithmetic, header-only so that tests/gpu/verify_harness_test.cpp can check it
// without linking the tool: logit row comparison (NaN-aware), top-2 margins, the per-prompt
// tracker of two token streams (alignment, first divergence, near-tie classification) and the
// pass rule shared by the compare, hf and batch subcommands (see tests/gpu_verify/README.md).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

namespace rz::verify {

// One logits row of the tested executor against the reference's.
struct RowDiff {
  double max_abs = 0;   // max_i |test_i - ref_i|; +inf for a NaN/inf or a size mismatch
  double ref_max = 0;   // max_i |ref_i| (the row's scale)
  double rel() const { return ref_max > 0 ? max_abs / ref_max : max_abs; }
};

inline RowDiff row_diff(std::span<const float> test, std::span<const float> ref) {
  RowDiff d;
  if (test.size() != ref.size() || ref.empty()) {
    d.max_abs = std::numeric_limits<double>::infinity();
    return d;
  }
  for (size_t i = 0; i < ref.size(); ++i) {
    const double r = ref[i], t = test[i];
    const double a = std::fabs(t - r);
    if (!std::isfinite(a)) d.max_abs = std::numeric_limits<double>::infinity();
    else d.max_abs = std::max(d.max_abs, a);
    if (std::isfinite(r)) d.ref_max = std::max(d.ref_max, std::fabs(r));
  }
  return d;
}

// Top-1 minus top-2 logit (>= 0), and the top-1 id (lowest id on ties, like rz::argmax).
struct Top2 {
  int32_t id = -1;
  double margin = 0;
};

inline Top2 top2(std::span<const float> logits) {
  Top2 t;
  double best = -std::numeric_limits<double>::infinity(), second = best;
  for (size_t i = 0; i < logits.size(); ++i) {
    const double v = logits[i];
    if (v > best) {
      second = best;
      best = v;
      t.id = static_cast<int32_t>(i);
    } else if (v > second) {
      second = v;
    }
  }
  t.margin = (t.id >= 0 && std::isfinite(second)) ? best - second : 0.0;
  return t;
}

// The first step where the tested token differs from the reference token.
struct Divergence {
  int step = -1;           // -1: none
  int32_t ref_token = -1, test_token = -1;
  double ref_margin = 0;   // the reference's top-2 margin at that step (NaN: unknown)
  double test_margin = 0;  // the tested executor's (NaN: unknown)
  double max_abs = 0;      // |dlogit| at that step (NaN: not compared)
  double rel = 0;          // that relative to the row's max |reference logit| (NaN: not compared)
  bool estimated = false;  // max_abs/rel are the largest of the earlier compared steps instead
  // A near-tie: the reference's margin is no larger than twice the measured logit difference at
  // that step, so rounding alone can swap the two best tokens.
  bool near_tie() const { return std::isfinite(max_abs) && ref_margin <= 2 * max_abs; }
};

// Two token streams of one prompt, step by step. Logits are compared only while the streams
// are aligned (every earlier token equal): after a divergence the executors see different
// sequences.
class StreamCompare {
 public:
  // Call once per generated token, in order. `ref_logits`/`test_logits` may be empty: rows are
  // compared when both are present (e.g. a golden has logits for some steps only); the tested
  // token is checked against the argmax of test_logits whenever present. `ref_margin_known` may
  // be NaN (unknown) and is then taken from ref_logits when present.
  void step(int32_t ref_tok, int32_t test_tok, std::span<const float> ref_logits,
            std::span<const float> test_logits, double ref_margin_known = NAN) {
    const int s = steps_++;
    double ref_margin = ref_margin_known, test_margin = NAN;
    if (!test_logits.empty()) {
      const Top2 tt = top2(test_logits);
      test_margin = tt.margin;
      // The token the tested executor returned must be the argmax of the logits it kept.
      if (tt.id != test_tok) ++argmax_mismatch_;
    }
    if (!aligned_) return;
    double step_abs = NAN, step_rel = NAN;
    if (!ref_logits.empty() && !test_logits.empty()) {
      const RowDiff d = row_diff(test_logits, ref_logits);
      ++compared_;
      step_abs = d.max_abs;
      step_rel = d.rel();
      if (!(d.max_abs <= worst_abs_)) worst_abs_ = d.max_abs;  // NaN/inf sticks
      if (!(d.rel() <= worst_rel_)) worst_rel_ = d.rel();
    }
    if (!ref_logits.empty()) {
      const Top2 rt = top2(ref_logits);
      if (std::isnan(ref_margin)) ref_margin = rt.margin;
      if (rt.id != ref_tok) ++ref_argmax_mismatch_;
    }
    if (!std::isnan(ref_margin)) min_ref_margin_ = std::min(min_ref_margin_, ref_margin);
    if (ref_tok == test_tok) {
      ++equal_;
      return;
    }
    aligned_ = false;
    // No rows at this step (a golden without them): the largest difference of the rows compared
    // so far stands in for it.
    const bool estimated = std::isnan(step_abs) && compared_ > 0;
    if (estimated) step_abs = worst_abs_, step_rel = worst_rel_;
    div_ = {s, ref_tok, test_tok, ref_margin, test_margin, step_abs, step_rel, estimated};
  }

  int steps() const { return steps_; }
  int equal_tokens() const { return equal_; }  // matching tokens before the first divergence
  int compared() const { return compared_; }   // logit rows compared
  bool aligned() const { return aligned_; }
  const Divergence& divergence() const { return div_; }
  double worst_abs() const { return worst_abs_; }
  double worst_rel() const { return worst_rel_; }
  double min_ref_margin() const { return min_ref_margin_; }
  int argmax_mismatches() const { return argmax_mismatch_; }          // tested sampler
  int ref_argmax_mismatches() const { return ref_argmax_mismatch_; }  // reference sampler

 private:
  int steps_ = 0, equal_ = 0, compared_ = 0;
  bool aligned_ = true;
  Divergence div_;
  double worst_abs_ = 0, worst_rel_ = 0;
  double min_ref_margin_ = std::numeric_limits<double>::infinity();
  int argmax_mismatch_ = 0, ref_argmax_mismatch_ = 0;
};

// The pass rule. tol is relative: max |dlogit| / max |reference logit| of the row.
struct Verdict {
  bool pass = false;
  bool tie = false;  // diverged, but at a near-tie (allowed with ties_ok)
  std::string why;   // empty when it passes cleanly
};

inline Verdict judge(const StreamCompare& c, double tol, bool ties_ok) {
  Verdict v;
  std::string why;
  if (!(c.worst_rel() <= tol)) why += "logits off by " + std::to_string(c.worst_rel()) + " > tol; ";
  if (c.argmax_mismatches() > 0)
    why += std::to_string(c.argmax_mismatches()) + " token(s) not the argmax of own logits; ";
  if (c.ref_argmax_mismatches() > 0)
    why += std::to_string(c.ref_argmax_mismatches()) + " reference token(s) not its argmax; ";
  if (!c.aligned()) {
    const Divergence& d = c.divergence();
    v.tie = d.near_tie() && d.rel <= tol;
    if (!(ties_ok && v.tie))
      why += std::string("tokens diverge at step ") + std::to_string(d.step) +
             (v.tie ? " (near-tie)" : "") + "; ";
  }
  if (!why.empty()) why.resize(why.size() - 2);
  v.pass = why.empty();
  v.why = why;
  return v;
}

}  // namespace rz::verify
