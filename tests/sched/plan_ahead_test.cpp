// Tests of planning a step ahead (BatchedDecodeState::plan_ahead, sched/step.hpp's StepRunner and
// sched/driver.hpp's run_until_idle_ahead) against the fake executor: what a step planned ahead
// holds and when there is none, requests that the step before ends (an end-of-generation token,
// a cancel, a length limit), failures, and the same tokens as one step at a time.
#include <gtest/gtest.h>

#include <stdexcept>

#include "sched/batch_state.hpp"
#include "sched/driver.hpp"
#include "sched/step.hpp"
#include "tests/sched/event_log.hpp"
#include "tests/sched/fake_executor.hpp"

using namespace rz;
using rz_test::EventLog;
using rz_test::FakeExecutor;
using rz_test::reference_tokens;

namespace {

constexpr int kVocab = 1000;

BatchConfig config(int slots, int context, int block_size = 4) {
  BatchConfig c;
  c.max_slots = slots;
  c.max_context = context;
  c.max_queue = 16;
  c.n_vocab = kVocab;
  c.kv_block_size = block_size;
  return c;
}

BatchRequest req(uint64_t id, int prompt_len, int max_tokens) {
  BatchRequest r;
  r.ref = {id, 100 + id};
  for (int i = 0; i < prompt_len; ++i)
    r.prompt.push_back(static_cast<int32_t>((id * 13 + i * 7) % kVocab));
  r.max_tokens = max_tokens;
  r.sampling.seed = id;
  r.ignore_eos = true;
  return r;
}

// Runs `p` through the runner and applies it; returns its events.
std::vector<SchedEvent> run(BatchedDecodeState& s, StepRunner& runner, FakeExecutor& ex,
                            const StepPlan& p) {
  const StepResult r = runner.run(ex, p);
  return p.idle() ? std::vector<SchedEvent>{} : apply_step_result(s, p, r);
}

const TokenEvent* token_of(const std::vector<SchedEvent>& events, uint64_t id) {
  for (const SchedEvent& e : events)
    if (const auto* t = std::get_if<TokenEvent>(&e); t && t->request.id == id) return t;
  return nullptr;
}

}  // namespace

TEST(PlanAhead, DecodesWithTheTokensOfTheStepInFlight) {
  BatchedDecodeState s(config(3, 64));
  FakeExecutor ex(3, 64, kVocab, 4);
  StepRunner runner(3);
  ASSERT_TRUE(s.submit(req(1, 5, 10)).ok());
  ASSERT_TRUE(s.submit(req(2, 9, 10)).ok());
  EXPECT_TRUE(s.plan_ahead().idle()) << "nothing in flight";
  const StepPlan p = s.plan();  // both prompts, each sampling
  ASSERT_EQ(p.size(), 2u);
  const StepPlan a = s.plan_ahead();
  ASSERT_EQ(a.size(), 2u);
  EXPECT_TRUE(a.ahead);
  EXPECT_EQ(a.step, p.step + 1);
  EXPECT_EQ(s.steps_in_flight(), 2);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a.seqs[i].slot, p.seqs[i].slot);
    EXPECT_EQ(a.seqs[i].start, p.seqs[i].end()) << "the position of the token p samples";
    EXPECT_EQ(a.seqs[i].tokens, std::vector<int32_t>{kTokenOfLastStep});
    EXPECT_TRUE(a.seqs[i].sample);
    EXPECT_FALSE(a.seqs[i].begin);
    EXPECT_GE(static_cast<int>(a.seqs[i].blocks.size()) * 4, a.seqs[i].end());
  }
  EXPECT_TRUE(s.plan_ahead().idle()) << "at most one step ahead";
  EXPECT_THROW(s.plan(), std::logic_error);
  EXPECT_THROW(apply_step_result(s, a, StepResult{}), std::logic_error) << "p comes first";
  const auto ev1 = run(s, runner, ex, p);
  const auto ev2 = run(s, runner, ex, a);
  // The tokens are the reference's: a's entries were fed p's samples.
  for (uint64_t id : {1u, 2u}) {
    const auto want = reference_tokens(req(id, id == 1 ? 5 : 9, 10).prompt, id, 2, kVocab);
    ASSERT_TRUE(token_of(ev1, id) && token_of(ev2, id));
    EXPECT_EQ(token_of(ev1, id)->token, want[0]);
    EXPECT_EQ(token_of(ev2, id)->token, want[1]);
  }
  EXPECT_EQ(ex.feed_mismatches, 0);
  EXPECT_FALSE(s.in_flight());
}

// Behind a step in flight a prompt goes on after that step's chunk and a waiting request is
// admitted; the tokens are the reference's.
TEST(PlanAhead, ContinuesPromptsAndAdmitsBehindTheStepInFlight) {
  BatchConfig c = config(2, 64);
  c.max_step_tokens = 6;
  BatchedDecodeState s(c);
  FakeExecutor ex(2, 64, kVocab, 4);
  StepRunner runner(2);
  ASSERT_TRUE(s.submit(req(1, 10, 3)).ok());
  const StepPlan p = s.plan();  // request 1's first 6 prompt tokens
  ASSERT_EQ(p.size(), 1u);
  ASSERT_FALSE(p.seqs[0].sample);
  ASSERT_TRUE(s.submit(req(2, 3, 2)).ok());  // arrives while p is in flight
  const StepPlan a = s.plan_ahead();
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a.seqs[0].start, 6) << "request 1's prompt goes on after p's chunk";
  EXPECT_EQ(a.seqs[0].tokens.size(), 4u);
  EXPECT_TRUE(a.seqs[0].sample);
  EXPECT_FALSE(a.seqs[0].begin);
  EXPECT_EQ(a.requests[1].id, 2u);
  EXPECT_TRUE(a.seqs[1].begin);
  EXPECT_EQ(a.seqs[1].tokens.size(), 2u) << "the rest of the budget";
  EventLog log;
  for (const StepPlan* q : {&p, &a})
    for (const SchedEvent& e : run(s, runner, ex, *q)) log.sink()(e);
  run_until_idle_ahead(s, ex, log.sink());
  EXPECT_TRUE(log.violations.empty()) << log.violations.front();
  EXPECT_EQ(log.at(1).tokens, reference_tokens(req(1, 10, 3).prompt, 1, 3, kVocab));
  EXPECT_EQ(log.at(2).tokens, reference_tokens(req(2, 3, 2).prompt, 2, 2, kVocab));
  EXPECT_EQ(ex.feed_mismatches, 0);
  EXPECT_EQ(ex.kv_mismatches, 0) << ex.kv_report();
}

TEST(PlanAhead, NoneWhileACancelIsPending) {
  BatchedDecodeState s(config(2, 64));
  FakeExecutor ex(2, 64, kVocab, 4);
  ASSERT_TRUE(s.submit(req(1, 5, 10)).ok());
  run_step(s, ex, nullptr);
  const StepPlan p = s.plan();
  ASSERT_TRUE(s.cancel(1));
  EXPECT_TRUE(s.plan_ahead().idle()) << "the cancel takes effect at an ordinary plan";
  EXPECT_EQ(s.steps_in_flight(), 1);
}

TEST(PlanAhead, ARequestThatEndsByLengthGetsNoEntry) {
  BatchedDecodeState s(config(2, 64));
  FakeExecutor ex(2, 64, kVocab, 4);
  StepRunner runner(2);
  ASSERT_TRUE(s.submit(req(1, 5, 1)).ok());  // its prompt step samples its only token
  ASSERT_TRUE(s.submit(req(2, 5, 3)).ok());
  const StepPlan p = s.plan();
  const StepPlan a = s.plan_ahead();
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a.requests[0].id, 2u);
  run(s, runner, ex, p);
  run(s, runner, ex, a);
  // Context: a 10-token context ends a 5-token prompt after 5 tokens.
  BatchedDecodeState t(config(1, 10));
  ASSERT_TRUE(t.submit(req(3, 5, 0)).ok());
  FakeExecutor ex2(1, 10, kVocab, 4);
  for (int i = 0; i < 4; ++i) run_step(t, ex2, nullptr);  // prompt + 3 decodes: 4 generated
  t.plan();                                               // the decode that samples the 5th
  EXPECT_TRUE(t.plan_ahead().idle()) << "the step in flight fills the context";
}

// A request ended by the step in flight (here its end-of-generation token) has an entry in the
// step planned ahead: that entry's token is dropped, its slot freed once, and released before
// the slot's next use; the request beside it goes on.
TEST(PlanAhead, AnEndOfGenerationLeavesAnEntryThatIsSkipped) {
  const std::vector<int32_t> want1 = reference_tokens(req(1, 5, 10).prompt, 1, 10, kVocab);
  BatchConfig c = config(2, 64);
  const int32_t eog = want1[2];  // request 1's third token ends it
  c.is_eog = [eog](int32_t t) { return t == eog; };
  BatchedDecodeState s(c);
  FakeExecutor ex(2, 64, kVocab, 4);
  StepRunner runner(2);
  BatchRequest r1 = req(1, 5, 10);
  r1.ignore_eos = false;
  ASSERT_TRUE(s.submit(r1).ok());
  ASSERT_TRUE(s.submit(req(2, 6, 10)).ok());
  EventLog log;
  auto deliver = [&](const std::vector<SchedEvent>& evs) {
    for (const SchedEvent& e : evs) log.sink()(e);
  };
  StepPlan p = s.plan();
  StepPlan a = s.plan_ahead();
  deliver(run(s, runner, ex, p));  // token 0
  StepPlan b = s.plan_ahead();
  ASSERT_FALSE(b.idle());
  deliver(run(s, runner, ex, a));  // token 1
  StepPlan d = s.plan_ahead();
  deliver(run(s, runner, ex, b));  // token 2: end of generation; d still holds an entry for it
  ASSERT_TRUE(log.at(1).finished);
  EXPECT_EQ(log.at(1).reason, FinishReason::stop);
  EXPECT_EQ(log.at(1).tokens, std::vector<int32_t>(want1.begin(), want1.begin() + 3));
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(s.active_slots(), 1);
  const int slot1 = d.seqs[0].slot;
  EXPECT_EQ(s.pending_releases(), std::vector<int>{slot1});
  StepPlan e = s.plan_ahead();  // request 2 only; it releases slot 1's executor slot first
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e.release, std::vector<int>{slot1});
  deliver(run(s, runner, ex, d));  // the skipped entry's token goes nowhere
  deliver(run(s, runner, ex, e));
  EXPECT_EQ(log.at(1).tokens.size(), 3u);
  EXPECT_FALSE(ex.slot_active(slot1));
  // A new request takes the freed slot through an ordinary plan.
  ASSERT_TRUE(s.submit(req(3, 4, 2)).ok());
  run_until_idle_ahead(s, ex, log.sink());
  EXPECT_TRUE(log.violations.empty()) << log.violations.front();
  EXPECT_EQ(log.at(2).tokens, reference_tokens(req(2, 6, 10).prompt, 2, 10, kVocab));
  EXPECT_EQ(log.at(3).tokens, reference_tokens(req(3, 4, 2).prompt, 3, 2, kVocab));
  EXPECT_EQ(ex.feed_mismatches, 0);
  EXPECT_EQ(ex.kv_mismatches, 0) << ex.kv_report();
  EXPECT_EQ(s.kv_blocks_used(), 0);
}

// A cancel while two steps are in flight ends the request at the first one's result; the step
// planned ahead then skips its entry.
TEST(PlanAhead, ACancelWithTwoStepsInFlight) {
  BatchedDecodeState s(config(2, 64));
  FakeExecutor ex(2, 64, kVocab, 4);
  StepRunner runner(2);
  ASSERT_TRUE(s.submit(req(1, 5, 10)).ok());
  ASSERT_TRUE(s.submit(req(2, 5, 10)).ok());
  EventLog log;
  StepPlan p = s.plan();
  StepPlan a = s.plan_ahead();
  ASSERT_TRUE(s.cancel(1));
  for (const SchedEvent& e : run(s, runner, ex, p)) log.sink()(e);
  EXPECT_TRUE(log.at(1).finished);
  EXPECT_EQ(log.at(1).reason, FinishReason::cancelled);
  EXPECT_TRUE(log.at(1).tokens.empty()) << "the cancelled step's token is dropped";
  for (const SchedEvent& e : run(s, runner, ex, a)) log.sink()(e);
  EXPECT_EQ(log.at(2).tokens.size(), 2u);
  run_until_idle_ahead(s, ex, log.sink());
  EXPECT_TRUE(log.violations.empty()) << log.violations.front();
  EXPECT_EQ(s.counters().cancelled, 1u);
}

// A failed step fails its requests; the step planned ahead behind it leaves their entries out
// (the executor runs nothing here) and the scheduler skips them.
TEST(PlanAhead, AFailedStepTakesTheStepAheadWithIt) {
  BatchedDecodeState s(config(2, 64));
  FakeExecutor ex(2, 64, kVocab, 4);
  StepRunner runner(2);
  EventLog log;
  ASSERT_TRUE(s.submit(req(3, 5, 10)).ok());
  StepPlan p = s.plan();
  StepPlan a = s.plan_ahead();
  ASSERT_FALSE(a.idle());
  ex.fail_on_steps({ex.steps});
  for (const SchedEvent& e : run(s, runner, ex, p)) log.sink()(e);
  ASSERT_TRUE(log.at(3).failed);
  const int steps_before = ex.steps;
  const StepResult r = runner.run(ex, a);
  EXPECT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.tokens.size(), a.sampled()) << "a stand-in token for the left-out entry";
  EXPECT_EQ(ex.steps, steps_before) << "the executor ran nothing";
  EXPECT_TRUE(apply_step_result(s, a, r).empty()) << "its entries were skipped";
  EXPECT_FALSE(s.in_flight());
  EXPECT_EQ(s.active_slots(), 0);
}

TEST(StepRunner, FillsInTheLastSampledTokenPerSlot) {
  FakeExecutor ex(2, 64, kVocab, 4);
  StepRunner runner(2);
  ExecutorStep first;
  first.step = 1;
  StepSeq e;
  e.slot = 1;
  e.begin = true;
  e.tokens = {5, 6, 7};
  e.blocks = {0};
  e.sample = true;
  first.seqs = {e};
  const StepResult r1 = runner.run(ex, first);
  ASSERT_TRUE(r1.ok()) << r1.error;
  ExecutorStep next;
  next.step = 2;
  StepSeq d;
  d.slot = 1;
  d.start = 3;
  d.tokens = {kTokenOfLastStep};
  d.blocks = {0};
  d.sample = true;
  next.seqs = {d};
  const StepResult r2 = runner.run(ex, next);
  ASSERT_TRUE(r2.ok()) << r2.error;
  EXPECT_EQ(ex.history(1), (std::vector<int32_t>{5, 6, 7, r1.tokens[0]}));
  EXPECT_EQ(ex.feed_mismatches, 0);
  // Slot 0 never sampled; and a released slot forgets its token.
  next.step = 3;
  next.seqs[0].slot = 0;
  EXPECT_FALSE(runner.run(ex, next).ok());
  ExecutorStep rel;
  rel.step = 4;
  rel.release = {1};
  runner.run(ex, rel);
  next.step = 5;
  next.seqs[0].slot = 1;
  next.seqs[0].start = 0;
  EXPECT_FALSE(runner.run(ex, next).ok());
}

// The tokens of every request are the same with the step planned ahead as one step at a time,
// with joins, chunked prompts, ends by length and by end-of-generation tokens.
TEST(PlanAhead, SameTokensAsOneStepAtATime) {
  for (int budget : {4, 16, 512}) {
    SCOPED_TRACE("budget " + std::to_string(budget));
    std::vector<BatchRequest> reqs;
    for (uint64_t id = 1; id <= 12; ++id) {
      BatchRequest r = req(id, 3 + static_cast<int>(id % 7) * 2, 2 + static_cast<int>(id % 5) * 3);
      r.ignore_eos = id % 3 == 0;
      reqs.push_back(r);
    }
    auto make = [&] {
      BatchConfig c = config(4, 48, 4);
      c.max_step_tokens = budget;
      c.is_eog = [](int32_t t) { return t % 17 == 0; };
      return c;
    };
    EventLog one, ahead;
    BatchedDecodeState s1(make()), s2(make());
    FakeExecutor ex1(4, 48, kVocab, 4), ex2(4, 48, kVocab, 4);
    for (const auto& r : reqs) {
      ASSERT_TRUE(s1.submit(r).ok());
      ASSERT_TRUE(s2.submit(r).ok());
    }
    run_until_idle(s1, ex1, one.sink());
    const uint64_t steps = run_until_idle_ahead(s2, ex2, ahead.sink());
    EXPECT_GT(steps, 0u);
    EXPECT_GT(s2.counters().steps_ahead, steps / 2) << "all but the steps after a cancel or idle";
    EXPECT_EQ(s1.counters().steps_ahead, 0u);
    EXPECT_TRUE(ahead.violations.empty()) << ahead.violations.front();
    for (const auto& r : reqs) {
      EXPECT_EQ(ahead.at(r.ref.id).tokens, one.at(r.ref.id).tokens) << "request " << r.ref.id;
      EXPECT_EQ(ahead.at(r.ref.id).reason, one.at(r.ref.id).reason) << "request " << r.ref.id;
    }
    EXPECT_EQ(ex2.feed_mismatches, 0);
    EXPECT_EQ(ex2.kv_mismatches, 0) << ex2.kv_report();
    EXPECT_EQ(ex2.shared_writes, 0) << ex2.kv_report();
    EXPECT_EQ(s2.kv_blocks_used(), 0);
  }
}
