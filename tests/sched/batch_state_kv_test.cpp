// Tests of BatchedDecodeState's KV-block accounting (sched/batch_state.hpp, the KV rule of its
// policy) against a paged fake executor that throws when more blocks are reserved than exist:
// the head waits for blocks in FIFO order, requests bigger than the whole cache are refused at
// submit, cancellation / failure / abort_all return blocks, the reserve_tokens the executor sees,
// config validation and check_fits.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "formats/common.hpp"
#include "sched/batch_state.hpp"
#include "sched/driver.hpp"
#include "sched/step.hpp"
#include "tests/sched/event_log.hpp"
#include "tests/sched/paged_executor.hpp"

using namespace rz;
using rz_test::EventLog;
using rz_test::PagedFakeExecutor;
using rz_test::reference_tokens;

namespace {

constexpr int kVocab = 1000;

BatchConfig kv_config(int slots, int context, int block_size, int64_t blocks) {
  BatchConfig c;
  c.max_slots = slots;
  c.max_context = context;
  c.max_queue = 16;
  c.max_prefill_batch = 8;
  c.max_prefill_tokens = 1024;
  c.n_vocab = kVocab;
  c.kv_block_size = block_size;
  c.kv_blocks = blocks;
  return c;
}

BatchRequest req(uint64_t id, int prompt_len, int max_tokens) {
  BatchRequest r;
  r.ref = {id, 100 + id};
  for (int i = 0; i < prompt_len; ++i)
    r.prompt.push_back(static_cast<int32_t>((id * 31 + 7 * i) % kVocab));
  r.max_tokens = max_tokens;
  r.sampling.seed = id;
  return r;
}

// The reserve the policy states, written out independently of BatchConfig's helpers.
int expected_reserve(int prompt, int max_tokens, int context) {
  return std::min(prompt + (max_tokens > 0 ? max_tokens : context - prompt), context);
}
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// One step the way run_step does it, keeping the plan for inspection and the admission order.
StepPlan step(BatchedDecodeState& s, PagedFakeExecutor& ex, EventLog& log,
              std::vector<uint64_t>* admitted = nullptr) {
  StepPlan p = s.plan();
  for (const auto& e : p.events) log(e);
  const StepResult r = execute_step(ex, p);
  if (p.idle()) return p;
  if (admitted && p.kind == StepKind::prefill)
    for (const auto& req : p.requests) admitted->push_back(req.id);
  for (const auto& e : apply_step_result(s, p, r)) log(e);
  return p;
}

}  // namespace

TEST(BatchKv, ConfigValidation) {
  BatchConfig c = kv_config(2, 32, 4, 8);
  EXPECT_NO_THROW(c.validate());
  c.kv_block_size = -1;
  EXPECT_THROW(c.validate(), Error);
  c = kv_config(2, 32, 4, -1);
  EXPECT_THROW(c.validate(), Error);
  c = kv_config(2, 32, 0, 8);  // blocks without a size
  EXPECT_THROW(c.validate(), Error);
  EXPECT_THROW(BatchedDecodeState{c}, Error);
  c = kv_config(2, 32, 4, 0);  // a size without a limit: unlimited
  EXPECT_NO_THROW(c.validate());
}

TEST(BatchKv, CheckFitsComparesTheExecutorsBlocks) {
  PagedFakeExecutor ex(4, 64, kVocab, 4, 10);
  EXPECT_NO_THROW(check_fits(kv_config(4, 64, 4, 10), ex));
  EXPECT_NO_THROW(check_fits(kv_config(4, 64, 4, 6), ex));  // fewer blocks than it has: fine
  EXPECT_NO_THROW(check_fits(kv_config(4, 64, 0, 0), ex));  // no accounting
  EXPECT_THROW(check_fits(kv_config(4, 64, 4, 11), ex), Error);
  EXPECT_THROW(check_fits(kv_config(4, 64, 8, 5), ex), Error);
  // An executor without a paged cache: one full-context block per slot.
  rz_test::FakeExecutor plain(3, 64, kVocab);
  EXPECT_NO_THROW(check_fits(kv_config(3, 64, 64, 3), plain));
  EXPECT_THROW(check_fits(kv_config(3, 64, 64, 4), plain), Error);
}

TEST(BatchKv, SubmitRefusesARequestBiggerThanTheWholeCache) {
  BatchedDecodeState s(kv_config(4, 64, 4, 5));       // 20 tokens of cache
  EXPECT_TRUE(s.submit(req(1, 10, 10)).ok());         // exactly 5 blocks
  const SubmitResult big = s.submit(req(2, 10, 11));  // 21 tokens: 6 blocks
  EXPECT_EQ(big.status, SubmitStatus::context_length_exceeded);
  EXPECT_EQ(big.message.find('\n'), std::string::npos) << big.message;
  EXPECT_NE(big.message.find("KV cache"), std::string::npos) << big.message;
  EXPECT_NE(big.message.find("6 blocks"), std::string::npos) << big.message;
  // max_tokens 0 generates up to the context: 64 tokens, 16 blocks.
  const SubmitResult open = s.submit(req(3, 3, 0));
  EXPECT_EQ(open.status, SubmitStatus::context_length_exceeded);
  EXPECT_NE(open.message.find("context"), std::string::npos) << open.message;
  EXPECT_EQ(s.where(2), BatchedDecodeState::Where::unknown);
  EXPECT_EQ(s.where(3), BatchedDecodeState::Where::unknown);
  EXPECT_EQ(s.counters().rejected_invalid, 2u);
  EXPECT_EQ(s.counters().submitted, 1u);
  EXPECT_EQ(s.queue_depth(), 1);

  // Without accounting (kv_blocks 0) the same requests are accepted, as before.
  BatchedDecodeState u(kv_config(4, 64, 4, 0));
  EXPECT_TRUE(u.submit(req(2, 10, 11)).ok());
  EXPECT_TRUE(u.submit(req(3, 3, 0)).ok());
}

TEST(BatchKv, HeadWaitsForBlocksInFifoOrderAndAllComplete) {
  // 4 slots, blocks of 4 tokens, 8 blocks. Reserves: A 5+6=11 (3 blocks), B 5+10=15 (4),
  // C 9+7=16 (4), D 1+3=4 (1). A and B take 7 blocks; C waits with 2 slots and 1 block free, and
  // D, which would fit in that block, must not overtake it.
  const BatchConfig cfg = kv_config(4, 64, 4, 8);
  BatchedDecodeState s(cfg);
  PagedFakeExecutor ex(4, 64, kVocab, 4, 8);
  check_fits(cfg, ex);
  EventLog log;
  std::vector<uint64_t> admitted;
  const std::vector<BatchRequest> reqs = {req(1, 5, 6), req(2, 5, 10), req(3, 9, 7), req(4, 1, 3)};
  for (const auto& r : reqs) ASSERT_TRUE(s.submit(r).ok());

  StepPlan p = step(s, ex, log, &admitted);
  ASSERT_EQ(p.kind, StepKind::prefill);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(s.kv_blocks_used(), 7);
  EXPECT_EQ(s.free_slots(), 2);
  EXPECT_EQ(s.where(3), BatchedDecodeState::Where::queued);
  EXPECT_EQ(s.where(4), BatchedDecodeState::Where::queued);

  bool c_admitted_while_a_ran = false, d_ran_while_c_waited = false;
  for (int guard = 0; s.has_work() && guard < 1000; ++guard) {
    p = step(s, ex, log, &admitted);
    if (s.where(3) == BatchedDecodeState::Where::running && !log.done(1))
      c_admitted_while_a_ran = true;
    if (s.where(3) == BatchedDecodeState::Where::queued &&
        s.where(4) != BatchedDecodeState::Where::queued)
      d_ran_while_c_waited = true;
    ASSERT_LE(s.kv_blocks_used(), cfg.kv_blocks);
    ASSERT_LE(ex.used(), cfg.kv_blocks);
  }
  EXPECT_FALSE(c_admitted_while_a_ran);
  EXPECT_FALSE(d_ran_while_c_waited);
  EXPECT_EQ(admitted, (std::vector<uint64_t>{1, 2, 3, 4}));
  ASSERT_TRUE(log.violations.empty()) << log.violations.front();
  for (const auto& r : reqs) {
    SCOPED_TRACE("request " + std::to_string(r.ref.id));
    const auto& l = log.at(r.ref.id);
    EXPECT_TRUE(l.finished);
    EXPECT_FALSE(l.failed);
    EXPECT_EQ(l.reason, FinishReason::length);
    EXPECT_EQ(l.tokens, reference_tokens(r.prompt, r.sampling.seed, r.max_tokens, kVocab));
  }
  EXPECT_EQ(s.kv_blocks_used(), 0);
  EXPECT_EQ(ex.used(), 0);
  EXPECT_EQ(ex.grows, 0);
  EXPECT_EQ(ex.max_used, 8);  // C (4) ran beside B (4): the whole cache was used
}

TEST(BatchKv, ReserveTokensAreWhatTheExecutorSees) {
  const int ctx = 32;
  const BatchConfig cfg = kv_config(3, ctx, 5, 3 * ceil_div(ctx, 5));
  BatchedDecodeState s(cfg);
  PagedFakeExecutor ex(3, ctx, kVocab, 5, cfg.kv_blocks);
  EventLog log;
  // (prompt, max_tokens): plain, max_tokens 0 (up to the context), capped by the context, tiny.
  const std::vector<std::pair<int, int>> shapes = {{4, 6},  {10, 0}, {20, 100}, {1, 1},
                                                   {31, 0}, {7, 25}, {12, 3},   {30, 2}};
  std::vector<BatchRequest> reqs;
  for (size_t i = 0; i < shapes.size(); ++i) {
    reqs.push_back(req(i + 1, shapes[i].first, shapes[i].second));
    reqs.back().ignore_eos = true;
    ASSERT_TRUE(s.submit(reqs.back()).ok()) << i;
  }
  std::vector<uint64_t> admitted;
  for (int guard = 0; s.has_work() && guard < 1000; ++guard) step(s, ex, log, &admitted);
  ASSERT_EQ(ex.reserves.size(), reqs.size());
  ASSERT_EQ(admitted.size(), reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    const auto& r = reqs[admitted[i] - 1];
    const int p = static_cast<int>(r.prompt.size());
    EXPECT_EQ(ex.reserves[i].prompt, p) << i;
    EXPECT_EQ(ex.reserves[i].reserve_tokens, expected_reserve(p, r.max_tokens, ctx)) << i;
    EXPECT_FALSE(log.at(r.ref.id).failed) << log.at(r.ref.id).failed_event.message;
  }
  EXPECT_EQ(ex.grows, 0) << "a request outgrew its reservation";
  EXPECT_EQ(ex.used(), 0);
}

TEST(BatchKv, PagedFakeThrowsWhenMoreBlocksAreReservedThanExist) {
  // The guard the tests above rely on: the fake refuses an over-reservation before any work.
  PagedFakeExecutor ex(2, 64, kVocab, 4, 5);
  std::vector<PrefillRequest> two(2);
  two[0].slot = 0;
  two[0].tokens = {1, 2, 3};
  two[0].reserve_tokens = 12;  // 3 blocks
  two[1].slot = 1;
  two[1].tokens = {4};
  two[1].reserve_tokens = 9;  // 3 blocks
  EXPECT_THROW(ex.prefill(two), Error);
  EXPECT_TRUE(ex.active_slots().empty());
  EXPECT_EQ(ex.used(), 0);
  two.pop_back();
  ASSERT_EQ(ex.prefill(two).size(), 1u);
  EXPECT_EQ(ex.used(), 3);
}

TEST(BatchKv, CancellingARunningRequestReturnsItsBlocks) {
  // One request's worth of blocks: B waits until A's blocks come back.
  const BatchConfig cfg = kv_config(2, 64, 4, 4);
  BatchedDecodeState s(cfg);
  PagedFakeExecutor ex(2, 64, kVocab, 4, 4);
  EventLog log;
  ASSERT_TRUE(s.submit(req(1, 6, 10)).ok());  // 16 tokens: 4 blocks
  ASSERT_TRUE(s.submit(req(2, 2, 14)).ok());  // 16 tokens: 4 blocks
  ASSERT_TRUE(s.submit(req(3, 2, 2)).ok());   // 4 tokens: 1 block
  StepPlan p = step(s, ex, log);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(s.kv_blocks_used(), 4);
  p = step(s, ex, log);
  ASSERT_EQ(p.kind, StepKind::decode);  // B waits with a slot free
  EXPECT_EQ(s.where(2), BatchedDecodeState::Where::queued);

  // Cancel between steps: the next boundary frees A's slot and blocks and admits B at once.
  ASSERT_TRUE(s.cancel(1));
  p = step(s, ex, log);
  ASSERT_TRUE(log.at(1).finished);
  EXPECT_EQ(log.at(1).reason, FinishReason::cancelled);
  ASSERT_EQ(p.kind, StepKind::prefill);
  ASSERT_EQ(p.requests.size(), 1u);
  EXPECT_EQ(p.requests[0].id, 2u);
  EXPECT_EQ(s.kv_blocks_used(), 4);

  // Cancel while B's step is in flight: its blocks come back when the step is applied.
  StepPlan q = s.plan();
  ASSERT_EQ(q.kind, StepKind::decode);
  ASSERT_TRUE(s.cancel(2));
  EXPECT_EQ(s.kv_blocks_used(), 4);  // still running until the boundary
  for (int slot : q.release) ex.release(slot);
  for (const auto& e : s.apply(q, ex.decode(q.decode))) log(e);
  EXPECT_EQ(log.at(2).reason, FinishReason::cancelled);
  EXPECT_EQ(s.kv_blocks_used(), 0);
  for (int guard = 0; s.has_work() && guard < 100; ++guard) step(s, ex, log);
  EXPECT_TRUE(log.at(3).finished);
  EXPECT_EQ(log.at(3).reason, FinishReason::length);
  EXPECT_EQ(s.kv_blocks_used(), 0);
  EXPECT_EQ(ex.used(), 0);
}

TEST(BatchKv, AFailedStepReturnsItsBlocks) {
  const BatchConfig cfg = kv_config(3, 64, 4, 6);
  BatchedDecodeState s(cfg);
  PagedFakeExecutor ex(3, 64, kVocab, 4, 6);
  EventLog log;
  ASSERT_TRUE(s.submit(req(1, 4, 8)).ok());  // 12 tokens: 3 blocks
  ASSERT_TRUE(s.submit(req(2, 4, 8)).ok());  // 3 blocks
  ASSERT_TRUE(s.submit(req(3, 4, 8)).ok());  // 3 blocks: waits
  ex.fail_on_steps({1});                     // the first decode step throws
  ex.fail_after_work = true;
  StepPlan p = step(s, ex, log);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(s.kv_blocks_used(), 6);
  p = step(s, ex, log);
  ASSERT_EQ(p.kind, StepKind::decode);
  EXPECT_TRUE(log.at(1).failed);
  EXPECT_TRUE(log.at(2).failed);
  EXPECT_EQ(s.kv_blocks_used(), 0);
  // The next boundary releases both slots (the executor gets its blocks back) and admits C.
  p = step(s, ex, log);
  ASSERT_EQ(p.kind, StepKind::prefill);
  EXPECT_EQ(p.release.size(), 2u);
  EXPECT_EQ(p.requests.at(0).id, 3u);
  for (int guard = 0; s.has_work() && guard < 100; ++guard) step(s, ex, log);
  EXPECT_TRUE(log.at(3).finished);
  EXPECT_EQ(ex.used(), 0);
  EXPECT_EQ(s.kv_blocks_used(), 0);
}

TEST(BatchKv, AFailedPrefillReturnsItsBlocks) {
  const BatchConfig cfg = kv_config(2, 64, 4, 4);
  BatchedDecodeState s(cfg);
  PagedFakeExecutor ex(2, 64, kVocab, 4, 4);
  EventLog log;
  ASSERT_TRUE(s.submit(req(1, 4, 12)).ok());  // 16 tokens: 4 blocks
  ASSERT_TRUE(s.submit(req(2, 4, 12)).ok());
  ex.fail_on_steps({0});  // before the work: the executor takes nothing
  StepPlan p = step(s, ex, log);
  ASSERT_EQ(p.kind, StepKind::prefill);
  EXPECT_TRUE(log.at(1).failed);
  EXPECT_EQ(s.kv_blocks_used(), 0);
  p = step(s, ex, log);
  ASSERT_EQ(p.kind, StepKind::prefill);
  EXPECT_EQ(p.requests.at(0).id, 2u);
  for (int guard = 0; s.has_work() && guard < 100; ++guard) step(s, ex, log);
  EXPECT_TRUE(log.at(2).finished);
  EXPECT_EQ(ex.used(), 0);
}

TEST(BatchKv, AbortAllReturnsEveryBlock) {
  BatchedDecodeState s(kv_config(3, 64, 4, 9));
  PagedFakeExecutor ex(3, 64, kVocab, 4, 9);
  EventLog log;
  for (uint64_t id = 1; id <= 4; ++id) ASSERT_TRUE(s.submit(req(id, 3, 9)).ok());  // 3 blocks each
  step(s, ex, log);
  EXPECT_EQ(s.kv_blocks_used(), 9);
  StepPlan q = s.plan();  // a step in flight, then the executor is lost
  ASSERT_FALSE(q.idle());
  for (const auto& e : s.abort_all("gone")) log(e);
  EXPECT_EQ(s.kv_blocks_used(), 0);
  for (uint64_t id = 1; id <= 4; ++id) EXPECT_TRUE(log.at(id).failed) << id;
  StepPlan r = s.plan();
  EXPECT_TRUE(r.idle());
  for (int slot : r.release) ex.release(slot);
  EXPECT_EQ(ex.used(), 0);
}

TEST(BatchKv, WithoutAccountingOnlySlotsLimitAdmission) {
  BatchedDecodeState s(kv_config(3, 64, 0, 0));
  PagedFakeExecutor ex(3, 64, kVocab, 4, 1000);
  EventLog log;
  for (uint64_t id = 1; id <= 3; ++id) ASSERT_TRUE(s.submit(req(id, 5, 0)).ok());
  StepPlan p = step(s, ex, log);
  EXPECT_EQ(p.size(), 3u);
  EXPECT_EQ(s.kv_blocks_used(), 0);
  for (const auto& r : p.prefill) EXPECT_EQ(r.reserve_tokens, 64);  // still told to the executor
}
