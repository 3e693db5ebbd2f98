// The metrics registry (actors/metrics.hpp): histogram buckets follow Prometheus' "le" rule
// (a value equal to a bound counts in that bound's bucket), NaN goes to +Inf without touching the
// sum, and the snapshot reflects every update.
#include "actors/metrics.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

using namespace rz::engine;

TEST(Histogram, BucketsByUpperBound) {
  Histogram h = make_histogram({1.0, 2.0, 5.0});
  ASSERT_EQ(h.counts.size(), 4u);
  observe(h, 0.5);
  observe(h, 1.0);
  observe(h, 1.5);
  observe(h, 5.0);
  observe(h, 7.0);
  observe(h, std::numeric_limits<double>::quiet_NaN());
  EXPECT_EQ(h.counts[0], 2u);
  EXPECT_EQ(h.counts[1], 1u);
  EXPECT_EQ(h.counts[2], 1u);
  EXPECT_EQ(h.counts[3], 2u);
  EXPECT_EQ(h.count, 6u);
  EXPECT_DOUBLE_EQ(h.sum, 0.5 + 1.0 + 1.5 + 5.0 + 7.0);
}

TEST(Histogram, DefaultBoundsAscend) {
  for (const auto& b : {step_seconds_bounds(), ttft_seconds_bounds()}) {
    ASSERT_FALSE(b.empty());
    for (size_t i = 1; i < b.size(); ++i) EXPECT_LT(b[i - 1], b[i]);
  }
}

TEST(MetricsRegistry, SnapshotReflectsUpdates) {
  MetricsRegistry m(4, 100, 16);
  m.session_opened();
  m.session_opened();
  m.session_closed();
  m.request_started(10);
  m.request_started(5);
  m.request_done(rz::proto::FinishReason::length);
  m.request_done(rz::proto::FinishReason::cancelled);
  m.request_failed();
  m.request_rejected();
  m.tokens_generated(3);
  m.first_token(0.02);
  m.step(0.003);
  m.step(0.004);
  m.scheduler(2, 3, 42);
  const EngineMetrics s = m.snapshot();
  EXPECT_EQ(s.sessions, 1);
  EXPECT_EQ(s.requests_started, 2u);
  EXPECT_EQ(s.prompt_tokens, 15u);
  EXPECT_EQ(s.requests_finished, 1u);
  EXPECT_EQ(s.requests_cancelled, 1u);
  EXPECT_EQ(s.requests_failed, 1u);
  EXPECT_EQ(s.requests_rejected, 1u);
  EXPECT_EQ(s.generated_tokens, 3u);
  EXPECT_EQ(s.ttft_seconds.count, 1u);
  EXPECT_EQ(s.step_seconds.count, 2u);
  EXPECT_NEAR(s.step_seconds.sum, 0.007, 1e-12);
  EXPECT_EQ(s.queue_depth, 2);
  EXPECT_EQ(s.active_slots, 3);
  EXPECT_EQ(s.max_slots, 4);
  EXPECT_EQ(s.kv_blocks_used, 42);
  EXPECT_EQ(s.kv_blocks_total, 100);
  EXPECT_EQ(s.kv_block_size, 16);
  EXPECT_TRUE(s.executor_counters.empty());
  m.executor_counters({{"rz_a_total", "A.", 1}, {"rz_b_total", "B.", 2}});
  m.executor_counters({{"rz_a_total", "A.", 5}, {"rz_b_total", "B.", 7}});  // the latest counts
  const EngineMetrics t = m.snapshot();
  ASSERT_EQ(t.executor_counters.size(), 2u);
  EXPECT_STREQ(t.executor_counters[1].name, "rz_b_total");
  EXPECT_EQ(t.executor_counters[0].value, 5u);
  EXPECT_EQ(t.executor_counters[1].value, 7u);
}
