// A request's time bound (actors/session.cpp: EngineConfig::request_timeout_ms and the request's
// own timeout_ms), through the engine's public API over the fake executor behind a StepGate, so
// that the bound runs out at a known point: before the first token (an error of code timeout),
// after some tokens (done with finish_reason timeout and exactly the tokens sent), the smaller
// of the two bounds winning, several choices, and the slot freed for others either way.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>

#include "tests/actors/engine_harness.hpp"
#include "tests/actors/engine_test_support.hpp"
#include "tests/sched/fake_executor.hpp"

using namespace std::chrono_literals;
using rz::engine::EngineConfig;
using rz::engine::Session;
using rz::proto::ErrorCode;
using rz::proto::FinishReason;
using rz_test::expect_well_formed;
using rz_test::FakeExecutor;
using rz_test::gen;
using rz_test::Harness;
using rz_test::kVocab;
using rz_test::RecordingSink;

namespace {

rz::proto::GenerateRequest timed(std::string id, int max_tokens, uint32_t timeout_ms) {
  rz::proto::GenerateRequest r = gen(std::move(id), "Hello", max_tokens);
  r.timeout_ms = timeout_ms;
  return r;
}

}  // namespace

TEST(SessionTimeout, BeforeTheFirstTokenIsAnErrorAndFreesTheSlot) {
  REQUIRE_MODEL();
  EngineConfig ec;
  ec.max_slots = 1;
  Harness h(std::make_unique<FakeExecutor>(1, 256, kVocab), ec, true);  // no step runs yet
  auto sink = std::make_shared<RecordingSink>();
  Session s = h.engine->open_session(sink);
  s.generate(timed("a", 50, 150));
  ASSERT_TRUE(sink->wait_final("a"));
  expect_well_formed(*sink, "a");
  auto e = sink->error_of("a");
  ASSERT_TRUE(e) << "a timeout before the first token is an error";
  EXPECT_EQ(e->code, ErrorCode::timeout);
  EXPECT_NE(e->message.find("150 ms"), std::string::npos) << e->message;
  EXPECT_FALSE(e->choice.has_value());

  // The slot it held (its prompt was planned) is freed; the id may be used again at once, and
  // a request without a bound runs to its end.
  h.gate->open();
  ASSERT_TRUE(h.wait_idle());
  s.generate(gen("a", "Hello", 5));
  ASSERT_TRUE(sink->wait(
      [](const RecordingSink::Frames& fs) { return RecordingSink::count_final(fs, "a") == 2; }));
  const auto frames = sink->of("a");
  auto d = std::get_if<rz::proto::DoneFrame>(&frames.back());
  ASSERT_TRUE(d);
  EXPECT_EQ(d->finish_reason, FinishReason::length);
  EXPECT_EQ(d->usage.completion_tokens, 5u);
  const auto m = h.engine->metrics();
  EXPECT_EQ(m.requests_timed_out, 1u);
  EXPECT_EQ(m.requests_finished, 1u);
  EXPECT_EQ(m.requests_failed, 0u);
}

TEST(SessionTimeout, AfterSomeTokensEndsWithExactlyTheTokensSent) {
  REQUIRE_MODEL();
  EngineConfig ec;
  ec.max_slots = 2;
  Harness h(std::make_unique<FakeExecutor>(2, 256, kVocab), ec, true);
  auto sink = std::make_shared<RecordingSink>(), other = std::make_shared<RecordingSink>();
  Session s = h.engine->open_session(sink);
  Session o = h.engine->open_session(other);
  s.generate(timed("t", 200, 2000));
  h.gate->allow(3);  // its prompt and two decode steps: three tokens, then the gate holds
  ASSERT_TRUE(h.gate->wait_blocked_after(3));
  ASSERT_TRUE(sink->wait_tokens("t", 3));
  ASSERT_TRUE(sink->wait_final("t")) << "the bound ends it while no step runs";
  expect_well_formed(*sink, "t");
  auto d = sink->done_of("t");
  ASSERT_TRUE(d);
  EXPECT_EQ(d->finish_reason, FinishReason::timeout);
  EXPECT_EQ(d->usage.completion_tokens, 3u);
  EXPECT_EQ(RecordingSink::count_tokens(sink->frames(), "t"), 3);

  // Another session's request is untouched and runs on; the timed-out one's slot comes back.
  o.generate(gen("b", "Hello", 8));
  h.gate->open();
  ASSERT_TRUE(other->wait_final("b"));
  expect_well_formed(*other, "b");
  EXPECT_EQ(other->done_of("b")->finish_reason, FinishReason::length);
  ASSERT_TRUE(h.wait_idle());
  EXPECT_EQ(RecordingSink::count_final(sink->frames(), "t"), 1) << "nothing after its done";
  EXPECT_EQ(h.engine->metrics().requests_timed_out, 1u);
}

TEST(SessionTimeout, TheSmallerOfTheServersAndTheRequestsBoundWins) {
  REQUIRE_MODEL();
  for (const auto& [server_ms, request_ms] :
       {std::pair<uint32_t, uint32_t>{100, 0}, {100, 600000}, {600000, 100}}) {
    EngineConfig ec;
    ec.max_slots = 1;
    ec.request_timeout_ms = server_ms;
    Harness h(std::make_unique<FakeExecutor>(1, 256, kVocab), ec, true);  // steps never run
    auto sink = std::make_shared<RecordingSink>();
    Session s = h.engine->open_session(sink);
    s.generate(timed("a", 10, request_ms));
    ASSERT_TRUE(sink->wait_final("a")) << server_ms << " / " << request_ms;
    auto e = sink->error_of("a");
    ASSERT_TRUE(e);
    EXPECT_EQ(e->code, ErrorCode::timeout);
    EXPECT_NE(e->message.find("100 ms"), std::string::npos) << e->message;
  }
}

TEST(SessionTimeout, EachChoiceEndsOnItsOwn) {
  REQUIRE_MODEL();
  EngineConfig ec;
  ec.max_slots = 1;  // the second choice waits in the queue
  Harness h(std::make_unique<FakeExecutor>(1, 256, kVocab), ec, true);
  auto sink = std::make_shared<RecordingSink>();
  Session s = h.engine->open_session(sink);
  auto r = timed("n", 100, 1500);
  r.n = 2;
  s.generate(r);
  h.gate->allow(2);  // choice 0 gets two tokens; choice 1 has none when the bound runs out
  ASSERT_TRUE(h.gate->wait_blocked_after(2));
  ASSERT_TRUE(sink->wait(
      [](const RecordingSink::Frames& fs) { return RecordingSink::count_final(fs, "n") == 2; }));
  bool done0 = false, error1 = false;
  for (const auto& f : sink->of("n")) {
    if (const auto* d = std::get_if<rz::proto::DoneFrame>(&f)) {
      EXPECT_EQ(d->choice, std::optional<int>(0));
      EXPECT_EQ(d->finish_reason, FinishReason::timeout);
      EXPECT_EQ(d->usage.completion_tokens, 2u);
      done0 = true;
    }
    if (const auto* e = std::get_if<rz::proto::ErrorFrame>(&f)) {
      EXPECT_EQ(e->choice, std::optional<int>(1));
      EXPECT_EQ(e->code, ErrorCode::timeout);
      error1 = true;
    }
  }
  EXPECT_TRUE(done0 && error1);
  h.gate->open();
  ASSERT_TRUE(h.wait_idle());
  EXPECT_EQ(h.engine->metrics().requests_timed_out, 2u);
}
