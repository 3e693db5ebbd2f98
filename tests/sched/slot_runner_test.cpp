// Tests of SlotRunner (sched/slot_runner.hpp), the scheduler-less driver of tools and tests,
// against the paged fake executor: whole prompts and decodes in one step each, block tables kept
// per slot (checked row by row by the fake), blocks returned on release, "no free KV block"
// before any work, and a failed step undone.
#include "sched/slot_runner.hpp"

#include <gtest/gtest.h>

#include <vector>

#include "formats/common.hpp"
#include "tests/sched/fake_executor.hpp"

using rz::DecodeRequest;
using rz::Error;
using rz::PrefillRequest;
using rz::SlotRunner;
using rz_test::FakeExecutor;

namespace {

constexpr int kVocab = 61;

PrefillRequest pre(int slot, std::vector<int32_t> toks, uint64_t seed) {
  PrefillRequest r;
  r.slot = slot;
  r.tokens = std::move(toks);
  r.sampling.seed = seed;
  return r;
}

}  // namespace

TEST(SlotRunner, RunsPromptsAndDecodesOnTheirOwnBlocks) {
  FakeExecutor ex(2, 32, kVocab, 4, 8);
  SlotRunner run(ex);
  const std::vector<int32_t> a = {1, 2, 3, 4, 5}, b = {9, 8};
  const std::vector<PrefillRequest> both = {pre(0, a, 3), pre(1, b, 4)};
  auto t = run.prefill(both);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0], FakeExecutor::next_token(3, a, kVocab));
  EXPECT_EQ(t[1], FakeExecutor::next_token(4, b, kVocab));
  EXPECT_EQ(run.table(0).size(), 2u);
  EXPECT_EQ(run.table(1).size(), 1u);
  EXPECT_EQ(run.blocks().free_blocks(), 5);
  std::vector<int32_t> ha = a, hb = b;
  for (int i = 0; i < 6; ++i) {
    ha.push_back(t[0]);
    hb.push_back(t[1]);
    const std::vector<DecodeRequest> d = {{0, t[0]}, {1, t[1]}};
    t = run.decode(d);
    EXPECT_EQ(t[0], FakeExecutor::next_token(3, ha, kVocab));
    EXPECT_EQ(t[1], FakeExecutor::next_token(4, hb, kVocab));
  }
  EXPECT_EQ(run.table(0).size(), 3u);  // 11 tokens
  EXPECT_EQ(run.decode(0, t[0]), FakeExecutor::next_token(
                                     3,
                                     [&] {
                                       ha.push_back(t[0]);
                                       return ha;
                                     }(),
                                     kVocab));
  run.release(0);
  EXPECT_FALSE(ex.slot_active(0));
  EXPECT_TRUE(run.table(0).empty());
  EXPECT_EQ(run.blocks().free_blocks(), 8 - 2);  // slot 1: 8 tokens, 2 blocks
  EXPECT_EQ(run.prefill(pre(0, b, 4)), FakeExecutor::next_token(4, b, kVocab));
  EXPECT_TRUE(ex.kv_clean()) << ex.kv_report();
}

TEST(SlotRunner, RefusesBeforeAnyWorkWhenBlocksRunOut) {
  FakeExecutor ex(3, 32, kVocab, 4, 3);
  SlotRunner run(ex);
  EXPECT_NO_THROW(run.prefill(pre(0, {1, 2, 3, 4, 5}, 1)));  // 2 blocks
  const std::vector<PrefillRequest> two = {pre(1, {1}, 1), pre(2, {2}, 1)};
  EXPECT_THROW(run.prefill(two), Error);
  EXPECT_FALSE(ex.slot_active(1));
  EXPECT_FALSE(ex.slot_active(2));
  EXPECT_TRUE(run.table(1).empty());
  EXPECT_EQ(run.blocks().free_blocks(), 1) << "the runner's tables are unchanged";
  EXPECT_EQ(ex.calls.size(), 1u) << "the executor never saw the refused step";
  EXPECT_NO_THROW(run.prefill(pre(1, {1}, 1)));
  EXPECT_TRUE(ex.kv_clean()) << ex.kv_report();
}

TEST(SlotRunner, AFailedStepIsUndone) {
  FakeExecutor ex(2, 32, kVocab, 4, 4);
  SlotRunner run(ex);
  const int32_t t = run.prefill(pre(0, {1, 2, 3, 4}, 1));
  ex.fail_on_steps({1});
  EXPECT_THROW(run.decode(0, t), Error);  // needs a second block
  EXPECT_EQ(run.table(0).size(), 1u);
  EXPECT_EQ(run.blocks().free_blocks(), 3);
  EXPECT_THROW(run.prefill(pre(5, {1}, 1)), Error) << "a bad slot: the executor says why";
  EXPECT_EQ(run.blocks().free_blocks(), 3);
  EXPECT_EQ(run.decode(0, t),
            FakeExecutor::next_token(1, std::vector<int32_t>{1, 2, 3, 4, t}, kVocab));
  EXPECT_TRUE(ex.kv_clean()) << ex.kv_report();
}
