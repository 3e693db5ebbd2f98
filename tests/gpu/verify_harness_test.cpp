// The arithmetic and pass rule of the gpu_verify tool (tests/gpu_verify/verify_stats.hpp): logit
// row differences (NaN never passes), top-2 margins, teacher-forced streams (every step compared,
// every divergence recorded), the excuse rule (reference margin below the row's measured
// |dlogit|), the excused-share cap, exact (bit-identical) comparison, and the tolerance table
// (verify_tolerances.hpp). Host only; the tool itself runs on the GPU machine.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "cpu/cpu_executor.hpp"
#include "formats/model_file.hpp"
#include "sched/slot_runner.hpp"
#include "tests/gpu_verify/verify_stats.hpp"
#include "tests/gpu_verify/verify_tolerances.hpp"

namespace rz::verify {
namespace {

TEST(VerifyHarness, RowDiffIsMaxAbsAndScale) {
  const std::vector<float> ref = {1.0f, -4.0f, 2.0f}, test = {1.5f, -4.0f, 1.75f};
  const RowDiff d = row_diff(test, ref);
  EXPECT_DOUBLE_EQ(d.max_abs, 0.5);
  EXPECT_DOUBLE_EQ(d.ref_max, 4.0);
  EXPECT_DOUBLE_EQ(d.rel(), 0.125);
}

TEST(VerifyHarness, RowDiffNaNSizeMismatchAndEmptyNeverPass) {
  const std::vector<float> ref = {1.0f, 2.0f};
  EXPECT_TRUE(std::isinf(row_diff(std::vector<float>{NAN, 2.0f}, ref).max_abs));
  EXPECT_TRUE(std::isinf(row_diff(std::vector<float>{INFINITY, 2.0f}, ref).max_abs));
  EXPECT_TRUE(std::isinf(row_diff(std::vector<float>{1.0f}, ref).max_abs));
  EXPECT_TRUE(std::isinf(row_diff(std::vector<float>{}, std::vector<float>{}).max_abs));
}

TEST(VerifyHarness, Top2MarginAndLowestIdOnTies) {
  const std::vector<float> l = {0.5f, 3.0f, 2.25f, 3.0f};
  const Top2 t = top2(l);
  EXPECT_EQ(t.id, 1);
  EXPECT_DOUBLE_EQ(t.margin, 0.0);
  const std::vector<float> m = {0.5f, 3.0f, 2.25f};
  EXPECT_EQ(top2(m).id, 1);
  EXPECT_DOUBLE_EQ(top2(m).margin, 0.75);
}

// Logits rows with argmax at `tok` and the runner-up at tok+1 `margin` below.
std::vector<float> row(int tok, float margin, int n = 8) {
  std::vector<float> r(static_cast<size_t>(n), -1.0f);
  r[static_cast<size_t>(tok)] = 2.0f;
  r[static_cast<size_t>((tok + 1) % n)] = 2.0f - margin;
  return r;
}

TEST(VerifyHarness, EqualStreamsPass) {
  StreamCompare c;
  for (int s = 0; s < 5; ++s) {
    std::vector<float> ref = row(s, 1.0f), test = ref;
    test[7] += 0.01f;
    c.step(s, s, ref, test);
  }
  EXPECT_EQ(c.equal_tokens(), 5);
  EXPECT_EQ(c.compared(), 5);
  EXPECT_NEAR(c.worst_abs(), 0.01, 1e-6);
  EXPECT_TRUE(judge(c, 0.02, false).pass);
  EXPECT_FALSE(judge(c, 0.001, false).pass);  // 0.01 / 2 = 0.005 relative > 0.001
}

TEST(VerifyHarness, NaNLogitsFail) {
  StreamCompare c;
  std::vector<float> ref = row(1, 1.0f), test = ref;
  test[3] = NAN;
  c.step(1, 1, ref, test);
  EXPECT_FALSE(judge(c, 1e9, true).pass);
}

TEST(VerifyHarness, TokenNotTheArgmaxOfOwnLogitsFails) {
  StreamCompare c;
  const std::vector<float> ref = row(2, 1.0f);
  c.step(2, 2, ref, row(4, 1.0f));  // returned 2 while its logits pick 4
  EXPECT_EQ(c.argmax_mismatches(), 1);
  EXPECT_FALSE(judge(c, 1e9, true).pass);
}

// A reference row picking `tok` by `margin` over tok+1, and a tested row equal to it except that
// tok+1 is raised by `bump` (bump > margin: the tested executor picks tok+1; |dlogit| = bump).
struct Pair {
  std::vector<float> ref, test;
};
Pair flipped(int tok, float margin, float bump) {
  Pair p{row(tok, margin), {}};
  p.test = p.ref;
  p.test[static_cast<size_t>(tok + 1)] += bump;
  return p;
}

TEST(VerifyHarness, DivergenceExcusedOnlyWhenMarginBelowMeasuredDiff) {
  // margin 0.002, |dlogit| 0.004: the measured error alone swaps the two: excused.
  StreamCompare c;
  Pair p = flipped(3, 0.002f, 0.004f);
  c.step(3, 4, p.ref, p.test);
  ASSERT_EQ(c.divergences().size(), 1u);
  EXPECT_TRUE(c.divergences()[0].excused());
  EXPECT_NEAR(c.divergences()[0].ref_margin, 0.002, 1e-6);
  EXPECT_NEAR(c.divergences()[0].max_abs, 0.004, 1e-6);
  const Verdict v = judge(c, 0.02, true);
  EXPECT_TRUE(v.pass) << v.why;
  EXPECT_EQ(v.excused, 1);
  EXPECT_FALSE(judge(c, 0.02, false).pass);  // excuses need --ties-ok

  // margin 0.003 against a measured |dlogit| of 0.002 (+0.002 on the runner-up, -0.0015 on the
  // top one): the old rule (margin <= 2 x |dlogit|) excused it; the measured difference must
  // now exceed the margin itself.
  StreamCompare d;
  std::vector<float> ref = row(3, 0.003f), test = ref;
  test[4] += 0.002f;
  test[3] -= 0.0015f;
  d.step(3, 4, ref, test);
  ASSERT_EQ(d.divergences().size(), 1u);
  EXPECT_NEAR(d.divergences()[0].max_abs, 0.002, 1e-6);
  EXPECT_FALSE(d.divergences()[0].excused());
  EXPECT_FALSE(judge(d, 0.02, true).pass);
}

TEST(VerifyHarness, ClearMarginDivergenceFailsEvenWithTiesOk) {
  StreamCompare c;
  Pair p = flipped(3, 0.5f, 0.6f);  // |dlogit| 0.6 against 0.5: excused by the rule ...
  c.step(3, 4, p.ref, p.test);
  EXPECT_TRUE(c.divergences()[0].excused());
  EXPECT_FALSE(judge(c, 0.02, true).pass);  // ... but 0.6 / 2 = 30 % of the row is far off tol
  // Without logits at that step there is no measurement: never excused.
  StreamCompare g;
  g.step(3, 4, {}, {}, 0.001);
  EXPECT_FALSE(g.divergences()[0].excused());
  EXPECT_FALSE(judge(g, 0.02, true).pass);
}

TEST(VerifyHarness, TeacherForcedStreamsCompareEveryStepAfterADivergence) {
  StreamCompare c;
  c.step(0, 0, row(0, 1.0f), row(0, 1.0f));
  Pair p = flipped(3, 0.002f, 0.004f);
  c.step(3, 4, p.ref, p.test);               // an excused divergence at step 1
  c.step(5, 5, row(5, 1.0f), row(5, 1.0f));  // forced on the reference's 3: aligned again
  EXPECT_EQ(c.compared(), 3);
  EXPECT_EQ(c.equal_tokens(), 2);
  EXPECT_TRUE(judge(c, 0.02, true).pass) << judge(c, 0.02, true).why;
  // A wrong row after the divergence is still seen, and so is a second divergence.
  std::vector<float> bad = row(6, 1.0f);
  bad[0] += 0.5f;
  c.step(6, 6, row(6, 1.0f), bad);
  Pair q = flipped(1, 0.3f, 0.4f);
  q.test[7] += 0.2f;
  c.step(1, 2, q.ref, q.test);
  EXPECT_EQ(c.compared(), 5);
  ASSERT_EQ(c.divergences().size(), 2u);
  EXPECT_EQ(c.divergences()[0].step, 1);
  EXPECT_EQ(c.divergences()[1].step, 4);
  const Verdict v = judge(c, 0.02, true);
  EXPECT_FALSE(v.pass);
  EXPECT_NE(v.why.find("logits off"), std::string::npos) << v.why;
}

TEST(VerifyHarness, ExcusedShareAboveTheCapFailsTheRun) {
  // 2 prompts x 100 steps; one excused divergence passes a 1 % cap, three do not.
  auto prompt = [](int excused) {
    StreamCompare c;
    for (int s = 0; s < 100; ++s) {
      if (s < excused) {
        Pair p = flipped(3, 0.002f, 0.004f);
        c.step(3, 4, p.ref, p.test);
      } else {
        c.step(2, 2, row(2, 1.0f), row(2, 1.0f));
      }
    }
    return c;
  };
  ExcuseCap ok, over;
  for (int e : {1, 1}) {
    const StreamCompare c = prompt(e);
    const Verdict v = judge(c, 0.02, true);
    EXPECT_TRUE(v.pass) << v.why;
    ok.add(c, v);
  }
  for (int e : {1, 2}) {
    const StreamCompare c = prompt(e);
    over.add(c, judge(c, 0.02, true));
  }
  EXPECT_EQ(ok.steps, 200);
  EXPECT_EQ(ok.excused, 2);
  EXPECT_TRUE(ok.ok()) << ok.summary();
  EXPECT_EQ(over.excused, 3);
  EXPECT_FALSE(over.ok()) << over.summary();
  EXPECT_NE(over.summary().find("3 of 200"), std::string::npos) << over.summary();
}

TEST(VerifyHarness, ExactModeRejectsAnyDifference) {
  StreamCompare c;
  std::vector<float> ref = row(1, 1.0f), test = ref;
  c.step(1, 1, ref, test);
  EXPECT_TRUE(judge(c, 0.0, false).pass);
  test[5] = std::nextafter(test[5], 0.0f);  // one ulp
  c.step(1, 1, ref, test);
  EXPECT_FALSE(judge(c, 0.0, false).pass);
  EXPECT_TRUE(judge(c, 1e-6, false).pass);
  // tol 0 leaves no divergence excusable: a margin is never below a zero difference.
  StreamCompare t;
  std::vector<float> tied(8, 0.0f);
  tied[2] = tied[3] = 1.0f;
  t.step(3, 2, tied, tied);  // the reference claims 3 where its own argmax is 2
  EXPECT_FALSE(t.divergences()[0].excused());
  EXPECT_FALSE(judge(t, 0.0, true).pass);
}

TEST(VerifyHarness, SameKernelRowsMustBeBitIdenticalAndAreNeverExcused) {
  StreamCompare c;
  std::vector<float> ref = row(1, 1.0f), test = ref;
  c.step(1, 1, ref, test, NAN, /*exact=*/true);
  test[0] += 1e-6f;
  c.step(1, 1, ref, test, NAN, /*exact=*/false);  // kernels differ: within tol is fine
  EXPECT_EQ(c.exact_steps(), 1);
  EXPECT_EQ(c.exact_mismatches(), 0);
  EXPECT_EQ(c.inexact_steps(), 1);
  EXPECT_NEAR(c.worst_inexact_abs(), 1e-6, 1e-7);
  EXPECT_TRUE(judge(c, 0.02, false).pass);
  c.step(1, 1, ref, test, NAN, /*exact=*/true);  // same kernels, 1e-6 apart: fails
  EXPECT_EQ(c.exact_mismatches(), 1);
  EXPECT_FALSE(judge(c, 0.02, true).pass);
  StreamCompare d;
  Pair p = flipped(3, 0.002f, 0.004f);
  d.step(3, 4, p.ref, p.test, NAN, /*exact=*/true);
  EXPECT_FALSE(d.divergences()[0].excused());
}

TEST(VerifyHarness, GoldenMarginsWithoutRowsAreNotExcused) {
  StreamCompare c;
  std::vector<float> ref = row(0, 1.0f), test = ref;
  test[2] += 0.003f;
  c.step(0, 0, ref, test);                // compared: |dlogit| 0.003
  c.step(1, 2, {}, row(2, 0.1f), 0.001);  // diverges where the golden keeps no row
  EXPECT_NEAR(c.min_ref_margin(), 0.001, 1e-9);
  EXPECT_TRUE(std::isnan(c.divergences()[0].max_abs));
  EXPECT_FALSE(c.divergences()[0].excused());
  EXPECT_FALSE(judge(c, 0.02, true).pass);
}

// compare --cpu-vs-cpu demands bit-identical logits: two CPU executors on the same prompts, one
// teacher-forced on the other's tokens, must agree exactly.
TEST(VerifyHarness, TwoCpuExecutorsAreBitIdentical) {
  auto f = ModelFile::open(RZ_SOURCE_DIR "/tests/golden/cpu_tiny_qwen2.gguf");
  CpuExecutor a(f, CpuExecutorOptions{.slots = 2, .max_context = 64, .threads = 0});
  CpuExecutor b(f, CpuExecutorOptions{.slots = 2, .max_context = 64, .threads = 1});
  SlotRunner ra(a), rb(b);
  a.set_keep_logits(true);
  b.set_keep_logits(true);
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> tok(0, f->config().n_vocab - 1);
  std::vector<PrefillRequest> pre(2);
  for (int i = 0; i < 2; ++i) {
    pre[i].slot = i;
    for (int k = 0; k < 5 + 9 * i; ++k) pre[i].tokens.push_back(tok(rng));
  }
  std::vector<int32_t> ta = ra.prefill(pre), tb = rb.prefill(pre);
  StreamCompare c[2];
  for (int step = 0; step < 8; ++step) {
    for (int i = 0; i < 2; ++i) c[i].step(ta[i], tb[i], a.last_logits(i), b.last_logits(i));
    std::vector<DecodeRequest> dec = {{0, ta[0]}, {1, ta[1]}};
    ta = ra.decode(dec);
    tb = rb.decode(dec);
  }
  for (auto& s : c) {
    EXPECT_EQ(s.compared(), 8);
    EXPECT_EQ(s.worst_abs(), 0.0);
    EXPECT_TRUE(judge(s, 0.0, false).pass) << judge(s, 0.0, false).why;
  }
}

TEST(VerifyHarness, TolerancesAreThreeTimesTheMeasuredError) {
  for (const MeasuredError& m : kMeasured) {
    const Tolerance t = tolerance_for(m.shape, m.format);
    EXPECT_DOUBLE_EQ(t.measured, m.rel) << m.shape << " " << m.format;
    EXPECT_DOUBLE_EQ(t.tol, 3 * m.rel) << m.shape << " " << m.format;
  }
  EXPECT_STREQ(shape_name(2, 256), "tiny");
  EXPECT_STREQ(shape_name(28, 1536), "qwen2.5-1.5b");
  EXPECT_STREQ(shape_name(18, 640), "gemma3-270m");
  EXPECT_STREQ(shape_name(3, 100), "");
  EXPECT_NE(tolerance_for("gemma3-270m", "Q5_0").basis.find("(H100)"), std::string::npos);
  // Gemma's own measurement serves no other model: another Q5_0 model borrows the largest of all
  // the others.
  EXPECT_DOUBLE_EQ(tolerance_for("qwen2.5-1.5b", "Q5_0").measured, 3.66e-3);
  // No measurement for the pair: the largest of that format (qwen Q4_K), then of any format.
  const Tolerance q = tolerance_for("", "Q4_K");
  EXPECT_DOUBLE_EQ(q.measured, 3.21e-3);
  EXPECT_NE(q.basis.find("nothing measured"), std::string::npos) << q.basis;
  const Tolerance any = tolerance_for("tiny", "Q6_K");
  EXPECT_DOUBLE_EQ(any.measured, 3.66e-3);
  EXPECT_LE(any.tol, 0.011);
}

}  // namespace
}  // namespace rz::verify
