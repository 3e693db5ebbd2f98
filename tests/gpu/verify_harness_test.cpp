// The arithmetic and pass rule of the gpu_verify tool (tests/gpu_verify/verify_stats.hpp): logit
// row differences (NaN never passes), top-2 margins, stream alignment, first divergence,
// near-tie classification. Host only; the tool itself runs on the GPU machine.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tests/gpu_verify/verify_stats.hpp"

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
  EXPECT_TRUE(c.aligned());
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

TEST(VerifyHarness, NearTieDivergenceAllowedOnlyWithTiesOk) {
  StreamCompare c;
  c.step(0, 0, row(0, 1.0f), row(0, 1.0f));
  // Reference picks 3 over 4 by 0.002; the tested rows pick 4 by 0.002 (|dlogit| 0.002).
  std::vector<float> ref = row(3, 0.002f), test = ref;
  test[4] += 0.004f;
  c.step(3, 4, ref, test);
  c.step(5, 6, row(5, 1.0f), row(6, 1.0f));  // after the divergence: not compared
  EXPECT_FALSE(c.aligned());
  EXPECT_EQ(c.equal_tokens(), 1);
  EXPECT_EQ(c.compared(), 2);
  EXPECT_EQ(c.divergence().step, 1);
  EXPECT_NEAR(c.divergence().ref_margin, 0.002, 1e-6);
  EXPECT_TRUE(c.divergence().near_tie());
  EXPECT_FALSE(judge(c, 0.02, false).pass);
  const Verdict v = judge(c, 0.02, true);
  EXPECT_TRUE(v.pass) << v.why;
  EXPECT_TRUE(v.tie);
}

TEST(VerifyHarness, ClearMarginDivergenceFailsEvenWithTiesOk) {
  StreamCompare c;
  std::vector<float> ref = row(3, 0.5f), test = ref;
  test[4] += 0.6f;  // the tested rows now pick 4: |dlogit| 0.6 against a 0.5 margin
  c.step(3, 4, ref, test);
  EXPECT_FALSE(judge(c, 0.02, true).pass);
  // Without logits at that step and none compared before, it is never a near-tie.
  StreamCompare g;
  g.step(3, 4, {}, {}, 0.001);
  EXPECT_FALSE(g.divergence().near_tie());
  EXPECT_FALSE(judge(g, 0.02, true).pass);
}

TEST(VerifyHarness, GoldenMarginsStandInWhenRowsAreMissing) {
  StreamCompare c;
  std::vector<float> ref = row(0, 1.0f), test = ref;
  test[2] += 0.003f;
  c.step(0, 0, ref, test);                // compared: |dlogit| 0.003
  c.step(1, 2, {}, row(2, 0.1f), 0.004);  // diverges at a golden margin of 0.004
  EXPECT_TRUE(c.divergence().estimated);
  EXPECT_NEAR(c.divergence().max_abs, 0.003, 1e-6);
  EXPECT_TRUE(c.divergence().near_tie());
  EXPECT_NEAR(c.min_ref_margin(), 0.004, 1e-9);
  EXPECT_TRUE(judge(c, 0.02, true).pass);
}

}  // namespace
}  // namespace rz::verify
