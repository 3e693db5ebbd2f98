// The step function (sched/step.hpp), without actors: execute_step releases the step's slots
// first (idle steps too), runs the entries, and turns every executor failure (an exception of any
// type, a wrong token count) into StepResult::error; apply_step_result hands tokens to
// BatchedDecodeState::apply and errors (or tokens apply refuses) to fail_step.
#include "sched/step.hpp"

#include <gtest/gtest.h>

#include <string>
#include <variant>
#include <vector>

#include "tests/sched/fake_executor.hpp"

using namespace rz;
using rz_test::FakeExecutor;

namespace {

constexpr int kVocab = 100;

StepSeq begin_seq(int slot, std::vector<int32_t> prompt, int32_t block, bool sample = true) {
  StepSeq s;
  s.slot = slot;
  s.begin = true;
  s.sampling.seed = 3;
  s.tokens = std::move(prompt);
  s.blocks = {block};
  s.sample = sample;
  return s;
}

ExecutorStep begin_step(uint64_t n, int slot, std::vector<int32_t> prompt, int32_t block = 0) {
  ExecutorStep g;
  g.step = n;
  g.seqs.push_back(begin_seq(slot, std::move(prompt), block));
  return g;
}

// A fake executor that misbehaves in ways a real one must not: one token too many, or a throw
// of something that is not a std::exception.
class MisbehavingExecutor : public FakeExecutor {
 public:
  enum class Mode { extra_token, throw_int } mode;
  explicit MisbehavingExecutor(Mode m) : FakeExecutor(2, 16, kVocab), mode(m) {}
  std::vector<int32_t> step(std::span<const StepSeq> seqs) override {
    if (mode == Mode::throw_int) throw 42;
    std::vector<int32_t> t = FakeExecutor::step(seqs);
    t.push_back(0);
    return t;
  }
};

}  // namespace

TEST(ExecuteStep, RunsEntriesAndReleasesFirst) {
  FakeExecutor ex(2, 16, kVocab, 4, 8);
  StepResult r = execute_step(ex, begin_step(1, 0, {1, 2, 3}));
  ASSERT_TRUE(r.ok()) << r.error;
  ASSERT_EQ(r.tokens.size(), 1u);
  EXPECT_EQ(r.step, 1u);
  EXPECT_EQ(r.tokens[0], FakeExecutor::next_token(3, std::vector<int32_t>{1, 2, 3}, kVocab));

  // A decode of slot 0 and a prompt chunk that does not sample, in one step: one token back.
  ExecutorStep d;
  d.step = 2;
  StepSeq dec;
  dec.slot = 0;
  dec.start = 3;
  dec.tokens = {r.tokens[0]};
  dec.blocks = {0};
  dec.sample = true;
  d.seqs.push_back(dec);
  d.seqs.push_back(begin_seq(1, {7, 8}, 1, false));
  EXPECT_EQ(d.sampled(), 1u);
  StepResult r2 = execute_step(ex, d);
  ASSERT_TRUE(r2.ok()) << r2.error;
  EXPECT_EQ(r2.step, 2u);
  ASSERT_EQ(r2.tokens.size(), 1u);
  EXPECT_EQ(r2.tokens[0],
            FakeExecutor::next_token(3, std::vector<int32_t>{1, 2, 3, r.tokens[0]}, kVocab));

  // Slot 0 is busy: a new sequence in it works only when the same step releases it first.
  StepResult busy = execute_step(ex, begin_step(3, 0, {4}, 2));
  EXPECT_FALSE(busy.ok());
  EXPECT_NE(busy.error.find("busy"), std::string::npos) << busy.error;
  EXPECT_TRUE(busy.tokens.empty());
  ExecutorStep again = begin_step(4, 0, {4}, 2);
  again.release = {0};
  StepResult ok = execute_step(ex, again);
  EXPECT_TRUE(ok.ok()) << ok.error;
  ASSERT_FALSE(ex.releases.empty());
  EXPECT_EQ(ex.releases.back().slot, 0);
  EXPECT_EQ(ex.releases.back().before_step, ex.calls.back().step);
  EXPECT_FALSE(ex.calls.back().threw);
  EXPECT_TRUE(ex.kv_clean()) << ex.kv_report();
}

TEST(ExecuteStep, AStepThatSamplesNothingIsOk) {
  FakeExecutor ex(1, 16, kVocab, 4, 4);
  ExecutorStep g;
  g.step = 1;
  g.seqs.push_back(begin_seq(0, {1, 2, 3}, 0, false));
  StepResult r = execute_step(ex, g);
  EXPECT_TRUE(r.ok()) << r.error;
  EXPECT_TRUE(r.tokens.empty());
  EXPECT_EQ(ex.slot_length(0), 3);
}

TEST(ExecuteStep, IdleStepOnlyReleases) {
  FakeExecutor ex(2, 16, kVocab);
  ASSERT_TRUE(execute_step(ex, begin_step(1, 1, {7})).ok());
  ASSERT_TRUE(ex.slot_active(1));
  const int steps = ex.steps;
  ExecutorStep idle;
  idle.step = 9;
  idle.release = {1};
  StepResult r = execute_step(ex, idle);
  EXPECT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.step, 9u);
  EXPECT_TRUE(r.tokens.empty());
  EXPECT_EQ(r.seconds, 0.0);
  EXPECT_FALSE(ex.slot_active(1));
  EXPECT_EQ(ex.steps, steps) << "an idle step ran the executor";
}

TEST(ExecuteStep, ABadReleaseDoesNotStopTheOthers) {
  FakeExecutor ex(2, 16, kVocab);
  ASSERT_TRUE(execute_step(ex, begin_step(1, 0, {7})).ok());
  ExecutorStep s = begin_step(2, 0, {8});
  s.release = {5, 0};  // slot 5 is out of range: the fake executor throws for it
  StepResult r = execute_step(ex, s);
  EXPECT_TRUE(r.ok()) << r.error;
}

TEST(ExecuteStep, ExecutorExceptionBecomesError) {
  FakeExecutor ex(1, 16, kVocab);
  ex.fail_on_steps({0});
  StepResult r = execute_step(ex, begin_step(1, 0, {1}));
  EXPECT_NE(r.error.find("injected failure"), std::string::npos) << r.error;
  EXPECT_TRUE(r.tokens.empty());
  EXPECT_EQ(r.step, 1u);
  // A refused step: check_step's message.
  StepResult bad = execute_step(ex, begin_step(2, 3, {1}));
  EXPECT_NE(bad.error.find("slot 3 out of range"), std::string::npos) << bad.error;
}

TEST(ExecuteStep, WrongTokenCountBecomesError) {
  MisbehavingExecutor ex(MisbehavingExecutor::Mode::extra_token);
  StepResult r = execute_step(ex, begin_step(1, 0, {1}));
  EXPECT_EQ(r.error, "the executor returned 2 tokens for 1 sampling entries");
  EXPECT_TRUE(r.tokens.empty());
}

TEST(ExecuteStep, UnknownExceptionBecomesError) {
  MisbehavingExecutor ex(MisbehavingExecutor::Mode::throw_int);
  StepResult r = execute_step(ex, begin_step(1, 0, {1}));
  EXPECT_EQ(r.error, "the executor failed with an unknown exception");
  EXPECT_TRUE(r.tokens.empty());
}

TEST(ApplyStepResult, AppliesTokensOrFailsTheStep) {
  BatchConfig cfg;
  cfg.max_slots = 2;
  cfg.max_context = 16;
  cfg.n_vocab = kVocab;
  BatchedDecodeState state(cfg);
  for (uint64_t id : {1, 2}) {
    BatchRequest req;
    req.ref = {id, 10 + id};
    req.prompt = {1, 2, static_cast<int32_t>(id)};
    req.max_tokens = 4;
    ASSERT_TRUE(state.submit(req).ok());
  }
  FakeExecutor ex(2, 16, kVocab);

  // Success: one TokenEvent per request, with the executor's tokens.
  StepPlan p = state.plan();
  ASSERT_EQ(p.size(), 2u);
  StepResult r = execute_step(ex, p);
  ASSERT_TRUE(r.ok()) << r.error;
  std::vector<SchedEvent> evs = apply_step_result(state, p, r);
  ASSERT_EQ(evs.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const auto* t = std::get_if<TokenEvent>(&evs[i]);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->token, r.tokens[i]);
  }

  // A result apply() refuses (one token for two sampling entries) fails the step instead.
  p = state.plan();
  ASSERT_EQ(p.sampled(), 2u);
  StepResult short_result;
  short_result.step = p.step;
  short_result.tokens = {1};
  evs = apply_step_result(state, p, short_result);
  ASSERT_EQ(evs.size(), 2u);
  for (const SchedEvent& e : evs) {
    const auto* f = std::get_if<FailedEvent>(&e);
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(f->code, ErrorCode::internal);
    EXPECT_FALSE(f->message.empty());
  }
  EXPECT_EQ(state.active_slots(), 0);

  // An error fails every request of the step with that message.
  BatchRequest req;
  req.ref = {3, 13};
  req.prompt = {4};
  ASSERT_TRUE(state.submit(req).ok());
  p = state.plan();
  ASSERT_EQ(p.size(), 1u);
  StepResult failed;
  failed.step = p.step;
  failed.error = "device lost";
  evs = apply_step_result(state, p, failed);
  ASSERT_EQ(evs.size(), 1u);
  const auto* f = std::get_if<FailedEvent>(&evs[0]);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->message, "device lost");
  EXPECT_EQ(f->request.id, 3u);
}
