// gpu_verify's arithmetic, header-only so that tests/gpu/verify_harness_test.cpp can check it
// without linking the tool: logit row comparison (NaN-aware), top-2 margins, the per-prompt
// comparison of a teacher-forced token stream (every step compared, every divergence recorded
// and classified), the excused-divergence cap of a whole run, and the pass rule shared by the
// compare, hf and batch subcommands (see tests/gpu_verify/README.md).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <span>
#include <string>
#include <vector>

namespace rz::verify {

// One logits row of the tested executor against the reference's.
struct RowDiff {
  double max_abs = 0;  // max_i |test_i - ref_i|; +inf for a NaN/inf or a size mismatch
  double ref_max = 0;  // max_i |ref_i| (the row's scale)
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
    if (!std::isfinite(a))
      d.max_abs = std::numeric_limits<double>::infinity();
    else
      d.max_abs = std::max(d.max_abs, a);
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

// One step where the tested executor's token differs from the reference's.
struct Divergence {
  int step = -1;
  int32_t ref_token = -1, test_token = -1;
  double ref_margin = 0;   // the reference's top-2 margin at that step (NaN: unknown)
  double test_margin = 0;  // the tested executor's (NaN: unknown)
  double max_abs = NAN;    // that row's measured max |dlogit| (NaN: no reference row there)
  double rel = NAN;        // that relative to the row's max |reference logit|
  bool exact = false;      // a step that must be bit-identical (same kernels): never excused
  // Excused: the reference's top-2 margin is below the logit difference measured on that very
  // row, so the measured error alone can swap the two best tokens. A step without a reference
  // row (a golden that keeps some rows only) has no measurement and is never excused.
  bool excused() const { return !exact && std::isfinite(max_abs) && ref_margin < max_abs; }
};

// The token streams of one prompt, step by step, with the tested executor teacher-forced: it is
// fed the reference's tokens, so both see the same sequence at every step and every step's
// logits compare position by position, also after a divergence. Each step's divergence (the
// tested executor's own pick differs from the reference's) is recorded on its own.
class StreamCompare {
 public:
  // Call once per generated token, in order. `ref_logits`/`test_logits` may be empty: rows are
  // compared when both are present (a golden has logits for some steps only); the tested
  // token is checked against the argmax of test_logits whenever present. `ref_margin_known` may
  // be NaN (unknown) and is then taken from ref_logits when present. `exact`: the two rows
  // come from the same kernels on the same inputs and must be bit-identical.
  void step(int32_t ref_tok, int32_t test_tok, std::span<const float> ref_logits,
            std::span<const float> test_logits, double ref_margin_known = NAN, bool exact = false) {
    const int s = steps_++;
    double ref_margin = ref_margin_known, test_margin = NAN;
    if (!test_logits.empty()) {
      const Top2 tt = top2(test_logits);
      test_margin = tt.margin;
      // The token the tested executor returned must be the argmax of the logits it kept.
      if (tt.id != test_tok) ++argmax_mismatch_;
    }
    double step_abs = NAN, step_rel = NAN;
    if (!ref_logits.empty() && !test_logits.empty()) {
      const RowDiff d = row_diff(test_logits, ref_logits);
      ++compared_;
      step_abs = d.max_abs;
      step_rel = d.rel();
      if (!(d.max_abs <= worst_abs_)) worst_abs_ = d.max_abs;  // NaN/inf sticks
      if (!(d.rel() <= worst_rel_)) worst_rel_ = d.rel();
      if (exact) {
        ++exact_steps_;
        if (!(d.max_abs == 0)) ++exact_mismatch_;
      } else {
        ++inexact_steps_;
        if (!(d.max_abs <= worst_inexact_abs_)) worst_inexact_abs_ = d.max_abs;
        if (!(d.rel() <= worst_inexact_rel_)) worst_inexact_rel_ = d.rel();
      }
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
    divs_.push_back({s, ref_tok, test_tok, ref_margin, test_margin, step_abs, step_rel, exact});
  }

  int steps() const { return steps_; }
  int equal_tokens() const { return equal_; }  // steps whose tokens agree
  int compared() const { return compared_; }   // logit rows compared
  const std::vector<Divergence>& divergences() const { return divs_; }
  int excused() const {
    int n = 0;
    for (const Divergence& d : divs_) n += d.excused() ? 1 : 0;
    return n;
  }
  int unexcused() const { return static_cast<int>(divs_.size()) - excused(); }
  double worst_abs() const { return worst_abs_; }
  double worst_rel() const { return worst_rel_; }
  // Rows compared with exact = true, and how many of them were not bit-identical.
  int exact_steps() const { return exact_steps_; }
  int exact_mismatches() const { return exact_mismatch_; }
  // The largest difference over the rows compared with exact = false (kernels differ).
  int inexact_steps() const { return inexact_steps_; }
  double worst_inexact_abs() const { return worst_inexact_abs_; }
  double worst_inexact_rel() const { return worst_inexact_rel_; }
  double min_ref_margin() const { return min_ref_margin_; }
  int argmax_mismatches() const { return argmax_mismatch_; }          // tested sampler
  int ref_argmax_mismatches() const { return ref_argmax_mismatch_; }  // reference sampler

 private:
  int steps_ = 0, equal_ = 0, compared_ = 0;
  std::vector<Divergence> divs_;
  double worst_abs_ = 0, worst_rel_ = 0;
  int exact_steps_ = 0, exact_mismatch_ = 0, inexact_steps_ = 0;
  double worst_inexact_abs_ = 0, worst_inexact_rel_ = 0;
  double min_ref_margin_ = std::numeric_limits<double>::infinity();
  int argmax_mismatch_ = 0, ref_argmax_mismatch_ = 0;
};

// The per-prompt pass rule. tol is relative: max |dlogit| / max |reference logit| of the row;
// tol 0 asks for bit-identical rows. Excused divergences (Divergence::excused) pass only with
// excuse_ok; every other divergence fails. Rows compared with exact = true must be identical.
struct Verdict {
  bool pass = false;
  int excused = 0;  // divergences let through (reported; capped over the run by ExcuseCap)
  std::string why;  // empty when it passes cleanly
};

inline Verdict judge(const StreamCompare& c, double tol, bool excuse_ok) {
  Verdict v;
  std::string why;
  if (!(c.worst_rel() <= tol)) why += "logits off by " + std::to_string(c.worst_rel()) + " > tol; ";
  if (c.exact_mismatches() > 0)
    why += std::to_string(c.exact_mismatches()) + " of " + std::to_string(c.exact_steps()) +
           " same-kernel row(s) not bit-identical; ";
  if (c.argmax_mismatches() > 0)
    why += std::to_string(c.argmax_mismatches()) + " token(s) not the argmax of own logits; ";
  if (c.ref_argmax_mismatches() > 0)
    why += std::to_string(c.ref_argmax_mismatches()) + " reference token(s) not its argmax; ";
  const int exc = c.excused(), unexc = c.unexcused();
  if (unexc > 0) {
    why += std::to_string(unexc) + " divergence(s) not excused (first at step ";
    for (const Divergence& d : c.divergences())
      if (!d.excused()) {
        why += std::to_string(d.step) + "); ";
        break;
      }
  }
  if (exc > 0 && !excuse_ok)
    why += std::to_string(exc) + " divergence(s) within the measured error (--ties-ok allows); ";
  if (!why.empty()) why.resize(why.size() - 2);
  v.pass = why.empty();
  v.excused = excuse_ok ? exc : 0;
  v.why = why;
  return v;
}

// The excused share of a whole run: excused divergences over all steps compared. Above
// `max_share` (default 1 %) the run fails even when each prompt passed: a correct executor
// swaps near-tied tokens rarely, a subtly wrong one often.
struct ExcuseCap {
  double max_share = 0.01;
  long steps = 0, excused = 0;
  void add(const StreamCompare& c, const Verdict& v) {
    steps += c.steps();
    excused += v.excused;
  }
  double share() const { return steps > 0 ? static_cast<double>(excused) / steps : 0.0; }
  bool ok() const { return share() <= max_share; }
  std::string summary() const {
    char buf[160];
    std::snprintf(buf, sizeof buf, "excused divergences %ld of %ld steps (%.2f %%, cap %.2f %%)",
                  excused, steps, 100 * share(), 100 * max_share);
    return buf;
  }
};

}  // namespace rz::verify
