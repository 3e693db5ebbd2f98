// Tests of bench/wsbench_stats.hpp: percentiles against a brute-force selection on random data and
// against hand-computed values, and the per-request metrics (TTFT, the ITL splitting rule for
// coalesced frames, TPOT, E2E) on timelines worked out by hand.
#include "bench/wsbench_stats.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace rz::wsbench {
namespace {

// The k-th smallest element (0-based) by counting, without sorting: x is it when fewer than k+1
// elements are below x and at least k+1 are at or below x.
double kth_by_counting(const std::vector<double>& v, std::size_t k) {
  for (double x : v) {
    std::size_t below = 0, at_or_below = 0;
    for (double y : v) {
      below += y < x;
      at_or_below += y <= x;
    }
    if (below <= k && k < at_or_below) return x;
  }
  ADD_FAILURE() << "no k-th element";
  return kNaN;
}

// numpy's "linear" percentile written from its definition, on the brute-force selection.
double brute_percentile(const std::vector<double>& v, double p) {
  const double r = p / 100.0 * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(r));
  const double a = kth_by_counting(v, lo);
  if (lo + 1 >= v.size()) return a;
  const double b = kth_by_counting(v, lo + 1);
  return a + (r - static_cast<double>(lo)) * (b - a);
}

TEST(WsbenchStats, PercentileMatchesBruteForceOnRandomData) {
  std::mt19937_64 rng(1234);
  std::uniform_int_distribution<int> size(1, 300);
  std::lognormal_distribution<double> value(3.0, 1.0);
  std::uniform_int_distribution<int> small(0, 5);  // many ties
  const double ps[] = {0, 1, 10, 25, 50, 75, 90, 95, 99, 99.9, 100};
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<double> v(static_cast<std::size_t>(size(rng)));
    for (double& x : v) x = trial % 2 ? value(rng) : small(rng);
    std::vector<double> sorted = v;
    std::sort(sorted.begin(), sorted.end());
    for (double p : ps) {
      const double want = brute_percentile(v, p);
      EXPECT_NEAR(percentile_sorted(sorted, p), want, 1e-9 * std::max(1.0, std::fabs(want)))
          << "n=" << v.size() << " p=" << p;
    }
    const Summary s = summarize(v);  // unsorted input
    EXPECT_EQ(s.count, v.size());
    EXPECT_NEAR(s.p50, brute_percentile(v, 50), 1e-9 * std::max(1.0, std::fabs(s.p50)));
    EXPECT_NEAR(s.p90, brute_percentile(v, 90), 1e-9 * std::max(1.0, std::fabs(s.p90)));
    EXPECT_NEAR(s.p99, brute_percentile(v, 99), 1e-9 * std::max(1.0, std::fabs(s.p99)));
    double sum = 0;
    for (double x : v) sum += x;
    EXPECT_NEAR(s.mean, sum / v.size(), 1e-9 * std::max(1.0, std::fabs(s.mean)));
  }
}

TEST(WsbenchStats, PercentileHandValues) {
  // numpy.percentile([1, 2, 3, 4], [0, 50, 90, 99, 100]) = 1, 2.5, 3.7, 3.97, 4
  const std::vector<double> v = {1, 2, 3, 4};
  EXPECT_DOUBLE_EQ(percentile_sorted(v, 0), 1.0);
  EXPECT_DOUBLE_EQ(percentile_sorted(v, 50), 2.5);
  EXPECT_NEAR(percentile_sorted(v, 90), 3.7, 1e-12);
  EXPECT_NEAR(percentile_sorted(v, 99), 3.97, 1e-12);
  EXPECT_DOUBLE_EQ(percentile_sorted(v, 100), 4.0);
  // rank 0.4 * 4 = 1.6 -> 20 + 0.6 * (35 - 20) = 29
  EXPECT_NEAR(percentile_sorted({15, 20, 35, 40, 50}, 40), 29.0, 1e-12);
  EXPECT_DOUBLE_EQ(percentile_sorted({7}, 99), 7.0);
}

TEST(WsbenchStats, EmptySummaryIsNaN) {
  const Summary s = summarize({});
  EXPECT_EQ(s.count, 0u);
  EXPECT_TRUE(std::isnan(s.mean));
  EXPECT_TRUE(std::isnan(s.p50));
  EXPECT_TRUE(std::isnan(s.p99));
  EXPECT_TRUE(std::isnan(percentile_sorted({}, 50)));
}

TEST(WsbenchStats, OneTokenPerFrame) {
  // sent at 1.0 s; tokens at 1.1, 1.15, 1.3; done at 1.31
  const auto m = request_metrics(1.0, {{1.1, 1}, {1.15, 1}, {1.3, 1}}, 1.31);
  EXPECT_EQ(m.output_tokens, 3u);
  EXPECT_NEAR(m.ttft_ms, 100.0, 1e-9);
  EXPECT_NEAR(m.e2e_ms, 310.0, 1e-9);
  ASSERT_EQ(m.itl_ms.size(), 2u);
  EXPECT_NEAR(m.itl_ms[0], 50.0, 1e-9);
  EXPECT_NEAR(m.itl_ms[1], 150.0, 1e-9);
  ASSERT_TRUE(m.tpot_ms.has_value());
  EXPECT_NEAR(*m.tpot_ms, (310.0 - 100.0) / 2.0, 1e-9);
}

TEST(WsbenchStats, CoalescedFramesSplitTheGapEvenly) {
  // first frame carries 2 tokens at 0.2 s; then 3 tokens 0.09 s later; then 1 token 0.01 s later
  const auto m = request_metrics(0.0, {{0.2, 2}, {0.29, 3}, {0.30, 1}}, 0.5);
  EXPECT_EQ(m.output_tokens, 6u);
  EXPECT_NEAR(m.ttft_ms, 200.0, 1e-9);
  const std::vector<double> want = {0.0, 30.0, 30.0, 30.0, 10.0};
  ASSERT_EQ(m.itl_ms.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(m.itl_ms[i], want[i], 1e-9) << i;
  EXPECT_NEAR(*m.tpot_ms, (500.0 - 200.0) / 5.0, 1e-9);
}

TEST(WsbenchStats, ItlCountAndSumOnRandomTimelines) {
  // n - 1 values per request that add up to the span from the first to the last token frame.
  std::mt19937_64 rng(99);
  std::uniform_int_distribution<int> frames(1, 40), tokens(0, 5);
  std::exponential_distribution<double> gap(50.0);
  for (int trial = 0; trial < 100; ++trial) {
    std::vector<FrameArrival> f;
    double t = 0.5 + gap(rng);
    const int n = frames(rng);
    std::size_t total = 0;
    double first = -1, last = -1;
    for (int i = 0; i < n; ++i) {
      const std::size_t k = static_cast<std::size_t>(tokens(rng));  // 0: skipped by the rule
      f.push_back({t, k});
      if (k) {
        total += k;
        if (first < 0) first = t;
        last = t;
      }
      t += gap(rng);
    }
    const auto m = request_metrics(0.5, f, t);
    EXPECT_EQ(m.output_tokens, total);
    if (total == 0) {
      EXPECT_TRUE(m.itl_ms.empty());
      EXPECT_TRUE(std::isnan(m.ttft_ms));
      EXPECT_FALSE(m.tpot_ms.has_value());
      continue;
    }
    ASSERT_EQ(m.itl_ms.size(), total - 1);
    double sum = 0;
    for (double x : m.itl_ms) sum += x;
    EXPECT_NEAR(sum, (last - first) * 1e3, 1e-6);
    EXPECT_NEAR(m.ttft_ms, (first - 0.5) * 1e3, 1e-9);
    EXPECT_EQ(m.tpot_ms.has_value(), total > 1);
  }
}

TEST(WsbenchStats, SingleTokenHasNoTpotOrItl) {
  const auto m = request_metrics(0.0, {{0.1, 1}}, 0.2);
  EXPECT_EQ(m.output_tokens, 1u);
  EXPECT_TRUE(m.itl_ms.empty());
  EXPECT_FALSE(m.tpot_ms.has_value());
  EXPECT_NEAR(m.e2e_ms, 200.0, 1e-9);
}

}  // namespace
}  // namespace rz::wsbench
