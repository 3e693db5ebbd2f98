// Tests of BatchedDecodeState's KV-cache reservations (sched/batch_state.hpp, the KV rule of its
// policy) against the paged fake executor, which checks every block table: a request reserves
// at admission every block it may need and takes them as it grows, so a running request never
// runs out; the head waits (in FIFO order, nothing overtakes it) while its reservation does not
// fit; requests bigger than the whole cache are refused at submit; cancellation, failure and
// abort_all return the blocks; config validation and check_fits.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "formats/common.hpp"
#include "sched/batch_state.hpp"
#include "sched/driver.hpp"
#include "sched/step.hpp"
#include "tests/sched/event_log.hpp"
#include "tests/sched/fake_executor.hpp"

using namespace rz;
using rz_test::EventLog;
using rz_test::expect_clean;
using rz_test::FakeExecutor;
using rz_test::reference_tokens;

namespace {

constexpr int kVocab = 1000;

BatchConfig kv_config(int slots, int context, int block_size, int64_t blocks) {
  BatchConfig c;
  c.max_slots = slots;
  c.max_context = context;
  c.max_queue = 16;
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

// Blocks reserved by the running requests (taken or not).
int64_t reserved(const BatchedDecodeState& s) {
  int64_t n = 0;
  for (int i = 0; i < s.config().max_slots; ++i) n += s.slot(i).reserved_blocks;
  return n;
}

// One step the way run_step does it, keeping the plan for inspection and the admission order.
StepPlan step(BatchedDecodeState& s, FakeExecutor& ex, EventLog& log,
              std::vector<uint64_t>* admitted = nullptr) {
  StepPlan p = s.plan();
  for (const auto& e : p.events) log(e);
  const StepResult r = execute_step(ex, p);
  if (p.idle()) return p;
  if (admitted)
    for (size_t i = 0; i < p.seqs.size(); ++i)
      if (p.seqs[i].begin) admitted->push_back(p.requests[i].id);
  for (const auto& e : apply_step_result(s, p, r)) log(e);
  return p;
}

}  // namespace

TEST(BatchKv, ConfigValidationAndHelpers) {
  BatchConfig c = kv_config(2, 32, 4, 8);
  EXPECT_NO_THROW(c.validate());
  EXPECT_EQ(c.kv_block_count(), 8);
  EXPECT_EQ(c.kv_blocks_for(0), 0);
  EXPECT_EQ(c.kv_blocks_for(4), 1);
  EXPECT_EQ(c.kv_blocks_for(5), 2);
  EXPECT_EQ(c.kv_reserve_tokens(5, 6), 11);
  EXPECT_EQ(c.kv_reserve_tokens(5, 0), 32) << "max_tokens 0: up to the context";
  EXPECT_EQ(c.kv_reserve_tokens(30, 10), 32) << "capped by the context";
  c.kv_block_size = -1;
  EXPECT_THROW(c.validate(), Error);
  c = kv_config(2, 32, 4, -1);
  EXPECT_THROW(c.validate(), Error);
  c = kv_config(2, 32, 0, 8);  // blocks without a size
  EXPECT_THROW(c.validate(), Error);
  EXPECT_THROW(BatchedDecodeState{c}, Error);
  c = kv_config(3, 30, 4, 0);  // a size without a count: a full context per slot
  EXPECT_NO_THROW(c.validate());
  EXPECT_EQ(c.kv_block_count(), 3 * 8);
  BatchedDecodeState s(c);
  EXPECT_EQ(s.kv().n_blocks(), 24);
  EXPECT_EQ(s.kv().block_size(), 4);
  EXPECT_EQ(s.kv().free_blocks(), 24);
  EXPECT_TRUE(s.kv().prefix_cache());
}

TEST(BatchKv, CheckFitsComparesTheExecutorsBlocks) {
  FakeExecutor ex(4, 64, kVocab, 4, 10);
  EXPECT_NO_THROW(check_fits(kv_config(4, 64, 4, 10), ex));
  EXPECT_NO_THROW(check_fits(kv_config(4, 64, 4, 6), ex));  // fewer blocks than it has: fine
  EXPECT_THROW(check_fits(kv_config(4, 64, 4, 11), ex), Error);
  EXPECT_THROW(check_fits(kv_config(4, 64, 8, 5), ex), Error) << "another block size";
  EXPECT_THROW(check_fits(kv_config(4, 64, 4, 0), ex), Error) << "the default needs 64 blocks";
  FakeExecutor full(4, 64, kVocab, 4);  // its default: a full context per slot
  EXPECT_NO_THROW(check_fits(kv_config(4, 64, 4, 0), full));
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

  // With the default count (a full context per slot) the same requests are accepted.
  BatchedDecodeState u(kv_config(4, 64, 4, 0));
  EXPECT_TRUE(u.submit(req(2, 10, 11)).ok());
  EXPECT_TRUE(u.submit(req(3, 3, 0)).ok());
}

TEST(BatchKv, HeadWaitsForItsReservationInFifoOrderAndAllComplete) {
  // 4 slots, blocks of 4 tokens, 8 blocks. Reserves: A 5+6=11 (3 blocks), B 5+10=15 (4),
  // C 9+7=16 (4), D 1+3=4 (1). A and B reserve 7 blocks though their prompts hold only 4; C
  // waits with 2 slots free, and D, whose block is free, must not overtake it. The same with
  // prompts in chunks.
  for (int budget : {512, 7, 4}) {
    SCOPED_TRACE("max_step_tokens " + std::to_string(budget));
    BatchConfig cfg = kv_config(4, 64, 4, 8);
    cfg.max_step_tokens = budget;
    BatchedDecodeState s(cfg);
    FakeExecutor ex(4, 64, kVocab, 4, 8);
    check_fits(cfg, ex);
    EventLog log;
    std::vector<uint64_t> admitted;
    const std::vector<BatchRequest> reqs = {req(1, 5, 6), req(2, 5, 10), req(3, 9, 7),
                                            req(4, 1, 3)};
    for (const auto& r : reqs) ASSERT_TRUE(s.submit(r).ok());

    StepPlan p = step(s, ex, log, &admitted);
    for (int g = 0; g < 20 && s.where(2) == BatchedDecodeState::Where::queued; ++g)
      p = step(s, ex, log, &admitted);
    ASSERT_EQ(s.where(2), BatchedDecodeState::Where::running);
    EXPECT_EQ(s.slot(0).reserved_blocks, 3);
    EXPECT_EQ(s.slot(1).reserved_blocks, 4);
    if (budget == 512) {
      EXPECT_EQ(p.size(), 2u);
      EXPECT_EQ(s.kv_blocks_used(), 4) << "blocks are taken as the sequences grow";
    }
    EXPECT_EQ(s.free_slots(), 2);
    EXPECT_EQ(s.where(3), BatchedDecodeState::Where::queued) << "it waits, it does not fail";
    EXPECT_EQ(s.where(4), BatchedDecodeState::Where::queued);

    bool c_admitted_while_a_ran = false, d_ran_while_c_waited = false;
    int64_t max_reserved = 0;
    for (int guard = 0; s.has_work() && guard < 1000; ++guard) {
      p = step(s, ex, log, &admitted);
      if (s.where(3) == BatchedDecodeState::Where::running && !log.done(1))
        c_admitted_while_a_ran = true;
      if (s.where(3) == BatchedDecodeState::Where::queued &&
          s.where(4) != BatchedDecodeState::Where::queued)
        d_ran_while_c_waited = true;
      max_reserved = std::max(max_reserved, reserved(s));
      ASSERT_LE(reserved(s), cfg.kv_blocks);
      ASSERT_LE(s.kv_blocks_used(), reserved(s));
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
    EXPECT_EQ(s.kv().free_blocks(), 8);
    EXPECT_EQ(max_reserved, 8);  // C (4) ran beside B (4): the whole cache was reserved
    expect_clean(log, ex);
  }
}

TEST(BatchKv, ARunningRequestNeverRunsOutOfBlocks) {
  // Shapes of every kind, a cache that holds exactly one full-context request (so requests
  // often wait for reservations), blocks of 5: every request takes at most its reservation, the
  // planner never fails for want of a block (it would throw), and all complete.
  const int ctx = 32;
  for (bool prefix : {true, false}) {
    SCOPED_TRACE(prefix ? "prefix cache" : "no prefix cache");
    BatchConfig cfg = kv_config(3, ctx, 5, ceil_div(ctx, 5));
    cfg.prefix_cache = prefix;
    BatchedDecodeState s(cfg);
    FakeExecutor ex(3, ctx, kVocab, 5, cfg.kv_blocks);
    EventLog log;
    // (prompt, max_tokens): plain, max_tokens 0 (up to the context), capped by the context, tiny.
    const std::vector<std::pair<int, int>> shapes = {{4, 6},  {10, 0}, {20, 100}, {1, 1},
                                                     {31, 0}, {7, 25}, {12, 3},   {30, 2}};
    std::map<uint64_t, BatchRequest> reqs;
    for (size_t i = 0; i < shapes.size(); ++i) {
      BatchRequest r = req(i + 1, shapes[i].first, shapes[i].second);
      r.ignore_eos = true;
      ASSERT_TRUE(s.submit(r).ok()) << i;
      reqs[r.ref.id] = r;
    }
    std::map<uint64_t, size_t> most;  // blocks each request held at most
    for (int guard = 0; s.has_work() && guard < 1000; ++guard) {
      ASSERT_NO_THROW(step(s, ex, log));
      for (int i = 0; i < cfg.max_slots; ++i) {
        const BatchSlot& sl = s.slot(i);
        if (!sl.busy()) continue;
        const BatchRequest& r = reqs.at(sl.request.id);
        const int p = static_cast<int>(r.prompt.size());
        ASSERT_EQ(sl.reserved_blocks, ceil_div(expected_reserve(p, r.max_tokens, ctx), 5));
        ASSERT_LE(static_cast<int64_t>(sl.blocks.size()), sl.reserved_blocks);
        ASSERT_EQ(static_cast<int64_t>(sl.blocks.size()), ceil_div(sl.computed, 5));
        most[sl.request.id] = std::max(most[sl.request.id], sl.blocks.size());
      }
      ASSERT_LE(reserved(s), cfg.kv_blocks);
    }
    for (const auto& [id, r] : reqs) {
      SCOPED_TRACE("request " + std::to_string(id));
      const auto& l = log.at(id);
      ASSERT_TRUE(l.finished) << l.failed_event.message;
      const int p = static_cast<int>(r.prompt.size());
      const int n = static_cast<int>(l.tokens.size());
      EXPECT_EQ(n, std::min(r.max_tokens > 0 ? r.max_tokens : ctx, ctx - p));
      EXPECT_EQ(l.tokens, reference_tokens(r.prompt, r.sampling.seed, n, kVocab));
      // The last token is never computed: the KV holds prompt + n - 1 tokens at the end. Seen
      // between steps, a request held the blocks of prompt + n - 2 (none for n = 1: it ended in
      // its first step).
      if (n > 1) {
        EXPECT_EQ(static_cast<int64_t>(most[id]), ceil_div(p + n - 2, 5));
      }
    }
    EXPECT_EQ(s.kv_blocks_used(), 0);
    EXPECT_EQ(s.kv().free_blocks(), cfg.kv_blocks);
    expect_clean(log, ex);
  }
}

TEST(BatchKv, CancellingARunningRequestReturnsItsBlocks) {
  // One request's worth of blocks: B waits until A's reservation comes back.
  const BatchConfig cfg = kv_config(2, 64, 4, 4);
  BatchedDecodeState s(cfg);
  FakeExecutor ex(2, 64, kVocab, 4, 4);
  EventLog log;
  ASSERT_TRUE(s.submit(req(1, 6, 10)).ok());  // 16 tokens: 4 blocks
  ASSERT_TRUE(s.submit(req(2, 2, 14)).ok());  // 16 tokens: 4 blocks
  ASSERT_TRUE(s.submit(req(3, 2, 2)).ok());   // 4 tokens: 1 block
  StepPlan p = step(s, ex, log);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(s.kv_blocks_used(), 2);
  EXPECT_EQ(reserved(s), 4);
  p = step(s, ex, log);
  EXPECT_EQ(p.size(), 1u);  // B waits with a slot free
  EXPECT_EQ(s.where(2), BatchedDecodeState::Where::queued);

  // Cancel between steps: the next boundary frees A's slot and blocks and admits B at once.
  ASSERT_TRUE(s.cancel(1));
  p = step(s, ex, log);
  ASSERT_TRUE(log.at(1).finished);
  EXPECT_EQ(log.at(1).reason, FinishReason::cancelled);
  EXPECT_EQ(p.release, std::vector<int>{0});
  ASSERT_EQ(p.requests.size(), 1u);
  EXPECT_EQ(p.requests[0].id, 2u);
  EXPECT_TRUE(p.seqs[0].begin);
  EXPECT_EQ(p.seqs[0].slot, 0);
  EXPECT_EQ(s.kv_blocks_used(), 1);
  EXPECT_EQ(reserved(s), 4);

  // Cancel while B's step is in flight: its blocks come back when the step is applied.
  StepPlan q = s.plan();
  ASSERT_EQ(q.size(), 1u);
  ASSERT_TRUE(s.cancel(2));
  EXPECT_EQ(s.kv_blocks_used(), 1);  // still running until the boundary
  for (int slot : q.release) ex.release(slot);
  for (const auto& e : s.apply(q, ex.step(q.seqs))) log(e);
  EXPECT_EQ(log.at(2).reason, FinishReason::cancelled);
  EXPECT_EQ(s.kv_blocks_used(), 0);
  EXPECT_EQ(reserved(s), 0);
  for (int guard = 0; s.has_work() && guard < 100; ++guard) step(s, ex, log);
  EXPECT_TRUE(log.at(3).finished);
  EXPECT_EQ(log.at(3).reason, FinishReason::length);
  EXPECT_EQ(s.kv_blocks_used(), 0);
  EXPECT_EQ(s.kv().free_blocks(), 4);
  EXPECT_TRUE(ex.active_slots().empty());
  expect_clean(log, ex);
}

TEST(BatchKv, AFailedStepReturnsItsBlocks) {
  const BatchConfig cfg = kv_config(3, 64, 4, 6);
  BatchedDecodeState s(cfg);
  FakeExecutor ex(3, 64, kVocab, 4, 6);
  EventLog log;
  ASSERT_TRUE(s.submit(req(1, 4, 8)).ok());  // 12 tokens: 3 blocks
  ASSERT_TRUE(s.submit(req(2, 4, 8)).ok());  // 3 blocks
  ASSERT_TRUE(s.submit(req(3, 4, 8)).ok());  // 3 blocks: waits
  ex.fail_on_steps({1});                     // the first decode step throws
  ex.fail_after_work = true;
  StepPlan p = step(s, ex, log);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(reserved(s), 6);
  EXPECT_EQ(s.kv_blocks_used(), 2);
  p = step(s, ex, log);
  EXPECT_EQ(p.size(), 2u);
  EXPECT_TRUE(log.at(1).failed);
  EXPECT_TRUE(log.at(2).failed);
  EXPECT_EQ(s.kv_blocks_used(), 0);
  EXPECT_EQ(reserved(s), 0);
  // The next boundary releases both slots (the fake kept them active) and admits C.
  p = step(s, ex, log);
  EXPECT_EQ(p.release.size(), 2u);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p.requests.at(0).id, 3u);
  for (int guard = 0; s.has_work() && guard < 100; ++guard) step(s, ex, log);
  EXPECT_TRUE(log.at(3).finished);
  EXPECT_EQ(log.at(3).tokens, reference_tokens(req(3, 4, 8).prompt, 3, 8, kVocab));
  EXPECT_EQ(s.kv_blocks_used(), 0);
  EXPECT_EQ(s.kv().free_blocks(), 6);
  expect_clean(log, ex);
}

TEST(BatchKv, AFailedFirstStepReturnsItsBlocks) {
  const BatchConfig cfg = kv_config(2, 64, 4, 4);
  BatchedDecodeState s(cfg);
  FakeExecutor ex(2, 64, kVocab, 4, 4);
  EventLog log;
  ASSERT_TRUE(s.submit(req(1, 4, 12)).ok());  // 16 tokens: 4 blocks
  ASSERT_TRUE(s.submit(req(2, 4, 12)).ok());
  ex.fail_on_steps({0});  // before the work
  StepPlan p = step(s, ex, log);
  EXPECT_EQ(p.size(), 1u);
  EXPECT_TRUE(log.at(1).failed);
  EXPECT_EQ(s.kv_blocks_used(), 0);
  EXPECT_EQ(s.kv().cached_blocks(), 0) << "a failed step registers nothing";
  p = step(s, ex, log);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p.requests.at(0).id, 2u);
  for (int guard = 0; s.has_work() && guard < 100; ++guard) step(s, ex, log);
  EXPECT_TRUE(log.at(2).finished);
  EXPECT_EQ(s.kv_blocks_used(), 0);
  expect_clean(log, ex);
}

TEST(BatchKv, AbortAllReturnsEveryBlock) {
  BatchedDecodeState s(kv_config(3, 64, 4, 9));
  FakeExecutor ex(3, 64, kVocab, 4, 9);
  EventLog log;
  for (uint64_t id = 1; id <= 4; ++id) ASSERT_TRUE(s.submit(req(id, 3, 9)).ok());  // 3 blocks each
  step(s, ex, log);
  EXPECT_EQ(reserved(s), 9);
  EXPECT_EQ(s.kv_blocks_used(), 3);
  StepPlan q = s.plan();  // a step in flight, then the executor is lost
  ASSERT_FALSE(q.idle());
  for (const auto& e : s.abort_all("gone")) log(e);
  EXPECT_EQ(s.kv_blocks_used(), 0);
  EXPECT_EQ(reserved(s), 0);
  EXPECT_EQ(s.kv().free_blocks(), 9);
  for (uint64_t id = 1; id <= 4; ++id) EXPECT_TRUE(log.at(id).failed) << id;
  StepPlan r = s.plan();
  EXPECT_TRUE(r.idle());
  EXPECT_EQ(r.release.size(), 3u);
  for (int slot : r.release) ex.release(slot);
  EXPECT_TRUE(ex.active_slots().empty());
  // Everything is usable again.
  ASSERT_TRUE(s.submit(req(5, 3, 9)).ok());
  run_until_idle(s, ex, log.sink());
  EXPECT_EQ(log.at(5).tokens, reference_tokens(req(5, 3, 9).prompt, 5, 9, kVocab));
  expect_clean(log, ex);
}

TEST(BatchKv, TheDefaultCacheRunsEverySlotToTheFullContext) {
  const BatchConfig cfg = kv_config(3, 20, 4, 0);
  BatchedDecodeState s(cfg);
  FakeExecutor ex(3, 20, kVocab, 4);
  check_fits(cfg, ex);
  EventLog log;
  for (uint64_t id = 1; id <= 3; ++id) ASSERT_TRUE(s.submit(req(id, 5, 0)).ok());
  StepPlan p = step(s, ex, log);
  EXPECT_EQ(p.size(), 3u) << "every slot's reservation fits at once";
  EXPECT_EQ(reserved(s), 15);
  run_until_idle(s, ex, log.sink());
  for (uint64_t id = 1; id <= 3; ++id) {
    EXPECT_EQ(log.at(id).tokens.size(), 15u);
    EXPECT_EQ(log.at(id).reason, FinishReason::length);
  }
  expect_clean(log, ex);
}
