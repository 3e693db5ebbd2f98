// Tests of BatchedDecodeState (sched/batch_state.hpp) driven step by step or through
// run_until_idle against the fake executor: config and submit validation, the queue bound,
// joins, recycling, FIFO order, the token budget (decodes first, then prompt chunks), limits,
// finish reasons, cancellation at step boundaries, error isolation, the executor-release
// contract, timings and counters.
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
using rz_test::expect_clean;
using rz_test::FakeExecutor;
using rz_test::reference_tokens;

namespace {

constexpr int kVocab = 1000;

BatchConfig make_config(int slots, int context) {
  BatchConfig c;
  c.max_slots = slots;
  c.max_context = context;
  c.max_queue = 16;
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

// An entry as (slot, start, tokens, begin, sample), for comparing whole plans.
struct Shape {
  int slot, start, n;
  bool begin, sample;
  friend bool operator==(const Shape&, const Shape&) = default;
};
std::ostream& operator<<(std::ostream& o, const Shape& s) {
  return o << "{slot " << s.slot << " start " << s.start << " n " << s.n
           << (s.begin ? " begin" : "") << (s.sample ? " sample" : "") << "}";
}
std::vector<Shape> shape_of(const StepPlan& p) {
  std::vector<Shape> out;
  for (const StepSeq& e : p.seqs)
    out.push_back({e.slot, e.start, static_cast<int>(e.tokens.size()), e.begin, e.sample});
  return out;
}
int tokens_of(const StepPlan& p) {
  int n = 0;
  for (const StepSeq& e : p.seqs) n += static_cast<int>(e.tokens.size());
  return n;
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
  bad([](BatchConfig& c) { c.max_queue = -1; });
  bad([](BatchConfig& c) { c.max_step_tokens = 0; });
  bad([](BatchConfig& c) { c.max_step_tokens = 1; });  // below max_slots
  bad([](BatchConfig& c) { c.n_vocab = -1; });
  bad([](BatchConfig& c) { c.kv_block_size = 0; });
  bad([](BatchConfig& c) { c.kv_blocks = -1; });
  EXPECT_NO_THROW(BatchedDecodeState{make_config(2, 16)});
  BatchConfig edge = make_config(2, 16);
  edge.max_queue = 0;
  edge.max_step_tokens = 2;
  EXPECT_NO_THROW(BatchedDecodeState{edge});
  try {
    BatchConfig c = make_config(4, 16);
    c.max_step_tokens = 3;
    BatchedDecodeState s(c);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("max_step_tokens (3) must be at least max_slots (4)"),
              std::string::npos)
        << e.what();
  }
}

// The default budget: kDefaultStepTokens, or room for kDefaultPromptRoom prompt tokens beside
// every slot decoding, whichever is more; always a valid config.
TEST(BatchConfig, DefaultBudgetLeavesRoomForPromptsBesideAFullBatch) {
  EXPECT_EQ(default_max_step_tokens(1), kDefaultStepTokens);
  EXPECT_EQ(default_max_step_tokens(16), kDefaultStepTokens);
  EXPECT_EQ(default_max_step_tokens(kDefaultStepTokens - kDefaultPromptRoom), kDefaultStepTokens);
  EXPECT_EQ(default_max_step_tokens(200), 200 + kDefaultPromptRoom);
  EXPECT_EQ(default_max_step_tokens(256), 256 + kDefaultPromptRoom);
  for (int slots : {1, 16, 64, 65, 128, 256}) {
    BatchConfig c = make_config(slots, 64);
    c.max_step_tokens = default_max_step_tokens(slots);
    EXPECT_NO_THROW(c.validate());
    EXPECT_GE(c.max_step_tokens - slots, kDefaultPromptRoom);
  }
}

TEST(BatchConfig, CheckFitsComparesWithTheExecutor) {
  FakeExecutor ex(4, 32, kVocab);  // blocks of 16: 2 per slot, 8 in all
  EXPECT_NO_THROW(check_fits(make_config(4, 32), ex));
  EXPECT_NO_THROW(check_fits(make_config(3, 16), ex));
  EXPECT_THROW(check_fits(make_config(5, 32), ex), Error);
  EXPECT_THROW(check_fits(make_config(4, 33), ex), Error);
  BatchConfig other_size = make_config(4, 32);
  other_size.kv_block_size = 8;
  EXPECT_THROW(check_fits(other_size, ex), Error);
  BatchConfig more_blocks = make_config(4, 32);
  more_blocks.kv_blocks = 9;
  EXPECT_THROW(check_fits(more_blocks, ex), Error);
  more_blocks.kv_blocks = 8;
  EXPECT_NO_THROW(check_fits(more_blocks, ex));
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
  // Two slots and a queue of two beyond them: four live requests.
  for (uint64_t id = 2; id <= 4; ++id) EXPECT_TRUE(s.submit(make_req(id, prompt_of(3), 4)).ok());
  EXPECT_EQ(s.queue_depth(), 4) << "nothing is admitted before a plan";
  SubmitResult full = s.submit(make_req(5, prompt_of(3), 4));
  EXPECT_EQ(full.status, SubmitStatus::overloaded);
  EXPECT_FALSE(full.message.empty());
  EXPECT_STREQ(submit_status_name(full.status), "overloaded");
  EXPECT_EQ(s.where(5), BatchedDecodeState::Where::unknown);
  EXPECT_EQ(s.counters().submitted, 4u);
  EXPECT_EQ(s.counters().rejected_overloaded, 1u);
  EXPECT_EQ(s.counters().rejected_invalid, 6u);
  EXPECT_EQ(s.queue_depth(), 4);
}

TEST(BatchSubmit, ABurstOfMaxSlotsIntoAnIdleStateIsNeverRefused) {
  for (int slots : {1, 3, 8}) {
    SCOPED_TRACE("slots " + std::to_string(slots));
    BatchConfig c = make_config(slots, 64);
    c.max_queue = 0;
    BatchedDecodeState s(c);
    FakeExecutor ex(slots, 64, kVocab);
    EventLog log;
    for (int i = 0; i < slots; ++i)
      EXPECT_TRUE(s.submit(make_req(static_cast<uint64_t>(i + 1), prompt_of(5, i), 4)).ok());
    // The (max_slots + max_queue + 1)-th live request is refused.
    EXPECT_EQ(s.submit(make_req(100, prompt_of(5), 4)).status, SubmitStatus::overloaded);
    run_until_idle(s, ex, log.sink());
    for (int i = 0; i < slots; ++i) {
      const auto& l = log.at(static_cast<uint64_t>(i + 1));
      EXPECT_TRUE(l.finished);
      EXPECT_EQ(l.tokens,
                reference_tokens(prompt_of(5, i), static_cast<uint64_t>(i + 1), 4, kVocab));
    }
    EXPECT_FALSE(log.req.count(100));
    expect_clean(log, ex);
  }
}

TEST(BatchSubmit, TheQueueBoundCountsOnlyRequestsBeyondTheSlots) {
  BatchConfig c = make_config(2, 16);
  c.max_queue = 1;
  BatchedDecodeState s(c);
  FakeExecutor ex(2, 16, kVocab);
  EventLog log;
  ASSERT_TRUE(s.submit(make_req(1, prompt_of(3), 2)).ok());
  ASSERT_TRUE(s.submit(make_req(2, prompt_of(3), 6)).ok());
  ASSERT_TRUE(s.submit(make_req(3, prompt_of(3), 6)).ok());
  EXPECT_EQ(s.submit(make_req(4, prompt_of(3), 4)).status, SubmitStatus::overloaded);
  for (const auto& e : execute(s, ex, s.plan())) log(e);  // admits 1 and 2
  EXPECT_EQ(s.queue_depth(), 1);
  EXPECT_EQ(s.submit(make_req(4, prompt_of(3), 4)).status, SubmitStatus::overloaded)
      << "admission moves requests, it does not end them";
  for (const auto& e : execute(s, ex, s.plan())) log(e);  // 1 reaches max_tokens
  ASSERT_TRUE(log.done(1));
  EXPECT_TRUE(s.submit(make_req(4, prompt_of(3), 4)).ok()) << "a finished request makes room";
  // A cancelled queued request makes room at once.
  EXPECT_EQ(s.submit(make_req(5, prompt_of(3), 4)).status, SubmitStatus::overloaded);
  EXPECT_TRUE(s.cancel(4));
  EXPECT_TRUE(s.submit(make_req(5, prompt_of(3), 4)).ok());
  run_until_idle(s, ex, log.sink());
  for (uint64_t id : {1, 2, 3, 5}) EXPECT_TRUE(log.at(id).finished) << id;
  EXPECT_EQ(log.at(4).reason, FinishReason::cancelled);
  expect_clean(log, ex);
}

TEST(BatchState, OneRequestMatchesTheReferenceAndEndsAtMaxTokens) {
  BatchedDecodeState s(make_config(1, 64));
  FakeExecutor ex(1, 64, kVocab);
  EventLog log;
  const auto prompt = prompt_of(5, 11);
  ASSERT_TRUE(s.submit(make_req(7, prompt, 6, 42, 99)).ok());
  const uint64_t steps = run_until_idle(s, ex, log.sink());
  EXPECT_EQ(steps, 6u);  // the prompt and five decodes
  const auto& r = log.at(7);
  EXPECT_EQ(r.ref.owner, 99u);
  EXPECT_EQ(r.tokens, reference_tokens(prompt, 42, 6, kVocab));
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(r.reason, FinishReason::length);
  EXPECT_EQ(r.finished_event.usage.prompt_tokens, 5);
  EXPECT_EQ(r.finished_event.usage.completion_tokens, 6);
  EXPECT_EQ(r.finished_event.usage.cached_tokens, 0);
  EXPECT_EQ(r.finished_event.timings.steps, 6);
  EXPECT_EQ(r.finished_event.slot, 0);
  EXPECT_TRUE(ex.active_slots().empty()) << "the finished slot was released on the executor";
  EXPECT_FALSE(s.has_work());
  EXPECT_EQ(s.kv_blocks_used(), 0);
  expect_clean(log, ex);
}

TEST(BatchState, SeveralJoinsInOneStepInFifoSlotOrder) {
  BatchedDecodeState s(make_config(4, 64));
  FakeExecutor ex(4, 64, kVocab);
  for (uint64_t id : {30, 10, 20})
    ASSERT_TRUE(s.submit(make_req(id, prompt_of(4, static_cast<int32_t>(id)), 3)).ok());
  StepPlan p = s.plan();
  EXPECT_EQ(ids_of(p), (std::vector<uint64_t>{30, 10, 20}));
  ASSERT_EQ(p.seqs.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    const StepSeq& e = p.seqs[static_cast<size_t>(i)];
    EXPECT_EQ(e.slot, i);
    EXPECT_TRUE(e.begin);
    EXPECT_TRUE(e.sample);
    EXPECT_EQ(e.start, 0);
    EXPECT_TRUE(e.cached.empty());
    EXPECT_EQ(e.blocks.size(), 1u);
  }
  EXPECT_EQ(p.seqs[1].tokens, prompt_of(4, 10));
  EXPECT_EQ(p.seqs[1].sampling.seed, 10u);
  EXPECT_EQ(p.sampled(), 3u);
  EXPECT_EQ(s.active_slots(), 3);
  EXPECT_EQ(s.where(10), BatchedDecodeState::Where::running);
  execute(s, ex, p);
  StepPlan d = s.plan();
  ASSERT_EQ(d.seqs.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    const StepSeq& e = d.seqs[static_cast<size_t>(i)];
    EXPECT_EQ(e.slot, i);
    EXPECT_FALSE(e.begin);
    EXPECT_TRUE(e.sample);
    EXPECT_EQ(e.start, 4);
    ASSERT_EQ(e.tokens.size(), 1u);
    EXPECT_EQ(e.tokens[0], s.slot(i).tokens.back());
    EXPECT_EQ(e.blocks, s.slot(i).blocks);
    EXPECT_EQ(s.slot(i).computed, 4);
    EXPECT_EQ(s.slot(i).phase, BatchSlot::Phase::decoding);
    EXPECT_EQ(ex.slot_length(i), 4);
  }
}

TEST(BatchState, DecodesFirstThenPromptChunksWithinTheBudget) {
  BatchConfig c = make_config(5, 64);
  c.max_step_tokens = 7;
  BatchedDecodeState s(c);
  FakeExecutor ex(5, 64, kVocab);
  EventLog log;
  for (uint64_t id = 1; id <= 5; ++id)
    ASSERT_TRUE(s.submit(make_req(id, prompt_of(3, static_cast<int32_t>(id)), 20)).ok());
  using S = Shape;
  const std::vector<std::vector<Shape>> want = {
      // 1 and 2 whole, 3's first token (no sample: its prompt is not done)
      {S{0, 0, 3, true, true}, S{1, 0, 3, true, true}, S{2, 0, 1, true, false}},
      // two decodes, the rest of 3's prompt, then 4 joins
      {S{0, 3, 1, false, true}, S{1, 3, 1, false, true}, S{2, 1, 2, false, true},
       S{3, 0, 3, true, true}},
      // four decodes, 5 joins
      {S{0, 4, 1, false, true}, S{1, 4, 1, false, true}, S{2, 3, 1, false, true},
       S{3, 3, 1, false, true}, S{4, 0, 3, true, true}},
      // five decodes
      {S{0, 5, 1, false, true}, S{1, 5, 1, false, true}, S{2, 4, 1, false, true},
       S{3, 4, 1, false, true}, S{4, 3, 1, false, true}},
  };
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE("step " + std::to_string(i));
    StepPlan p = s.plan();
    EXPECT_EQ(shape_of(p), want[i]);
    EXPECT_LE(tokens_of(p), 7);
    for (const auto& e : execute(s, ex, p)) log(e);
  }
  EXPECT_EQ(s.slot(2).cached_tokens, 0);
  run_until_idle(s, ex, log.sink());
  for (uint64_t id = 1; id <= 5; ++id)
    EXPECT_EQ(log.at(id).tokens,
              reference_tokens(prompt_of(3, static_cast<int32_t>(id)), id, 20, kVocab));
  expect_clean(log, ex);
}

TEST(BatchState, ALongPromptRunsInChunksAndOnlyItsLastChunkSamples) {
  BatchConfig c = make_config(2, 64);
  c.max_step_tokens = 5;
  BatchedDecodeState s(c);
  FakeExecutor ex(2, 64, kVocab);
  EventLog log;
  ASSERT_TRUE(s.submit(make_req(1, prompt_of(3), 20)).ok());
  ASSERT_TRUE(s.submit(make_req(2, prompt_of(17, 5), 3)).ok());
  using S = Shape;
  const std::vector<std::vector<Shape>> want = {
      {S{0, 0, 3, true, true}, S{1, 0, 2, true, false}},
      {S{0, 3, 1, false, true}, S{1, 2, 4, false, false}},
      {S{0, 4, 1, false, true}, S{1, 6, 4, false, false}},
      {S{0, 5, 1, false, true}, S{1, 10, 4, false, false}},
      {S{0, 6, 1, false, true}, S{1, 14, 3, false, true}},
      {S{0, 7, 1, false, true}, S{1, 17, 1, false, true}},
  };
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE("step " + std::to_string(i));
    StepPlan p = s.plan();
    EXPECT_EQ(shape_of(p), want[i]);
    if (p.seqs.size() == 2) {
      EXPECT_EQ(p.seqs[1].blocks.size(), (p.seqs[1].end() + 15u) / 16u);
    }
    for (const auto& e : execute(s, ex, p)) log(e);
    if (i < 4) {
      EXPECT_FALSE(log.req.count(2)) << "no token before the prompt is done";
    }
  }
  EXPECT_EQ(log.at(2).tokens.size(), 2u);
  EXPECT_EQ(log.at(2).finished_event.timings.steps, 0) << "not finished yet";
  run_until_idle(s, ex, log.sink());
  EXPECT_EQ(log.at(2).tokens, reference_tokens(prompt_of(17, 5), 2, 3, kVocab));
  EXPECT_EQ(log.at(2).finished_event.timings.steps, 7);  // 5 chunks, 2 decodes
  EXPECT_EQ(log.at(2).finished_event.usage.prompt_tokens, 17);
  EXPECT_EQ(log.at(1).tokens, reference_tokens(prompt_of(3), 1, 20, kVocab));
  EXPECT_EQ(s.counters().prefill_tokens, 20u);
  expect_clean(log, ex);
}

// A step with no decodes (prompts into an idle server) takes up to idle_step_tokens; once a
// request decodes, the steps beside it keep to max_step_tokens again.
TEST(BatchState, AStepWithoutDecodesTakesTheIdleBudget) {
  BatchConfig c = make_config(3, 64);
  c.max_step_tokens = 5;
  c.idle_step_tokens = 12;
  BatchedDecodeState s(c);
  FakeExecutor ex(3, 64, kVocab);
  EventLog log;
  ASSERT_TRUE(s.submit(make_req(1, prompt_of(9), 4)).ok());
  ASSERT_TRUE(s.submit(make_req(2, prompt_of(10, 3), 4)).ok());
  ASSERT_TRUE(s.submit(make_req(3, prompt_of(6, 5), 4)).ok());
  using S = Shape;
  const std::vector<std::vector<Shape>> want = {
      // nothing decodes: 12 tokens, request 1 whole and 3 of request 2
      {S{0, 0, 9, true, true}, S{1, 0, 3, true, false}},
      // 1 decodes: 5 tokens in all
      {S{0, 9, 1, false, true}, S{1, 3, 4, false, false}},
      {S{0, 10, 1, false, true}, S{1, 7, 3, false, true}, S{2, 0, 1, true, false}},
  };
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE("step " + std::to_string(i));
    StepPlan p = s.plan();
    EXPECT_EQ(shape_of(p), want[i]);
    for (const auto& e : execute(s, ex, p)) log(e);
  }
  run_until_idle(s, ex, log.sink());
  EXPECT_EQ(log.at(1).tokens, reference_tokens(prompt_of(9), 1, 4, kVocab));
  EXPECT_EQ(log.at(2).tokens, reference_tokens(prompt_of(10, 3), 2, 4, kVocab));
  EXPECT_EQ(log.at(3).tokens, reference_tokens(prompt_of(6, 5), 3, 4, kVocab));
  expect_clean(log, ex);
  // Less than max_step_tokens changes nothing; a negative value is refused.
  BatchConfig small = make_config(3, 64);
  small.max_step_tokens = 5;
  small.idle_step_tokens = 2;
  BatchedDecodeState s2(small);
  ASSERT_TRUE(s2.submit(make_req(1, prompt_of(9), 4)).ok());
  EXPECT_EQ(shape_of(s2.plan()), (std::vector<Shape>{S{0, 0, 5, true, false}}));
  small.idle_step_tokens = -1;
  EXPECT_THROW(small.validate(), Error);
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
  EXPECT_EQ(ids_of(d1), (std::vector<uint64_t>{1}));
  auto ev = execute(s, ex, d1);  // request 1 reaches max_tokens = 2
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_TRUE(is_final(ev[1]));
  EXPECT_EQ(s.slot(0).phase, BatchSlot::Phase::free) << "freed in the same apply";
  EXPECT_EQ(s.pending_releases(), std::vector<int>{0});
  EXPECT_TRUE(ex.slot_active(0)) << "the executor still holds it until the plan says release";
  StepPlan p2 = s.plan();
  EXPECT_EQ(p2.release, std::vector<int>{0});
  EXPECT_EQ(ids_of(p2), (std::vector<uint64_t>{2}));
  ASSERT_EQ(p2.seqs.size(), 1u);
  EXPECT_EQ(p2.seqs[0].slot, 0);
  EXPECT_TRUE(p2.seqs[0].begin);
  EXPECT_TRUE(s.pending_releases().empty());
  const size_t releases = ex.releases.size();
  ev = execute(s, ex, p2);  // the fake throws on a begin into a busy slot
  ASSERT_EQ(ex.releases.size(), releases + 1);
  EXPECT_EQ(ex.releases.back().before_step, ex.calls.back().step) << "released before the step";
  EXPECT_EQ(ex.history(0), prompt_of(5, 3));
  EXPECT_EQ(s.counters().failed, 0u);
}

TEST(BatchState, IdlePlanStillCarriesReleases) {
  BatchedDecodeState s(make_config(1, 64));
  FakeExecutor ex(1, 64, kVocab);
  ASSERT_TRUE(s.submit(make_req(1, prompt_of(4), 1)).ok());
  execute(s, ex, s.plan());  // max_tokens = 1: done after the prompt
  EXPECT_TRUE(s.has_work());
  StepPlan p = s.plan();
  EXPECT_TRUE(p.idle());
  EXPECT_EQ(p.step, 0u) << "an idle plan takes no step number";
  EXPECT_EQ(p.release, std::vector<int>{0});
  EXPECT_FALSE(s.in_flight());
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
  int begins = 0;
  for (const auto& c : ex.calls)
    for (bool b : c.begin) begins += b ? 1 : 0;
  EXPECT_EQ(begins, 5);
  expect_clean(log, ex);
}

// Fair across owners: a connection that sent a burst does not queue a quiet one behind it. With
// two slots, owner 7's five requests and then owner 8's one: once owner 7 runs one request, the
// next free slot goes to owner 8 (running none), not to owner 7's second; then FIFO again.
TEST(BatchState, AdmissionIsFairAcrossOwnersAndFifoWithinOne) {
  BatchedDecodeState s(make_config(2, 64));
  FakeExecutor ex(2, 64, kVocab);
  for (uint64_t id = 1; id <= 5; ++id)
    ASSERT_TRUE(s.submit(make_req(id, prompt_of(3), 4, 0, 7)).ok());
  ASSERT_TRUE(s.submit(make_req(6, prompt_of(3), 4, 0, 8)).ok());
  StepPlan p = s.plan();
  EXPECT_EQ(ids_of(p), (std::vector<uint64_t>{1, 6})) << "the second slot goes to owner 8";
  EventLog log;
  for (const SchedEvent& e : execute(s, ex, p)) log(e);
  run_until_idle(s, ex, log.sink());
  std::vector<uint64_t> began;  // the order in which requests got a slot
  for (const auto& e : log.all)
    if (const auto* t = std::get_if<TokenEvent>(&e); t && t->index == 0)
      began.push_back(t->request.id);
  EXPECT_EQ(began, (std::vector<uint64_t>{1, 6, 2, 3, 4, 5}));
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
  EXPECT_EQ(s.counters().failed, 0u) << "the fake throws for a step past the context";
  for (const auto& c : ex.calls)
    for (size_t i = 0; i < c.slots.size(); ++i) EXPECT_LE(c.starts[i] + c.n_tokens[i], 8);
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

TEST(BatchCancel, CancelDuringAnEarlyPromptChunkEndsTheRequest) {
  BatchConfig c = make_config(2, 64);
  c.max_step_tokens = 4;
  BatchedDecodeState s(c);
  FakeExecutor ex(2, 64, kVocab);
  EventLog log;
  ASSERT_TRUE(s.submit(make_req(1, prompt_of(20), 5)).ok());
  ASSERT_TRUE(s.submit(make_req(2, prompt_of(3, 4), 5)).ok());
  for (const auto& e : execute(s, ex, s.plan())) log(e);  // 1's first chunk
  StepPlan p = s.plan();
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_FALSE(p.seqs[0].sample);
  EXPECT_TRUE(s.cancel(1));
  for (const auto& e : execute(s, ex, p)) log(e);
  EXPECT_EQ(log.at(1).reason, FinishReason::cancelled);
  EXPECT_TRUE(log.at(1).tokens.empty());
  EXPECT_EQ(log.at(1).finished_event.usage.prompt_tokens, 20);
  run_until_idle(s, ex, log.sink());
  EXPECT_EQ(log.at(2).tokens, reference_tokens(prompt_of(3, 4), 2, 5, kVocab));
  EXPECT_EQ(s.kv_blocks_used(), 0);
  expect_clean(log, ex);
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

TEST(BatchFailure, AFailedStepFailsEveryRequestInItButNotTheQueue) {
  // A step holds every running request (decodes) and the joiners: all of them fail; requests
  // still waiting for a slot are untouched.
  for (bool after_work : {false, true}) {
    SCOPED_TRACE(after_work ? "after work" : "before work");
    BatchedDecodeState s(make_config(3, 64));
    FakeExecutor ex(3, 64, kVocab);
    ex.fail_after_work = after_work;
    EventLog log;
    ASSERT_TRUE(s.submit(make_req(1, prompt_of(3), 8)).ok());
    for (const auto& e : execute(s, ex, s.plan())) log(e);  // 1 joins alone
    for (const auto& e : execute(s, ex, s.plan())) log(e);  // 1 decodes
    for (uint64_t id : {2, 3, 4, 5})
      ASSERT_TRUE(s.submit(make_req(id, prompt_of(3 + static_cast<int>(id)), 8)).ok());
    ex.fail_on_steps({ex.steps});  // decode of 1, joins of 2 and 3
    StepPlan p = s.plan();
    EXPECT_EQ(ids_of(p), (std::vector<uint64_t>{1, 2, 3}));
    auto sink = log.sink();
    for (const auto& e : execute(s, ex, p)) log(e);
    for (uint64_t id : {1, 2, 3}) {
      ASSERT_TRUE(log.at(id).failed) << id;
      EXPECT_EQ(log.at(id).failed_event.code, ErrorCode::internal);
      EXPECT_NE(log.at(id).failed_event.message.find("injected"), std::string::npos);
    }
    EXPECT_EQ(log.at(1).tokens.size(), 2u);
    EXPECT_TRUE(log.at(2).tokens.empty());
    EXPECT_EQ(s.where(4), BatchedDecodeState::Where::queued);
    EXPECT_EQ(s.pending_releases(), (std::vector<int>{0, 1, 2}));
    EXPECT_EQ(s.kv_blocks_used(), 0);
    run_until_idle(s, ex, sink);
    // 4 and 5 joined slots the failed step had used: released first, or the fake throws.
    for (uint64_t id : {4, 5})
      EXPECT_EQ(log.at(id).tokens,
                reference_tokens(prompt_of(3 + static_cast<int>(id)), id, 8, kVocab));
    EXPECT_EQ(s.counters().failed, 3u);
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
  ex.fail_on_steps({2});  // prompts of 1 and 2, decode, decode <- fails
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
  EXPECT_EQ(s.kv_blocks_used(), 0);
}

TEST(BatchFailure, WrongTokenCountFailsTheStep) {
  struct ShortExecutor : FakeExecutor {
    using FakeExecutor::FakeExecutor;
    std::vector<int32_t> step(std::span<const StepSeq> seqs) override {
      auto t = FakeExecutor::step(seqs);
      if (!t.empty()) t.pop_back();
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
  StepPlan moved = p;
  moved.seqs[0].start = 1;
  EXPECT_THROW(s.apply(moved, one), std::logic_error) << "an entry that is not the slot's";
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
  BatchConfig cfg = make_config(2, 32);
  cfg.max_step_tokens = 5;
  BatchedDecodeState s(cfg);
  FakeExecutor ex(2, 32, kVocab);
  EventLog log;
  for (uint64_t id = 1; id <= 5; ++id)
    ASSERT_TRUE(s.submit(make_req(id, prompt_of(4, static_cast<int32_t>(id)), 6)).ok());
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
  EXPECT_EQ(c.steps, static_cast<uint64_t>(ex.steps));
  // Tokens of the steps that ran, split into prompt chunks and decodes.
  uint64_t ran = 0, decodes = 0;
  for (const auto& call : ex.calls) {
    if (call.threw) continue;
    ran += static_cast<uint64_t>(call.tokens());
    for (size_t i = 0; i < call.slots.size(); ++i)
      decodes += !call.begin[i] && call.n_tokens[i] == 1 && call.starts[i] >= 4 ? 1 : 0;
  }
  EXPECT_EQ(c.prefill_tokens + c.decode_tokens, ran);
  EXPECT_EQ(c.decode_tokens, decodes);
  EXPECT_EQ(c.prefix_lookups, 4u);
  EXPECT_EQ(c.prefix_hit_tokens, 0u);
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
  StepPlan p = s.plan();  // decode of 1 and 3 joining in 2's slot, in flight when it dies
  EXPECT_EQ(p.release, std::vector<int>{1});
  EXPECT_EQ(ids_of(p), (std::vector<uint64_t>{1, 3}));
  for (int slot : p.release) ex.release(slot);
  for (const auto& e : p.events) log(e);
  for (const auto& e : s.abort_all("executor lost")) log(e);
  EXPECT_FALSE(s.in_flight());
  EXPECT_THROW(s.apply(p, std::vector<int32_t>(p.sampled(), 1)), std::logic_error);
  for (uint64_t id = 1; id <= 5; ++id) EXPECT_EQ(log.at(id).finals, 1) << id;
  EXPECT_TRUE(log.at(1).failed);
  EXPECT_EQ(log.at(1).failed_event.message, "executor lost");
  EXPECT_EQ(log.at(1).tokens.size(), 1u);
  EXPECT_EQ(log.at(2).reason, FinishReason::cancelled);
  EXPECT_TRUE(log.at(3).failed);
  EXPECT_EQ(log.at(3).failed_event.slot, 1);
  EXPECT_TRUE(log.at(3).tokens.empty());
  EXPECT_EQ(log.at(4).reason, FinishReason::cancelled);
  EXPECT_TRUE(log.at(5).failed);
  EXPECT_EQ(log.at(5).failed_event.slot, -1) << "still queued";
  EXPECT_EQ(s.active_slots(), 0);
  EXPECT_EQ(s.queue_depth(), 0);
  EXPECT_EQ(s.kv_blocks_used(), 0);
  EXPECT_TRUE(log.violations.empty()) << log.violations.front();
  StepPlan after = s.plan();  // the state goes on: releases first, then new work
  EXPECT_EQ(after.release, (std::vector<int>{0, 1}));
  EXPECT_TRUE(after.idle());
  for (int slot : after.release) ex.release(slot);
  EXPECT_TRUE(ex.active_slots().empty());
  ASSERT_TRUE(s.submit(make_req(1, prompt_of(3), 2)).ok());
  EventLog log2;
  run_until_idle(s, ex, log2.sink());
  EXPECT_EQ(log2.at(1).tokens, reference_tokens(prompt_of(3), 1, 2, kVocab));
  const auto& c = s.counters();
  EXPECT_EQ(c.submitted, c.finished + c.cancelled + c.failed);
  expect_clean(log2, ex);
}
