// The actor engine through its public API only (actors/engine.hpp), over the deterministic fake
// executor (tests/sched/fake_executor.hpp) and the default model's real tokenizer: several
// sessions with multiplexed requests, the protocol's error rules, cancellation at step
// boundaries (driven one step at a time through a StepGate), lost sinks, slow consumers, a
// failing step, stop strings, chat templates and shutdown. Every request must end with exactly
// one done or error frame, with contiguous token indexes before it.
#include "actors/engine.hpp"

#include <gtest/gtest.h>

#include <caf/all.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "formats/gguf.hpp"
#include "tests/actors/engine_harness.hpp"
#include "tests/actors/engine_test_support.hpp"
#include "tests/sched/fake_executor.hpp"
#include "tokenizer/chat_template.hpp"

using namespace std::chrono_literals;
using rz::engine::Engine;
using rz::engine::EngineConfig;
using rz::engine::Session;
using rz::proto::DoneFrame;
using rz::proto::ErrorCode;
using rz::proto::ErrorFrame;
using rz::proto::FinishReason;
using rz::proto::GenerateRequest;
using rz::proto::TokenFrame;
using rz_test::FakeExecutor;
using rz_test::RecordingSink;
using rz_test::StepGate;

namespace {

using rz_test::expect_well_formed;
using rz_test::gen;
using rz_test::Harness;
using rz_test::kVocab;

// What the fake executor generates for this prompt and seed.
std::vector<int32_t> fake_tokens(std::vector<int32_t> history, uint64_t seed, int n) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(FakeExecutor::next_token(seed, history, kVocab));
    history.push_back(out.back());
  }
  return out;
}

}  // namespace

TEST(Engine, StartRefusesWhatTheExecutorCannotHold) {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  EngineConfig ec;
  ec.max_slots = 3;
  try {
    Engine::start(sys, std::make_unique<FakeExecutor>(2, 64, kVocab), rz_test::default_tokenizer(),
                  std::nullopt, ec);
    FAIL() << "no throw";
  } catch (const rz::Error& e) {
    EXPECT_NE(std::string(e.what()).find("max_slots 3 exceeds the executor's 2"), std::string::npos)
        << e.what();
  }
}

TEST(Engine, SeveralSessionsMultiplexRequests) {
  REQUIRE_MODEL();
  EngineConfig ec;
  ec.max_slots = 4;
  Harness h(std::make_unique<FakeExecutor>(4, 256, kVocab), ec, false);
  const std::vector<std::string> prompts = {"Once upon a time", "The capital of France is",
                                            "1, 2, 3,"};
  std::vector<std::shared_ptr<RecordingSink>> sinks;
  std::vector<Session> sessions;
  for (int s = 0; s < 3; ++s) {
    sinks.push_back(std::make_shared<RecordingSink>());
    sessions.push_back(h.engine->open_session(sinks.back()));
  }
  // The same ids in every session: ids are per connection.
  for (int s = 0; s < 3; ++s)
    for (int r = 0; r < 3; ++r)
      sessions[s].generate(gen("r" + std::to_string(r), prompts[r], 5 + 3 * r + s, 10 * s + r));
  uint64_t total = 0;
  for (int s = 0; s < 3; ++s)
    for (int r = 0; r < 3; ++r) {
      const std::string id = "r" + std::to_string(r);
      ASSERT_TRUE(sinks[s]->wait_final(id)) << s << " " << id;
      expect_well_formed(*sinks[s], id);
      auto d = sinks[s]->done_of(id);
      ASSERT_TRUE(d) << (sinks[s]->error_of(id) ? sinks[s]->error_of(id)->message : "");
      EXPECT_EQ(d->finish_reason, FinishReason::length);
      const auto prompt = h.tok->encode(prompts[r], true, true);
      EXPECT_EQ(d->usage.prompt_tokens, prompt.size());
      EXPECT_EQ(sinks[s]->tokens_of(id), fake_tokens(prompt, 10 * s + r, 5 + 3 * r + s))
          << "session " << s << " request " << id;
      total += d->usage.completion_tokens;
    }
  ASSERT_TRUE(h.wait_idle());
  const auto m = h.engine->metrics();
  EXPECT_EQ(m.requests_started, 9u);
  EXPECT_EQ(m.requests_finished, 9u);
  EXPECT_EQ(m.requests_cancelled + m.requests_failed + m.requests_rejected, 0u);
  EXPECT_EQ(m.generated_tokens, total);
  EXPECT_EQ(m.sessions, 3);
  EXPECT_EQ(m.max_slots, 4);
  EXPECT_EQ(m.ttft_seconds.count, 9u);
  EXPECT_GT(m.step_seconds.count, 0u);
}

TEST(Engine, DuplicateAndUnknownIds) {
  REQUIRE_MODEL();
  Harness h(std::make_unique<FakeExecutor>(2, 128, kVocab), EngineConfig{}, true);
  auto sink = std::make_shared<RecordingSink>();
  Session s = h.engine->open_session(sink);
  s.generate(gen("a", "Hello", 4));
  ASSERT_TRUE(h.gate->wait_blocked_after(0));
  s.generate(gen("a", "Something else", 4));
  s.cancel("nope");
  s.ping();
  ASSERT_TRUE(sink->wait_pongs(1));
  auto fa = sink->of("a");
  ASSERT_EQ(fa.size(), 1u);
  const auto* dup = std::get_if<ErrorFrame>(&fa[0]);
  ASSERT_TRUE(dup);
  EXPECT_EQ(dup->code, ErrorCode::duplicate_id);
  auto nope = sink->error_of("nope");
  ASSERT_TRUE(nope);
  EXPECT_EQ(nope->code, ErrorCode::unknown_id);

  h.gate->open();  // the first "a" goes on
  ASSERT_TRUE(sink->wait([](const RecordingSink::Frames& fs) {
    for (const auto& f : fs)
      if (std::holds_alternative<DoneFrame>(f)) return true;
    return false;
  }));
  fa = sink->of("a");
  fa.erase(fa.begin());
  expect_well_formed(fa, "a");
  EXPECT_EQ(std::get<DoneFrame>(fa.back()).usage.completion_tokens, 4u);
  // Ended: a cancel now is unknown_id, and the id may be used again.
  s.cancel("a");
  s.ping();
  ASSERT_TRUE(sink->wait_pongs(2));
  EXPECT_EQ(RecordingSink::count_final(sink->of("a"), "a"), 3);
  s.generate(gen("a", "Hello", 2));
  ASSERT_TRUE(sink->wait([](const RecordingSink::Frames& fs) {
    int n = 0;
    for (const auto& f : fs) n += std::holds_alternative<DoneFrame>(f);
    return n == 2;
  }));
}

TEST(Engine, QueueFullIsOverloadedWhileAStepIsInFlight) {
  REQUIRE_MODEL();
  EngineConfig ec;
  ec.max_slots = 1;
  ec.max_queue = 1;
  Harness h(std::make_unique<FakeExecutor>(1, 128, kVocab), ec, true);
  auto sink = std::make_shared<RecordingSink>();
  Session s = h.engine->open_session(sink);
  s.generate(gen("a", "Hello", 3));  // admitted: its prefill waits at the gate
  ASSERT_TRUE(h.gate->wait_blocked_after(0));
  s.generate(gen("b", "Hello", 3));  // queued
  s.generate(gen("c", "Hello", 3));  // queue full
  ASSERT_TRUE(sink->wait_final("c"));
  auto c = sink->error_of("c");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->code, ErrorCode::overloaded);
  EXPECT_FALSE(sink->final_of("a"));
  EXPECT_FALSE(sink->final_of("b"));
  EXPECT_EQ(h.gate->taken(), 0) << "the batcher answered while its step was blocked";
  h.gate->open();
  for (const char* id : {"a", "b"}) {
    ASSERT_TRUE(sink->wait_final(id));
    expect_well_formed(*sink, id);
    EXPECT_EQ(sink->done_of(id)->finish_reason, FinishReason::length);
  }
  const auto m = h.engine->metrics();
  EXPECT_EQ(m.requests_rejected, 1u);
  EXPECT_EQ(m.requests_started, 2u);
}

TEST(Engine, PerSessionLimitIsOverloaded) {
  REQUIRE_MODEL();
  EngineConfig ec;
  ec.max_inflight_per_session = 2;
  Harness h(std::make_unique<FakeExecutor>(4, 128, kVocab), ec, true);
  auto s1 = std::make_shared<RecordingSink>(), s2 = std::make_shared<RecordingSink>();
  Session a = h.engine->open_session(s1), b = h.engine->open_session(s2);
  a.generate(gen("x", "Hi", 3));
  a.generate(gen("y", "Hi", 3));
  a.generate(gen("z", "Hi", 3));
  b.generate(gen("z", "Hi", 3));
  ASSERT_TRUE(s1->wait_final("z"));
  EXPECT_EQ(s1->error_of("z")->code, ErrorCode::overloaded);
  h.gate->open();
  for (const char* id : {"x", "y"}) {
    ASSERT_TRUE(s1->wait_final(id));
    expect_well_formed(*s1, id);
  }
  ASSERT_TRUE(s2->wait_final("z"));
  expect_well_formed(*s2, "z");
  EXPECT_EQ(s2->done_of("z")->finish_reason, FinishReason::length);
}

TEST(Engine, ContextLengthAndMaxTokens) {
  REQUIRE_MODEL();
  Harness h(std::make_unique<FakeExecutor>(2, 32, kVocab), EngineConfig{}, false);
  EXPECT_EQ(h.engine->max_context(), 32);
  EXPECT_LE(h.engine->config().limits.max_tokens, 31);
  auto sink = std::make_shared<RecordingSink>();
  Session s = h.engine->open_session(sink);
  const std::string prompt = "The quick brown fox jumps";
  const int n = static_cast<int>(h.tok->encode(prompt, true, true).size());
  ASSERT_GE(n, 3);
  s.generate(gen("fits", prompt, 32 - n));
  s.generate(gen("over", prompt, 33 - n));
  s.generate(gen("zero", prompt, 0));
  for (const char* id : {"fits", "over", "zero"}) ASSERT_TRUE(sink->wait_final(id)) << id;
  EXPECT_EQ(sink->error_of("over")->code, ErrorCode::context_length_exceeded);
  EXPECT_EQ(sink->error_of("zero")->code, ErrorCode::bad_value);
  expect_well_formed(*sink, "fits");
  EXPECT_EQ(sink->done_of("fits")->usage.completion_tokens, static_cast<uint64_t>(32 - n));
}

// The slot is free once the steps in flight at the cancel have run: the one at the gate and the
// one planned ahead behind it (a's next decode, its token dropped).
TEST(Engine, CancelMidStreamFreesTheSlotOnceTheStepsInFlightEnd) {
  REQUIRE_MODEL();
  EngineConfig ec;
  ec.max_slots = 1;
  Harness h(std::make_unique<FakeExecutor>(1, 256, kVocab), ec, true);
  auto sink = std::make_shared<RecordingSink>();
  Session s = h.engine->open_session(sink);
  s.generate(gen("a", "Hello", 100));
  s.generate(gen("b", "Hello", 3, 2));         // waits for the only slot
  h.gate->allow(3);                            // a: prefill + 2 decodes
  ASSERT_TRUE(h.gate->wait_blocked_after(3));  // a's 4th step waits at the gate
  s.cancel("a");
  s.ping();  // once the pong is here, the cancel is in the batcher's mailbox
  ASSERT_TRUE(sink->wait_pongs(1));
  h.gate->allow(1);  // the step in flight ends: a's cancel takes effect at this boundary
  ASSERT_TRUE(sink->wait_final("a"));
  expect_well_formed(*sink, "a");
  auto da = sink->done_of("a");
  ASSERT_TRUE(da);
  EXPECT_EQ(da->finish_reason, FinishReason::cancelled);
  EXPECT_EQ(da->usage.completion_tokens, 3u) << "the token of the step in flight is dropped";
  // Then the step planned ahead (a's skipped decode), then b's prefill in the freed slot.
  ASSERT_TRUE(h.gate->wait_blocked_after(4));
  h.gate->allow(1);
  h.gate->open();
  ASSERT_TRUE(sink->wait_final("b"));
  expect_well_formed(*sink, "b");
  EXPECT_EQ(sink->done_of("b")->finish_reason, FinishReason::length);
  EXPECT_EQ(sink->done_of("a")->usage.completion_tokens, 3u) << "the skipped decode's token too";
  EXPECT_EQ(h.gate->taken(), 4 + 1 + 3) << "b: prefill + 2 decodes after the steps in flight";
  const auto m = h.engine->metrics();
  EXPECT_EQ(m.requests_cancelled, 1u);
  EXPECT_EQ(m.requests_finished, 1u);
}

TEST(Engine, SinkDestroyedMidStreamCancels) {
  REQUIRE_MODEL();
  EngineConfig ec;
  ec.max_slots = 1;
  Harness h(std::make_unique<FakeExecutor>(1, 256, kVocab), ec, true);
  auto gone = std::make_shared<RecordingSink>();
  Session s1 = h.engine->open_session(gone);
  s1.generate(gen("a", "Hello", 200));
  h.gate->allow(2);
  ASSERT_TRUE(h.gate->wait_blocked_after(2));
  gone.reset();      // the connection's sink is gone
  h.gate->allow(1);  // step 3's events find no sink: the session cancels and stops
  for (int i = 0; i < 2000 && h.engine->metrics().sessions != 0; ++i)
    std::this_thread::sleep_for(5ms);
  EXPECT_EQ(h.engine->metrics().sessions, 0);
  auto sink = std::make_shared<RecordingSink>();
  Session s2 = h.engine->open_session(sink);
  s2.generate(gen("b", "Hello", 3));
  h.gate->open();
  ASSERT_TRUE(sink->wait_final("b")) << "a's slot was freed";
  expect_well_formed(*sink, "b");
  ASSERT_TRUE(h.wait_idle());
  // a took at most the steps in flight after the cancel: one more when planned ahead.
  EXPECT_LE(h.gate->taken(), 4 + 4);
  EXPECT_EQ(h.engine->metrics().requests_cancelled, 1u);
}

TEST(Engine, SlowConsumerEndsEveryLiveRequest) {
  REQUIRE_MODEL();
  EngineConfig ec;
  ec.max_slots = 2;
  Harness h(std::make_unique<FakeExecutor>(2, 256, kVocab), ec, true);
  auto sink = std::make_shared<RecordingSink>(), other = std::make_shared<RecordingSink>();
  Session s = h.engine->open_session(sink), o = h.engine->open_session(other);
  s.generate(gen("a", "Hello", 100));
  s.generate(gen("b", "World", 100));
  h.gate->allow(4);
  ASSERT_TRUE(h.gate->wait_blocked_after(4));
  s.slow_consumer();
  s.ping();
  ASSERT_TRUE(sink->wait_pongs(1));
  for (const char* id : {"a", "b"}) {
    auto e = sink->error_of(id);
    ASSERT_TRUE(e) << id;
    EXPECT_EQ(e->code, ErrorCode::slow_consumer);
  }
  o.generate(gen("c", "Hello", 3));
  o.generate(gen("d", "Hello", 3));
  h.gate->open();
  for (const char* id : {"c", "d"}) {
    ASSERT_TRUE(other->wait_final(id));
    expect_well_formed(*other, id);
  }
  // The session stays open and nothing more comes for a or b.
  s.generate(gen("e", "Hi", 2));
  ASSERT_TRUE(sink->wait_final("e"));
  for (const char* id : {"a", "b", "e"}) expect_well_formed(*sink, id);
  EXPECT_EQ(h.engine->metrics().requests_failed, 2u);
}

TEST(Engine, FailingStepFailsOnlyItsRequests) {
  REQUIRE_MODEL();
  auto tok = rz_test::default_tokenizer();
  const std::string pa = "Hello", pb = "A much longer prompt with many more tokens in it";
  const auto na = tok->encode(pa, true, true).size(), nb = tok->encode(pb, true, true).size();
  ASSERT_NE(na, nb);
  auto fake = std::make_unique<FakeExecutor>(2, 256, kVocab);
  fake->fail_if = [nb](const FakeExecutor::Call& c) {  // the step that begins b's prompt
    for (size_t i = 0; i < c.slots.size(); ++i)
      if (c.begin[i] && c.n_tokens[i] == static_cast<int>(nb)) return true;
    return false;
  };
  EngineConfig ec;
  ec.max_slots = 2;
  Harness h(std::move(fake), ec, true);
  auto sink = std::make_shared<RecordingSink>();
  Session s = h.engine->open_session(sink);
  s.generate(gen("a", pa, 20, 5));
  h.gate->allow(1);
  ASSERT_TRUE(h.gate->wait_blocked_after(1));  // a prefilled, its first decode waits
  s.generate(gen("b", pb, 20));
  s.generate(gen("c", pa, 6, 9));  // waits: both slots are taken once b joins
  s.ping();
  ASSERT_TRUE(sink->wait_pongs(1));
  h.gate->open();
  for (const char* id : {"a", "b", "c"}) ASSERT_TRUE(sink->wait_final(id)) << id;
  // b's first chunk shares its step with a's decode: the failure ends both, and only them.
  for (const char* id : {"a", "b"}) {
    auto e = sink->error_of(id);
    ASSERT_TRUE(e) << id;
    EXPECT_EQ(e->code, ErrorCode::internal);
    EXPECT_NE(e->message.find("injected failure"), std::string::npos) << e->message;
  }
  const auto ta = sink->tokens_of("a");
  const auto ref_a = fake_tokens(tok->encode(pa, true, true), 5, 20);
  ASSERT_LE(ta.size(), ref_a.size());
  EXPECT_TRUE(std::equal(ta.begin(), ta.end(), ref_a.begin())) << "a's tokens before the failure";
  expect_well_formed(*sink, "c");
  EXPECT_EQ(sink->done_of("c")->finish_reason, FinishReason::length);
  EXPECT_EQ(sink->tokens_of("c"), fake_tokens(tok->encode(pa, true, true), 9, 6));
  EXPECT_EQ(h.engine->metrics().requests_failed, 2u);
  // Slots and KV blocks come back, and the engine serves new requests.
  ASSERT_TRUE(h.wait_idle());
  EXPECT_EQ(h.engine->metrics().kv_blocks_used, 0);
  s.generate(gen("d", pa, 4, 11));
  ASSERT_TRUE(sink->wait_final("d"));
  EXPECT_EQ(sink->done_of("d")->finish_reason, FinishReason::length);
}

TEST(Engine, StopStringsAcrossTokensAndEndOfGeneration) {
  REQUIRE_MODEL();
  auto tok = rz_test::default_tokenizer();
  const std::string text = "The quick brown fox jumps over the lazy dog.";
  std::vector<int32_t> script = tok->encode(text, false, false);
  const size_t n_text = script.size();
  script.push_back(tok->eos_id());
  ASSERT_TRUE(tok->is_eog(tok->eos_id()));
  Harness h(std::make_unique<rz_test::ScriptedExecutor>(4, 256, kVocab, script), EngineConfig{},
            false);
  auto sink = std::make_shared<RecordingSink>();
  Session s = h.engine->open_session(sink);
  struct Case {
    std::string id;
    std::vector<std::string> stop;
    std::string expect_text;
  };
  const std::vector<Case> cases = {
      {"split", {"brown fox"}, "The quick "},
      {"inside", {"ump"}, "The quick brown fox j"},
      {"earliest", {"lazy", "k b"}, "The quic"},
      {"none", {"cat"}, text},
      {"plain", {}, text},
  };
  for (const auto& c : cases) {
    GenerateRequest r = gen(c.id, "Hi", 100);
    r.ignore_eos = false;
    r.stop = c.stop;
    s.generate(r);
  }
  for (const auto& c : cases) {
    ASSERT_TRUE(sink->wait_final(c.id)) << c.id;
    expect_well_formed(*sink, c.id);
    auto d = sink->done_of(c.id);
    ASSERT_TRUE(d) << c.id;
    EXPECT_EQ(d->finish_reason, FinishReason::stop) << c.id << ": a stop string or the eos";
    EXPECT_EQ(sink->text_of(c.id), c.expect_text) << c.id;
    // Tokens: up to the one that completed the stop string (by the tokenizer's own decode), or
    // every text token when the eos ended it (the eos is neither sent nor counted).
    size_t k = n_text;
    for (const auto& st : c.stop) {
      size_t j = 1;
      while (j <= n_text &&
             tok->decode(std::vector<int32_t>(script.begin(), script.begin() + j), true).find(st) ==
                 std::string::npos)
        ++j;
      k = std::min(k, j);
    }
    EXPECT_EQ(sink->tokens_of(c.id), std::vector<int32_t>(script.begin(), script.begin() + k))
        << c.id;
  }
  // A stop-string request's slot is cancelled behind the scenes but counted as finished.
  ASSERT_TRUE(h.wait_idle());
  const auto m = h.engine->metrics();
  EXPECT_EQ(m.requests_finished, cases.size());
  EXPECT_EQ(m.requests_cancelled, 0u);
}

TEST(Engine, ChatMessagesGoThroughTheTemplate) {
  REQUIRE_MODEL();
  auto tok = rz_test::default_tokenizer();
  auto g = rz::GgufFile::open(rz_test::default_model_path());
  const std::string src = g->get_string("tokenizer.chat_template").value_or("");
  ASSERT_FALSE(src.empty());
  auto tmpl = rz::ChatTemplate::from_jinja(src, tok->token_text(tok->bos_id()),
                                           tok->token_text(tok->eos_id()));
  Harness h(std::make_unique<FakeExecutor>(2, 512, kVocab), EngineConfig{}, false, tmpl);
  auto sink = std::make_shared<RecordingSink>();
  Session s = h.engine->open_session(sink);
  GenerateRequest r;
  r.id = "c";
  r.messages = {{"user", "What is the capital of France?"}};
  r.max_tokens = 4;
  r.sampling.seed = 9;
  r.ignore_eos = true;
  s.generate(r);
  ASSERT_TRUE(sink->wait_final("c"));
  expect_well_formed(*sink, "c");
  const auto prompt = tok->encode(tmpl.apply(r.messages, true), false, true);
  EXPECT_EQ(sink->done_of("c")->usage.prompt_tokens, prompt.size());
  EXPECT_EQ(sink->tokens_of("c"), fake_tokens(prompt, 9, 4));

  // Without a template, messages are a bad_value.
  Harness h2(std::make_unique<FakeExecutor>(1, 512, kVocab), EngineConfig{}, false);
  auto sink2 = std::make_shared<RecordingSink>();
  Session s2 = h2.engine->open_session(sink2);
  s2.generate(r);
  ASSERT_TRUE(sink2->wait_final("c"));
  EXPECT_EQ(sink2->error_of("c")->code, ErrorCode::bad_value);
}

TEST(Engine, ShutdownDrainsRunningAndQueuedRequests) {
  REQUIRE_MODEL();
  EngineConfig ec;
  ec.max_slots = 2;
  Harness h(std::make_unique<FakeExecutor>(2, 256, kVocab), ec, false);
  auto sink = std::make_shared<RecordingSink>();
  Session s = h.engine->open_session(sink);
  for (int i = 0; i < 5; ++i) s.generate(gen("r" + std::to_string(i), "Hello", 20, i));
  s.ping();
  ASSERT_TRUE(sink->wait_pongs(1));  // every generate reached the session
  h.engine->shutdown(20s);
  for (int i = 0; i < 5; ++i) {
    const std::string id = "r" + std::to_string(i);
    expect_well_formed(*sink, id);
    auto d = sink->done_of(id);
    ASSERT_TRUE(d) << id;
    EXPECT_EQ(d->finish_reason, FinishReason::length) << id;
  }
  EXPECT_EQ(h.engine->metrics().sessions, 0);
  h.engine->shutdown(0ms);  // twice is fine
}

TEST(Engine, ShutdownCancelsWhatTheDrainLeaves) {
  REQUIRE_MODEL();
  EngineConfig ec;
  ec.max_slots = 1;
  Harness h(std::make_unique<FakeExecutor>(1, 4096, kVocab), ec, false);
  h.gate->set_delay(2ms);
  auto sink = std::make_shared<RecordingSink>();
  Session s = h.engine->open_session(sink);
  s.generate(gen("long", "Hello", 4000));
  s.generate(gen("queued", "Hello", 10));
  ASSERT_TRUE(sink->wait_tokens("long", 1));
  h.engine->shutdown(50ms);
  for (const char* id : {"long", "queued"}) {
    expect_well_formed(*sink, id);
    auto d = sink->done_of(id);
    ASSERT_TRUE(d) << id;
    EXPECT_EQ(d->finish_reason, FinishReason::cancelled) << id;
  }
  EXPECT_LT(sink->done_of("long")->usage.completion_tokens, 4000u);
  EXPECT_EQ(sink->done_of("queued")->usage.completion_tokens, 0u);
  EXPECT_FALSE(sink->done_of("queued")->timings.ttft_ms.has_value());
  // After shutdown a new session refuses work.
  auto late = std::make_shared<RecordingSink>();
  Session s2 = h.engine->open_session(late);
  s2.generate(gen("late", "Hello", 3));
  ASSERT_TRUE(late->wait_final("late"));
  EXPECT_EQ(late->error_of("late")->code, ErrorCode::overloaded);
}

TEST(Engine, DestroyingTheEngineWithoutShutdownEndsEverything) {
  REQUIRE_MODEL();
  auto sink = std::make_shared<RecordingSink>();
  {
    Harness h(std::make_unique<FakeExecutor>(1, 4096, kVocab), EngineConfig{}, false);
    h.gate->set_delay(2ms);
    Session s = h.engine->open_session(sink);
    s.generate(gen("a", "Hello", 4000));
    ASSERT_TRUE(sink->wait_tokens("a", 1));
  }  // ~Engine, then ~actor_system: must not hang
  expect_well_formed(*sink, "a");
  EXPECT_EQ(sink->done_of("a")->finish_reason, FinishReason::cancelled);
}

TEST(Engine, DroppedSessionHandleFinishesItsRequestsThenStops) {
  REQUIRE_MODEL();
  Harness h(std::make_unique<FakeExecutor>(1, 256, kVocab), EngineConfig{}, false);
  auto sink = std::make_shared<RecordingSink>();
  h.engine->open_session(sink).generate(gen("a", "Hello", 5));  // a temporary handle
  ASSERT_TRUE(sink->wait_final("a"));
  expect_well_formed(*sink, "a");
  EXPECT_EQ(sink->done_of("a")->finish_reason, FinishReason::length);
  for (int i = 0; i < 2000 && h.engine->metrics().sessions != 0; ++i)
    std::this_thread::sleep_for(5ms);
  EXPECT_EQ(h.engine->metrics().sessions, 0);
}

TEST(Engine, CloseCancelsAndStopsTheSession) {
  REQUIRE_MODEL();
  EngineConfig ec;
  ec.max_slots = 1;
  Harness h(std::make_unique<FakeExecutor>(1, 256, kVocab), ec, true);
  auto sink = std::make_shared<RecordingSink>(), other = std::make_shared<RecordingSink>();
  Session s = h.engine->open_session(sink);
  s.generate(gen("a", "Hello", 200));
  h.gate->allow(2);
  ASSERT_TRUE(h.gate->wait_blocked_after(2));
  s.close();
  Session o = h.engine->open_session(other);
  o.generate(gen("b", "Hello", 3));
  h.gate->open();
  ASSERT_TRUE(other->wait_final("b"));
  expect_well_formed(*other, "b");
  EXPECT_FALSE(sink->final_of("a")) << "no frames after close";
  ASSERT_TRUE(h.wait_idle());
  EXPECT_EQ(h.engine->metrics().requests_cancelled, 1u);
}

TEST(Engine, StepLogHasALinePerStep) {
  REQUIRE_MODEL();
  const std::string path =
      (std::filesystem::temp_directory_path() / "rz_engine_step_log.csv").string();
  EngineConfig ec;
  ec.max_slots = 2;
  ec.step_log = path;
  uint64_t steps = 0;
  {
    Harness h(std::make_unique<FakeExecutor>(2, 256, kVocab), ec, false);
    auto sink = std::make_shared<RecordingSink>();
    Session s = h.engine->open_session(sink);
    s.generate(gen("a", "Once upon a time", 6));
    s.generate(gen("b", "The capital of France is", 4));
    ASSERT_TRUE(sink->wait_final("a"));
    ASSERT_TRUE(sink->wait_final("b"));
    ASSERT_TRUE(h.wait_idle());
    steps = h.engine->metrics().step_seconds.count;
  }
  std::ifstream in(path);
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  EXPECT_EQ(line.rfind("step,start_ms,", 0), 0u);
  uint64_t lines = 0;
  int decodes = 0, chunks = 0;
  while (std::getline(in, line)) {
    ++lines;
    std::vector<std::string> f;
    std::istringstream r(line);
    for (std::string x; std::getline(r, x, ',');) f.push_back(x);
    ASSERT_EQ(f.size(), 10u) << line;
    decodes += std::stoi(f[5]);
    chunks += std::stoi(f[6]);
  }
  EXPECT_EQ(lines, steps);
  EXPECT_EQ(chunks, 2);                   // each prompt in one chunk
  EXPECT_EQ(decodes, (6 - 1) + (4 - 1));  // every token after the first is a decode
  std::filesystem::remove(path);
}

TEST(Engine, StepLogThatCannotBeOpenedFailsStart) {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  EngineConfig ec;
  ec.step_log = "/nonexistent-dir/rz/steps.csv";
  EXPECT_THROW(Engine::start(sys, std::make_unique<FakeExecutor>(2, 64, kVocab),
                             rz_test::default_tokenizer(), std::nullopt, ec),
               rz::Error);
}
