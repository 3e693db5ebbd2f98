// Tests of BatchedDecodeState (sched/batch_state.hpp) driven step by step or through
// run_until_idle against the fake executor: admission and validation, joins, recycling, FIFO
// order, limits, the prefill/decode alternation, finish reasons, cancellation at step
// boundaries, error isolation, the executor-release contract, and timings.
#include "sched/batch_state.hpp"

#include <gtest/gtest.h>

#include <stdexcept>

#include "formats/common.hpp"
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

BatchConfig make_config(int slots, int context) {
  BatchConfig c;
  c.max_slots = slots;
  c.max_context = context;
  c.max_queue = 16;
  c.max_prefill_batch = 8;
  c.max_prefill_tokens = 1024;
  c.n_vocab = kVocab;
  return c;
}

std::vector<int32_t> prompt_of(int n, int32_t first = 1) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back((first + 7 * i) % kVocab);
  return p;
}

BatchRequest make_req(uint64_t id, std::vector<int32_t> prompt, int max_tokens, uint64_t seed = 0,
                      uint64_t owner = 0) {
  BatchRequest r;
  r.ref = {id, owner == 0 ? 1000 + id : owner};
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.seed = seed == 0 ? id : seed;
  return r;
}

// Runs one already-made plan on the executor the way run_step does; returns its events.
std::vector<SchedEvent> execute(BatchedDecodeState& s, FakeExecutor& ex, const StepPlan& p) {
  const StepResult r = execute_step(ex, p);
  if (p.idle()) return {};
  return apply_step_result(s, p, r);
}

std::vector<uint64_t> ids_of(const StepPlan& p) {
  std::vector<uint64_t> out;
  for (const auto& r : p.requests) out.push_back(r.id);
  return out;
}

void expect_clean(const EventLog& log, const FakeExecutor& ex) {
  EXPECT_TRUE(log.violations.empty()) << log.violations.front();
  EXPECT_EQ(ex.feed_mismatches, 0);
}

}  // namespace

TEST(BatchConfig, RejectsBadValues) {
  auto bad = [](auto edit) {
    BatchConfig c = make_config(2, 16);
    edit(c);
    EXPECT_THROW(BatchedDecodeState{c}, Error);
  };
  bad([](BatchConfig& c) { c.max_slots = 0; });
  bad([](BatchConfig& c) { c.max_context = 1; });
  bad([](BatchConfig& c) { c.max_queue = 0; });
  bad([](BatchConfig& c) { c.max_prefill_batch = 0; });
  bad([](BatchConfig& c) { c.max_prefill_tokens = 0; });
  bad([](BatchConfig& c) { c.max_consecutive_prefills = 0; });
  bad([](BatchConfig& c) { c.n_vocab = -1; });
  EXPECT_NO_THROW(BatchedDecodeState{make_config(2, 16)});
}

TEST(BatchConfig, CheckFitsComparesWithTheExecutor) {
  FakeExecutor ex(4, 32, kVocab);
  EXPECT_NO_THROW(check_fits(make_config(4, 32), ex));
  EXPECT_THROW(check_fits(make_config(5, 32), ex), Error);
  EXPECT_THROW(check_fits(make_config(4, 33), ex), Error);
}

TEST(BatchSubmit, ValidatesAtSubmission) {
  BatchConfig c = make_config(2, 10);
  c.max_queue = 2;
  BatchedDecodeState s(c);
  EXPECT_EQ(s.submit(make_req(1, {}, 4)).status, SubmitStatus::invalid_request);
  EXPECT_EQ(s.submit(make_req(1, prompt_of(3), -1)).status, SubmitStatus::invalid_request);
  EXPECT_EQ(s.submit(make_req(1, {5, kVocab}, 4)).status, SubmitStatus::invalid_request);
  EXPECT_EQ(s.submit(make_req(1, {5, -3}, 4)).status, SubmitStatus::invalid_request);
  // prompt + 1 > max_context is refused; prompt + 1 == max_context fits.
  SubmitResult too_long = s.submit(make_req(1, prompt_of(10), 4));
  EXPECT_EQ(too_long.status, SubmitStatus::context_length_exceeded);
  EXPECT_NE(too_long.message.find("10"), std::string::npos) << too_long.message;
  EXPECT_TRUE(s.submit(make_req(1, prompt_of(9), 4)).ok());
  EXPECT_EQ(s.submit(make_req(1, prompt_of(3), 4)).status, SubmitStatus::invalid_request)
      << "a live id is refused";
  EXPECT_TRUE(s.submit(make_req(2, prompt_of(3), 4)).ok());
  EXPECT_EQ(s.queue_depth(), 2);
  SubmitResult full = s.submit(make_req(3, prompt_of(3), 4));
  EXPECT_EQ(full.status, SubmitStatus::overloaded);
  EXPECT_FALSE(full.message.empty());
  EXPECT_STREQ(submit_status_name(full.status), "overloaded");
  EXPECT_EQ(s.where(3), BatchedDecodeState::Where::unknown);
  EXPECT_EQ(s.counters().submitted, 2u);
  EXPECT_EQ(s.counters().rejected_overloaded, 1u);
  EXPECT_EQ(s.counters().rejected_invalid, 6u);
  EXPECT_EQ(s.queue_depth(), 2);
}

TEST(BatchSubmit, QueueSpaceReturnsWhenRequestsAreAdmitted) {
  BatchConfig c = make_config(2, 16);
  c.max_queue = 1;
  BatchedDecodeState s(c);
  FakeExecutor ex(2, 16, kVocab);
  ASSERT_TRUE(s.submit(make_req(1, prompt_of(3), 4)).ok());
  EXPECT_EQ(s.submit(make_req(2, prompt_of(3), 4)).status, SubmitStatus::overloaded);
  execute(s, ex, s.plan());  // admits 1
  EXPECT_EQ(s.queue_depth(), 0);
  EXPECT_TRUE(s.submit(make_req(2, prompt_of(3), 4)).ok());
}

TEST(BatchState, OneRequestMatchesTheReferenceAndEndsAtMaxTokens) {
  BatchedDecodeState s(make_config(1, 64));
  FakeExecutor ex(1, 64, kVocab);
  EventLog log;
  const auto prompt = prompt_of(5, 11);
  ASSERT_TRUE(s.submit(make_req(7, prompt, 6, 42, 99)).ok());
  const uint64_t steps = run_until_idle(s, ex, log.sink());
  EXPECT_EQ(steps, 6u);  // one prefill and five decodes
  const auto& r = log.at(7);
  EXPECT_EQ(r.ref.owner, 99u);
  EXPECT_EQ(r.tokens, reference_tokens(prompt, 42, 6, kVocab));
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(r.reason, FinishReason::length);
  EXPECT_EQ(r.finished_event.usage.prompt_tokens, 5);
  EXPECT_EQ(r.finished_event.usage.completion_tokens, 6);
  EXPECT_EQ(r.finished_event.timings.steps, 6);
  EXPECT_EQ(r.finished_event.slot, 0);
  EXPECT_TRUE(ex.active_slots().empty()) << "the finished slot was released on the executor";
  EXPECT_FALSE(s.has_work());
  expect_clean(log, ex);
}

TEST(BatchState, SeveralJoinsInOnePrefillInFifoSlotOrder) {
  BatchedDecodeState s(make_config(4, 64));
  FakeExecutor ex(4, 64, kVocab);
  for (uint64_t id : {30, 10, 20}) ASSERT_TRUE(s.submit(make_req(id, prompt_of(4, id), 3)).ok());
  StepPlan p = s.plan();
  ASSERT_EQ(p.kind, StepKind::prefill);
  EXPECT_EQ(ids_of(p), (std::vector<uint64_t>{30, 10, 20}));
  ASSERT_EQ(p.prefill.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(p.prefill[static_cast<size_t>(i)].slot, i);
  EXPECT_EQ(p.prefill[1].tokens, prompt_of(4, 10));
  EXPECT_EQ(p.prefill[1].sampling.seed, 10u);
  EXPECT_EQ(s.active_slots(), 3);
  EXPECT_EQ(s.where(10), BatchedDecodeState::Where::running);
  execute(s, ex, p);
  StepPlan d = s.plan();
  ASSERT_EQ(d.kind, StepKind::decode);
  ASSERT_EQ(d.decode.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(d.decode[static_cast<size_t>(i)].slot, i);
    EXPECT_EQ(d.decode[static_cast<size_t>(i)].token, s.slot(i).last_token);
    EXPECT_EQ(s.slot(i).position, 4);
    EXPECT_EQ(ex.slot_length(i), 4);
  }
}

TEST(BatchState, PrefillBatchLimitAlternatesWithDecode) {
  BatchConfig c = make_config(5, 64);
  c.max_prefill_batch = 2;
  BatchedDecodeState s(c);
  FakeExecutor ex(5, 64, kVocab);
  for (uint64_t id = 1; id <= 5; ++id) ASSERT_TRUE(s.submit(make_req(id, prompt_of(3), 20)).ok());
  std::vector<std::pair<StepKind, size_t>> seen;
  for (int i = 0; i < 6; ++i) {
    StepPlan p = s.plan();
    seen.push_back({p.kind, p.size()});
    execute(s, ex, p);
  }
  using K = StepKind;
  const std::vector<std::pair<K, size_t>> want = {{K::prefill, 2}, {K::decode, 2},  {K::prefill, 2},
                                                  {K::decode, 4},  {K::prefill, 1}, {K::decode, 5}};
  EXPECT_EQ(seen, want);
}

TEST(BatchState, ConsecutivePrefillsKnobLetsPrefillGoFirst) {
  BatchConfig c = make_config(5, 64);
  c.max_prefill_batch = 2;
  c.max_consecutive_prefills = 8;
  BatchedDecodeState s(c);
  FakeExecutor ex(5, 64, kVocab);
  for (uint64_t id = 1; id <= 5; ++id) ASSERT_TRUE(s.submit(make_req(id, prompt_of(3), 20)).ok());
  std::vector<StepKind> kinds;
  for (int i = 0; i < 5; ++i) {
    StepPlan p = s.plan();
    kinds.push_back(p.kind);
    execute(s, ex, p);
  }
  using K = StepKind;
  EXPECT_EQ(kinds, (std::vector<K>{K::prefill, K::prefill, K::prefill, K::decode, K::decode}));
}

TEST(BatchState, PrefillTokenBudgetIsStrictFifoAndAnOversizePromptRunsAlone) {
  BatchConfig c = make_config(4, 64);
  c.max_prefill_tokens = 7;
  c.max_consecutive_prefills = 8;
  BatchedDecodeState s(c);
  FakeExecutor ex(4, 64, kVocab);
  ASSERT_TRUE(s.submit(make_req(1, prompt_of(3), 9)).ok());
  ASSERT_TRUE(s.submit(make_req(2, prompt_of(3), 9)).ok());
  ASSERT_TRUE(s.submit(make_req(3, prompt_of(12), 9)).ok());  // alone over the budget
  ASSERT_TRUE(s.submit(make_req(4, prompt_of(1), 9)).ok());   // would fit, must not overtake
  StepPlan a = s.plan();
  EXPECT_EQ(ids_of(a), (std::vector<uint64_t>{1, 2}));
  execute(s, ex, a);
  StepPlan b = s.plan();
  EXPECT_EQ(ids_of(b), (std::vector<uint64_t>{3}));
  execute(s, ex, b);
  StepPlan d = s.plan();
  EXPECT_EQ(ids_of(d), (std::vector<uint64_t>{4}));
}

TEST(BatchState, MaxSlotsIsRespected) {
  BatchedDecodeState s(make_config(2, 64));
  FakeExecutor ex(6, 64, kVocab);  // the executor has more room than the config allows
  EventLog log;
  for (uint64_t id = 1; id <= 7; ++id)
    ASSERT_TRUE(s.submit(make_req(id, prompt_of(2 + static_cast<int>(id)), 3)).ok());
  auto sink = log.sink();
  while (run_step(s, ex, sink)) {
    EXPECT_LE(s.active_slots(), 2);
    for (int slot : ex.active_slots()) EXPECT_LT(slot, 2);
  }
  for (const auto& c : ex.calls)
    for (int slot : c.slots) EXPECT_LT(slot, 2);
  for (uint64_t id = 1; id <= 7; ++id) EXPECT_TRUE(log.at(id).finished);
  expect_clean(log, ex);
}

TEST(BatchState, FinishedSlotIsReleasedAndRecycledAtTheNextBoundary) {
  BatchedDecodeState s(make_config(1, 64));
  FakeExecutor ex(1, 64, kVocab);
  ASSERT_TRUE(s.submit(make_req(1, prompt_of(4), 2)).ok());
  ASSERT_TRUE(s.submit(make_req(2, prompt_of(5, 3), 2)).ok());
  StepPlan p1 = s.plan();
  EXPECT_EQ(ids_of(p1), (std::vector<uint64_t>{1}));
  execute(s, ex, p1);
  StepPlan d1 = s.plan();
  ASSERT_EQ(d1.kind, StepKind::decode);
  auto ev = execute(s, ex, d1);  // request 1 reaches max_tokens = 2
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_TRUE(is_final(ev[1]));
  EXPECT_EQ(s.slot(0).phase, BatchSlot::Phase::free) << "freed in the same apply";
  EXPECT_EQ(s.pending_releases(), std::vector<int>{0});
  EXPECT_TRUE(ex.slot_active(0)) << "the executor still holds it until the plan says release";
  StepPlan p2 = s.plan();
  EXPECT_EQ(p2.release, std::vector<int>{0});
  ASSERT_EQ(p2.kind, StepKind::prefill);
  EXPECT_EQ(ids_of(p2), (std::vector<uint64_t>{2}));
  EXPECT_EQ(p2.prefill[0].slot, 0);
  EXPECT_TRUE(s.pending_releases().empty());
  execute(s, ex, p2);  // the fake throws on a prefill into a busy slot
  EXPECT_EQ(ex.kv(0), prompt_of(5, 3));
  EXPECT_EQ(s.counters().failed, 0u);
}

TEST(BatchState, IdlePlanStillCarriesReleases) {
  BatchedDecodeState s(make_config(1, 64));
  FakeExecutor ex(1, 64, kVocab);
  ASSERT_TRUE(s.submit(make_req(1, prompt_of(4), 1)).ok());
  execute(s, ex, s.plan());  // max_tokens = 1: done after the prefill
  EXPECT_TRUE(s.has_work());
  StepPlan p = s.plan();
  EXPECT_TRUE(p.idle());
  EXPECT_EQ(p.release, std::vector<int>{0});
  execute(s, ex, p);
  EXPECT_FALSE(ex.slot_active(0));
  EXPECT_FALSE(s.has_work());
  EXPECT_TRUE(s.plan().release.empty());
}

TEST(BatchState, FifoAdmissionOrder) {
  BatchedDecodeState s(make_config(1, 64));
  FakeExecutor ex(1, 64, kVocab);
  EventLog log;
  const std::vector<uint64_t> order = {5, 3, 9, 1, 7};
  for (uint64_t id : order) ASSERT_TRUE(s.submit(make_req(id, prompt_of(3), 2)).ok());
  run_until_idle(s, ex, log.sink());
  std::vector<uint64_t> finished;
  for (const auto& e : log.all)
    if (is_final(e)) finished.push_back(event_request(e).id);
  EXPECT_EQ(finished, order);
  int prefills = 0;
  for (const auto& c : ex.calls) prefills += c.kind == FakeExecutor::Call::Kind::prefill;
  EXPECT_EQ(prefills, 5);
  expect_clean(log, ex);
}

TEST(BatchState, EndOfGenerationStopsUnlessIgnored) {
  const auto prompt = prompt_of(4, 5);
  const auto ref = reference_tokens(prompt, 77, 10, kVocab);
  const int32_t eog = ref[3];  // the fourth generated token
  int first = 0;
  while (ref[static_cast<size_t>(first)] != eog) ++first;  // it may occur earlier too
  for (bool ignore : {false, true}) {
    BatchConfig c = make_config(1, 64);
    c.is_eog = [eog](int32_t t) { return t == eog; };
    BatchedDecodeState s(c);
    FakeExecutor ex(1, 64, kVocab);
    EventLog log;
    BatchRequest r = make_req(1, prompt, 10, 77);
    r.ignore_eos = ignore;
    ASSERT_TRUE(s.submit(r).ok());
    run_until_idle(s, ex, log.sink());
    const auto& l = log.at(1);
    if (ignore) {
      EXPECT_EQ(l.reason, FinishReason::length);
      EXPECT_EQ(l.tokens, ref);
    } else {
      EXPECT_EQ(l.reason, FinishReason::stop);
      EXPECT_EQ(l.tokens, std::vector<int32_t>(ref.begin(), ref.begin() + first + 1));
      EXPECT_TRUE(std::get<TokenEvent>(log.all[log.all.size() - 2]).eog);
    }
    expect_clean(log, ex);
  }
}

TEST(BatchState, ContextFullEndsWithLength) {
  // max_context 9, prompt 5: the sequence may hold 9 tokens, so 4 generated tokens.
  BatchedDecodeState s(make_config(2, 9));
  FakeExecutor ex(2, 9, kVocab);
  EventLog log;
  ASSERT_TRUE(s.submit(make_req(1, prompt_of(5), 0)).ok());    // no max_tokens
  ASSERT_TRUE(s.submit(make_req(2, prompt_of(8), 100)).ok());  // room for exactly one token
  run_until_idle(s, ex, log.sink());
  EXPECT_EQ(log.at(1).tokens, reference_tokens(prompt_of(5), 1, 4, kVocab));
  EXPECT_EQ(log.at(1).reason, FinishReason::length);
  EXPECT_EQ(log.at(2).tokens.size(), 1u);
  EXPECT_EQ(log.at(2).reason, FinishReason::length);
  EXPECT_EQ(s.counters().failed, 0u) << "the fake throws when a full slot is decoded";
  expect_clean(log, ex);
}

TEST(BatchCancel, QueuedRequestLeavesTheQueueAndEndsAtTheBoundary) {
  BatchedDecodeState s(make_config(1, 64));
  FakeExecutor ex(1, 64, kVocab);
  EventLog log;
  ASSERT_TRUE(s.submit(make_req(1, prompt_of(3), 5)).ok());
  ASSERT_TRUE(s.submit(make_req(2, prompt_of(3), 5)).ok());
  for (const auto& e : execute(s, ex, s.plan())) log(e);
  ASSERT_EQ(s.where(2), BatchedDecodeState::Where::queued);
  EXPECT_TRUE(s.cancel(2));
  EXPECT_EQ(s.queue_depth(), 0);
  EXPECT_FALSE(s.cancel(2)) << "a second cancel does nothing";
  EXPECT_FALSE(log.done(2)) << "the event waits for the boundary";
  StepPlan p = s.plan();
  ASSERT_EQ(p.events.size(), 1u);
  const auto& f = std::get<FinishedEvent>(p.events[0]);
  EXPECT_EQ(f.request.id, 2u);
  EXPECT_EQ(f.reason, FinishReason::cancelled);
  EXPECT_EQ(f.slot, -1);
  EXPECT_EQ(f.usage.prompt_tokens, 3);
  for (const auto& e : p.events) log(e);
  for (const auto& e : execute(s, ex, p)) log(e);
  run_until_idle(s, ex, log.sink());
  EXPECT_EQ(log.at(2).finals, 1);
  EXPECT_TRUE(log.at(2).tokens.empty());
  EXPECT_EQ(log.at(1).reason, FinishReason::length);
  EXPECT_EQ(s.counters().cancelled, 1u);
  EXPECT_EQ(ex.steps, 5) << "the cancelled request never reached the executor";
  expect_clean(log, ex);
}

TEST(BatchCancel, RunningRequestIsFreedAtTheNextPlan) {
  BatchedDecodeState s(make_config(2, 64));
  FakeExecutor ex(2, 64, kVocab);
  EventLog log;
  ASSERT_TRUE(s.submit(make_req(1, prompt_of(3), 50)).ok());
  ASSERT_TRUE(s.submit(make_req(2, prompt_of(4), 50)).ok());
  for (int i = 0; i < 3; ++i)
    for (const auto& e : execute(s, ex, s.plan())) log(e);
  EXPECT_TRUE(s.cancel(1));
  EXPECT_FALSE(s.cancel(1));
  EXPECT_EQ(s.slot(0).phase, BatchSlot::Phase::decoding) << "nothing happens before the boundary";
  StepPlan p = s.plan();
  EXPECT_EQ(p.release, std::vector<int>{0});
  ASSERT_EQ(p.events.size(), 1u);
  EXPECT_EQ(std::get<FinishedEvent>(p.events[0]).reason, FinishReason::cancelled);
  EXPECT_EQ(ids_of(p), (std::vector<uint64_t>{2})) << "the other request keeps decoding";
  for (const auto& e : p.events) log(e);
  for (const auto& e : execute(s, ex, p)) log(e);
  EXPECT_FALSE(ex.slot_active(0));
  EXPECT_EQ(log.at(1).tokens.size(), 3u);
  EXPECT_EQ(log.at(1).finished_event.usage.completion_tokens, 3);
  EXPECT_EQ(s.where(1), BatchedDecodeState::Where::unknown);
  EXPECT_FALSE(s.cancel(1));
  run_until_idle(s, ex, log.sink());
  EXPECT_EQ(log.at(2).tokens, reference_tokens(prompt_of(4), 2, 50, kVocab));
  expect_clean(log, ex);
}

TEST(BatchCancel, CancelDuringAStepDropsThatStepsToken) {
  for (bool during_prefill : {true, false}) {
    BatchedDecodeState s(make_config(2, 64));
    FakeExecutor ex(2, 64, kVocab);
    EventLog log;
    ASSERT_TRUE(s.submit(make_req(1, prompt_of(3), 50)).ok());
    ASSERT_TRUE(s.submit(make_req(2, prompt_of(3, 9), 4)).ok());
    if (!during_prefill)
      for (const auto& e : execute(s, ex, s.plan())) log(e);
    StepPlan p = s.plan();
    EXPECT_TRUE(s.cancel(1));  // while p is in flight
    for (const auto& e : execute(s, ex, p)) log(e);
    const auto& l = log.at(1);
    EXPECT_EQ(l.reason, FinishReason::cancelled);
    EXPECT_EQ(l.tokens.size(), during_prefill ? 0u : 1u);
    EXPECT_EQ(s.pending_releases(), std::vector<int>{0});
    run_until_idle(s, ex, log.sink());
    EXPECT_EQ(log.at(2).reason, FinishReason::length);
    EXPECT_EQ(log.at(2).tokens, reference_tokens(prompt_of(3, 9), 2, 4, kVocab));
    EXPECT_TRUE(ex.active_slots().empty());
    expect_clean(log, ex);
  }
}

TEST(BatchCancel, CancelFromTheEventSinkEndsAfterThatToken) {
  BatchedDecodeState s(make_config(2, 64));
  FakeExecutor ex(2, 64, kVocab);
  EventLog log;
  ASSERT_TRUE(s.submit(make_req(1, prompt_of(3), 40)).ok());
  ASSERT_TRUE(s.submit(make_req(2, prompt_of(6), 10)).ok());
  run_until_idle(s, ex, [&](const SchedEvent& e) {
    log(e);
    if (const auto* t = std::get_if<TokenEvent>(&e); t && t->request.id == 1 && t->index == 2) {
      EXPECT_TRUE(s.cancel(1));  // what a session does when a stop string matched
    }
  });
  EXPECT_EQ(log.at(1).tokens.size(), 3u);
  EXPECT_EQ(log.at(1).reason, FinishReason::cancelled);
  EXPECT_EQ(log.at(2).tokens.size(), 10u);
  expect_clean(log, ex);
}

TEST(BatchCancel, UnknownIdsAreIgnored) {
  BatchedDecodeState s(make_config(1, 16));
  EXPECT_FALSE(s.cancel(12345));
  EXPECT_TRUE(s.plan().events.empty());
}

TEST(BatchFailure, FailedPrefillFailsOnlyItsJoiners) {
  for (bool after_work : {false, true}) {
    BatchedDecodeState s(make_config(3, 64));
    FakeExecutor ex(3, 64, kVocab);
    ex.fail_after_work = after_work;
    EventLog log;
    ASSERT_TRUE(s.submit(make_req(1, prompt_of(3), 8)).ok());
    for (const auto& e : execute(s, ex, s.plan())) log(e);  // 1 joins alone
    ASSERT_TRUE(s.submit(make_req(2, prompt_of(4), 8)).ok());
    ASSERT_TRUE(s.submit(make_req(3, prompt_of(5), 8)).ok());
    for (const auto& e : execute(s, ex, s.plan())) log(e);  // decode 1
    ex.fail_on_steps({ex.steps});                           // the coming prefill of 2 and 3
    ASSERT_TRUE(s.submit(make_req(4, prompt_of(6), 8)).ok());
    run_until_idle(s, ex, [&](const SchedEvent& e) { log(e); });
    for (uint64_t id : {2, 3}) {
      ASSERT_TRUE(log.at(id).failed) << id;
      EXPECT_EQ(log.at(id).failed_event.code, ErrorCode::internal);
      EXPECT_NE(log.at(id).failed_event.message.find("injected"), std::string::npos);
      EXPECT_TRUE(log.at(id).tokens.empty());
    }
    EXPECT_EQ(log.at(1).tokens, reference_tokens(prompt_of(3), 1, 8, kVocab));
    EXPECT_EQ(log.at(1).reason, FinishReason::length);
    // 4 joined a slot that the failed prefill had used: released first, or the fake throws.
    EXPECT_EQ(log.at(4).tokens, reference_tokens(prompt_of(6), 4, 8, kVocab));
    EXPECT_EQ(s.counters().failed, 2u);
    EXPECT_EQ(s.counters().failed_steps, 1u);
    EXPECT_TRUE(ex.active_slots().empty());
    expect_clean(log, ex);
  }
}

TEST(BatchFailure, FailedDecodeFailsTheRunningRequestsButNotTheQueue) {
  BatchedDecodeState s(make_config(2, 64));
  FakeExecutor ex(2, 64, kVocab);
  ex.fail_after_work = true;
  EventLog log;
  for (uint64_t id = 1; id <= 4; ++id) ASSERT_TRUE(s.submit(make_req(id, prompt_of(3), 5)).ok());
  ex.fail_on_steps({2});  // prefill(1,2), decode, decode <- fails
  run_until_idle(s, ex, log.sink());
  for (uint64_t id : {1, 2}) {
    ASSERT_TRUE(log.at(id).failed);
    EXPECT_EQ(log.at(id).tokens.size(), 2u);
    EXPECT_EQ(log.at(id).failed_event.usage.completion_tokens, 2);
  }
  for (uint64_t id : {3, 4}) {
    EXPECT_EQ(log.at(id).reason, FinishReason::length);
    EXPECT_EQ(log.at(id).tokens, reference_tokens(prompt_of(3), id, 5, kVocab));
  }
  expect_clean(log, ex);
}

TEST(BatchFailure, PendingCancelWinsOverAFailedStep) {
  BatchedDecodeState s(make_config(2, 64));
  FakeExecutor ex(2, 64, kVocab);
  ASSERT_TRUE(s.submit(make_req(1, prompt_of(3), 5)).ok());
  ASSERT_TRUE(s.submit(make_req(2, prompt_of(3), 5)).ok());
  StepPlan p = s.plan();
  s.cancel(2);
  auto ev = s.fail_step(p, "boom");
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(std::get<FailedEvent>(ev[0]).message, "boom");
  EXPECT_EQ(std::get<FinishedEvent>(ev[1]).reason, FinishReason::cancelled);
  EXPECT_EQ(s.pending_releases(), (std::vector<int>{0, 1}));
  EXPECT_EQ(s.active_slots(), 0);
}

TEST(BatchFailure, WrongTokenCountFailsTheStep) {
  struct ShortExecutor : FakeExecutor {
    using FakeExecutor::FakeExecutor;
    std::vector<int32_t> decode(std::span<const DecodeRequest> r) override {
      auto t = FakeExecutor::decode(r);
      t.pop_back();
      return t;
    }
  };
  BatchedDecodeState s(make_config(1, 64));
  ShortExecutor ex(1, 64, kVocab);
  EventLog log;
  ASSERT_TRUE(s.submit(make_req(1, prompt_of(3), 5)).ok());
  run_until_idle(s, ex, log.sink());
  ASSERT_TRUE(log.at(1).failed);
  EXPECT_NE(log.at(1).failed_event.message.find("0 tokens for 1"), std::string::npos)
      << log.at(1).failed_event.message;
  EXPECT_TRUE(ex.active_slots().empty());
}

TEST(BatchState, MisuseIsALogicError) {
  BatchedDecodeState s(make_config(2, 64));
  ASSERT_TRUE(s.submit(make_req(1, prompt_of(3), 5)).ok());
  StepPlan idle_apply;
  EXPECT_THROW(s.apply(idle_apply, {}), std::logic_error);
  StepPlan p = s.plan();
  EXPECT_THROW(s.plan(), std::logic_error) << "one step at a time";
  const std::vector<int32_t> two = {1, 2};
  EXPECT_THROW(s.apply(p, two), std::invalid_argument);
  EXPECT_TRUE(s.in_flight()) << "a refused apply changes nothing";
  StepPlan stale = p;
  stale.step += 1;
  const std::vector<int32_t> one = {1};
  EXPECT_THROW(s.apply(stale, one), std::logic_error);
  auto ev = s.apply(p, one);
  EXPECT_EQ(ev.size(), 1u);
  EXPECT_THROW(s.apply(p, one), std::logic_error) << "a step is applied once";
  EXPECT_THROW(s.fail_step(p, "x"), std::logic_error);
}

TEST(BatchState, TimingsFollowTheInjectedClock) {
  int64_t ms = 1000;
  BatchConfig c = make_config(1, 64);
  c.now = [&ms] { return SchedClock::time_point(std::chrono::milliseconds(ms)); };
  BatchedDecodeState s(c);
  FakeExecutor ex(1, 64, kVocab);
  EventLog log;
  ASSERT_TRUE(s.submit(make_req(1, prompt_of(3), 3)).ok());  // t = 1000
  ms = 1010;
  StepPlan p = s.plan();  // admitted at 1010
  ms = 1050;
  for (const auto& e : execute(s, ex, p)) log(e);  // first token at 1050
  ms = 1100;
  for (const auto& e : execute(s, ex, s.plan())) log(e);
  ms = 1200;
  for (const auto& e : execute(s, ex, s.plan())) log(e);  // finished at 1200
  const auto& t = log.at(1).finished_event.timings;
  EXPECT_DOUBLE_EQ(t.queue_ms(), 10.0);
  EXPECT_DOUBLE_EQ(t.ttft_ms(), 50.0);
  EXPECT_DOUBLE_EQ(t.total_ms(), 200.0);
  EXPECT_EQ(t.steps, 3);
}

TEST(BatchState, CountersAddUp) {
  BatchedDecodeState s(make_config(2, 32));
  FakeExecutor ex(2, 32, kVocab);
  EventLog log;
  for (uint64_t id = 1; id <= 5; ++id) ASSERT_TRUE(s.submit(make_req(id, prompt_of(4), 6)).ok());
  s.cancel(5);
  ex.fail_on_steps({3});
  run_until_idle(s, ex, log.sink());
  const auto& c = s.counters();
  EXPECT_EQ(c.submitted, 5u);
  EXPECT_EQ(c.finished + c.cancelled + c.failed, 5u);
  EXPECT_EQ(c.cancelled, 1u);
  EXPECT_EQ(c.admitted, 4u);
  EXPECT_EQ(c.prompt_tokens, 16u);
  uint64_t tokens = 0;
  for (const auto& [id, l] : log.req) tokens += l.tokens.size();
  EXPECT_EQ(c.tokens_generated, tokens);
  EXPECT_EQ(c.failed_steps, 1u);
  EXPECT_EQ(c.prefill_steps + c.decode_steps, static_cast<uint64_t>(ex.steps));
  EXPECT_EQ(s.queue_depth(), 0);
  EXPECT_EQ(s.active_slots(), 0);
  expect_clean(log, ex);
}

TEST(BatchFailure, AbortAllEndsEveryLiveRequestOnce) {
  BatchedDecodeState s(make_config(2, 64));
  FakeExecutor ex(2, 64, kVocab);
  EventLog log;
  for (uint64_t id = 1; id <= 5; ++id) ASSERT_TRUE(s.submit(make_req(id, prompt_of(3), 9)).ok());
  for (const auto& e : execute(s, ex, s.plan())) log(e);  // 1 and 2 run
  s.cancel(4);                                            // queued: its event is pending
  s.cancel(2);                                            // running: pending at the boundary
  StepPlan p = s.plan();  // decode of 1, in flight when the executor dies
  EXPECT_EQ(p.release, std::vector<int>{1});
  for (int slot : p.release) ex.release(slot);
  for (const auto& e : p.events) log(e);
  for (const auto& e : s.abort_all("executor lost")) log(e);
  EXPECT_FALSE(s.in_flight());
  EXPECT_THROW(s.apply(p, std::vector<int32_t>(p.size(), 1)), std::logic_error);
  for (uint64_t id = 1; id <= 5; ++id) EXPECT_EQ(log.at(id).finals, 1) << id;
  EXPECT_TRUE(log.at(1).failed);
  EXPECT_EQ(log.at(1).failed_event.message, "executor lost");
  EXPECT_EQ(log.at(1).tokens.size(), 1u);
  EXPECT_EQ(log.at(2).reason, FinishReason::cancelled);
  EXPECT_TRUE(log.at(3).failed);
  EXPECT_EQ(log.at(3).failed_event.slot, -1);
  EXPECT_EQ(log.at(4).reason, FinishReason::cancelled);
  EXPECT_TRUE(log.at(5).failed);
  EXPECT_EQ(s.active_slots(), 0);
  EXPECT_EQ(s.queue_depth(), 0);
  EXPECT_TRUE(log.violations.empty()) << log.violations.front();
  StepPlan after = s.plan();  // the state goes on: releases first, then new work
  EXPECT_EQ(after.release, std::vector<int>{0});
  EXPECT_TRUE(after.idle());
  for (int slot : after.release) ex.release(slot);
  EXPECT_TRUE(ex.active_slots().empty());
  ASSERT_TRUE(s.submit(make_req(1, prompt_of(3), 2)).ok());
  EventLog log2;
  run_until_idle(s, ex, log2.sink());
  EXPECT_EQ(log2.at(1).tokens, reference_tokens(prompt_of(3), 1, 2, kVocab));
  const auto& c = s.counters();
  EXPECT_EQ(c.submitted, c.finished + c.cancelled + c.failed);
}
