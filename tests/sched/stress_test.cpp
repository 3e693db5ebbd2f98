// Randomized stress of BatchedDecodeState (tests/sched/stress_harness.hpp): random configs
// (slots, context, queue bound, token budget, KV cache, prefix cache), submits, cancels (between
// steps, while a step is in flight, and from the event sink) and injected step failures, with
// every plan checked against the policy and every state against the invariants; and batch
// invariance: a request's tokens are the same whatever runs beside it, however its prompt is
// chunked and whether its prefix was cached.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "sched/batch_state.hpp"
#include "sched/driver.hpp"
#include "tests/sched/event_log.hpp"
#include "tests/sched/fake_executor.hpp"
#include "tests/sched/stress_harness.hpp"

using namespace rz;
using rz_test::EventLog;
using rz_test::FakeExecutor;

TEST(SchedStress, RandomSubmitsCancelsAndFailuresKeepEveryInvariant) {
  auto all = rz_test::run_stress(60, 1500, /*kv_tight=*/false);
  if (::testing::Test::HasFailure()) return;
  for (const char* path :
       {"submit accepted", "submit overloaded", "submit context_length_exceeded",
        "cancel in flight", "cancel between steps", "joins > 1", "release+join", "chunk continued",
        "chunk without sample", "prefix hit", "failed", "abort_all", "stop", "length", "cancelled",
        "context full", "idle step over the budget"}) {
    EXPECT_GT(all[path], 10) << path;
  }
}

// The same with a step planned ahead while each ordinary step runs (the batcher's protocol).
TEST(SchedStress, PlanningAheadKeepsEveryInvariant) {
  auto all = rz_test::run_stress(40, 1500, /*kv_tight=*/false, /*plan_ahead=*/true);
  if (::testing::Test::HasFailure()) return;
  for (const char* path : {"planned ahead", "cancel in flight", "failed", "stop", "length",
                           "cancelled", "prefix hit", "release+join"}) {
    EXPECT_GT(all[path], 10) << path;
  }
}

namespace {

// 16 requests, half of them starting with one shared 9-token prefix, a few identical prompts.
std::vector<BatchRequest> invariance_requests() {
  std::mt19937_64 rng(99);
  std::vector<int32_t> shared;
  for (int i = 0; i < 9; ++i) shared.push_back(static_cast<int32_t>(rng() % 1000));
  std::vector<BatchRequest> out;
  for (uint64_t id = 1; id <= 16; ++id) {
    BatchRequest r;
    r.ref = {id, id * 10};
    if (id % 2 == 0) r.prompt = shared;
    const int len = static_cast<int>(rng() % 12) + 1;
    for (int i = 0; i < len; ++i) r.prompt.push_back(static_cast<int32_t>(rng() % 1000));
    if (id % 7 == 0) r.prompt = out[id - 3].prompt;
    r.sampling.seed = rng();
    r.max_tokens = id % 5 == 0 ? 0 : static_cast<int>(rng() % 20) + 1;
    r.ignore_eos = id % 3 == 0;
    out.push_back(r);
  }
  return out;
}

BatchConfig invariance_config(int slots, int block_size) {
  BatchConfig c;
  c.max_slots = slots;
  c.max_context = 40;
  c.max_queue = 64;
  c.n_vocab = 1000;
  c.kv_block_size = block_size;
  c.is_eog = [](int32_t t) { return t % 31 == 0; };
  return c;
}

}  // namespace

TEST(SchedBatchInvariance, TokensDoNotDependOnWhatRunsBeside) {
  const auto reqs = invariance_requests();
  // Alone: one request at a time through a one-slot state, without the prefix cache.
  std::map<uint64_t, std::pair<std::vector<int32_t>, FinishReason>> solo;
  for (const auto& r : reqs) {
    BatchConfig c = invariance_config(1, 16);
    c.prefix_cache = false;
    BatchedDecodeState s(c);
    FakeExecutor ex(1, 40, 1000);
    EventLog log;
    ASSERT_TRUE(s.submit(r).ok());
    run_until_idle(s, ex, log.sink());
    ASSERT_TRUE(log.at(r.ref.id).finished);
    solo[r.ref.id] = {log.at(r.ref.id).tokens, log.at(r.ref.id).reason};
  }
  struct Shape {
    int slots, budget, block_size, stagger;
    bool prefix;
  };
  for (const Shape sh :
       {Shape{4, 512, 16, 0, true}, Shape{8, 8, 4, 0, true}, Shape{3, 5, 2, 0, false},
        Shape{5, 5, 3, 3, true}, Shape{16, 16, 1, 1, true}, Shape{2, 2, 4, 1, true}}) {
    SCOPED_TRACE("slots " + std::to_string(sh.slots) + " budget " + std::to_string(sh.budget) +
                 " block " + std::to_string(sh.block_size));
    BatchConfig c = invariance_config(sh.slots, sh.block_size);
    c.max_step_tokens = sh.budget;
    c.prefix_cache = sh.prefix;
    BatchedDecodeState s(c);
    FakeExecutor ex(sh.slots, 40, 1000, sh.block_size);
    EventLog log;
    auto sink = log.sink();
    // Submit all at once, or one request every `stagger` steps so they join mid-flight.
    size_t next = 0;
    while (next < reqs.size() || s.has_work()) {
      const size_t burst = sh.stagger == 0 ? reqs.size() : 1;
      for (size_t k = 0; k < burst && next < reqs.size(); ++k)
        ASSERT_TRUE(s.submit(reqs[next++]).ok());
      for (int i = 0; i < std::max(sh.stagger, 1); ++i) run_step(s, ex, sink);
    }
    ASSERT_TRUE(log.violations.empty()) << log.violations.front();
    for (const auto& r : reqs) {
      const auto& l = log.at(r.ref.id);
      EXPECT_EQ(l.tokens, solo[r.ref.id].first) << "request " << r.ref.id;
      EXPECT_EQ(l.reason, solo[r.ref.id].second) << "request " << r.ref.id;
    }
    if (sh.prefix) {
      EXPECT_GT(s.counters().prefix_hit_tokens, 0u);
    }
    EXPECT_EQ(ex.kv_mismatches, 0) << ex.kv_report();
    EXPECT_EQ(ex.shared_writes, 0) << ex.kv_report();
    EXPECT_EQ(ex.feed_mismatches, 0);
  }
}
