// Randomized stress of BatchedDecodeState's KV cache (tests/sched/stress_harness.hpp) with small
// caches: from a third of one full-context request up to a full context per slot, long
// generations, prompts that share prefixes, repeats and follow-up turns, cancels, injected
// failures and rare abort_all. After every step the block manager agrees with the slots' tables,
// reservations fit in the free blocks and the fake executor read every row back as written; a
// queued head with a free slot and budget left waits only for its reservation; at the end every
// request has ended with its reference tokens and no block is held.
#include <gtest/gtest.h>

#include "tests/sched/stress_harness.hpp"

TEST(SchedKvStress, BlocksNeverExceedTheCacheAndAllComeBack) {
  auto all = rz_test::run_stress(60, 1200, /*kv_tight=*/true);
  if (::testing::Test::HasFailure()) return;
  for (const char* path :
       {"refused kv", "head waited for blocks", "cancel in flight", "cancel between steps",
        "prefix hit", "follow-up", "evictions", "chunk continued", "failed", "abort_all", "stop",
        "length", "cancelled"}) {
    EXPECT_GT(all[path], 5) << path;
  }
  EXPECT_EQ(all["max use %"], 100);  // some run reserved the cache completely
}
