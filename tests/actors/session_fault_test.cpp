// Faults inside a session actor (actors/session.cpp), through the engine's public API: an
// executor that samples a token the tokenizer has no text for (as a model whose output matrix has
// more rows than its vocabulary could) makes the session's detokenizer throw while it handles
// that request's event. Only that request ends, with an internal error; the session's other
// requests and other sessions go on, the slot and its KV blocks come back, and the session
// serves new requests.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <vector>

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

constexpr uint64_t kPoisonSeed = 666;

// The fake executor, except that a sequence begun with seed kPoisonSeed samples its third token
// as an id past the vocabulary.
class PoisoningExecutor : public FakeExecutor {
 public:
  using FakeExecutor::FakeExecutor;
  std::vector<int32_t> step(std::span<const rz::StepSeq> seqs) override {
    std::vector<int32_t> out = FakeExecutor::step(seqs);
    std::size_t k = 0;
    for (const rz::StepSeq& s : seqs) {
      if (s.begin) {
        if (s.sampling.seed == kPoisonSeed)
          poisoned_.insert(s.slot);
        else
          poisoned_.erase(s.slot);
      }
      if (!s.sample) continue;
      if (poisoned_.count(s.slot) && s.end() >= prompt_end(s) + 2) out[k] = kVocab + 7;
      ++k;
    }
    return out;
  }

 private:
  // The third sampled token comes from the step whose sequence reaches two tokens past the
  // prompt: remember where each poisoned slot's prompt ended.
  int prompt_end(const rz::StepSeq& s) {
    if (s.begin) ends_[s.slot] = s.end();
    return ends_[s.slot];
  }
  std::set<int> poisoned_;
  std::map<int, int> ends_;
};

}  // namespace

TEST(SessionFault, AnEventThatThrowsEndsOnlyItsRequest) {
  REQUIRE_MODEL();
  EngineConfig ec;
  ec.max_slots = 3;
  // The executor's vocabulary is larger than the tokenizer's (as Qwen's output matrix is): the
  // poisoned token is valid input for it, text for nobody.
  Harness h(std::make_unique<PoisoningExecutor>(3, 256, kVocab + 100), ec, false);
  auto sink = std::make_shared<RecordingSink>(), other = std::make_shared<RecordingSink>();
  Session s = h.engine->open_session(sink);
  Session o = h.engine->open_session(other);
  s.generate(gen("bad", "Hello", 40, kPoisonSeed));
  s.generate(gen("good", "Hello", 12, 3));
  o.generate(gen("other", "Hello", 12, 4));
  for (const char* id : {"bad", "good"}) ASSERT_TRUE(sink->wait_final(id)) << id;
  ASSERT_TRUE(other->wait_final("other"));
  expect_well_formed(*sink, "bad");
  auto e = sink->error_of("bad");
  ASSERT_TRUE(e) << "the poisoned request ends with an error";
  EXPECT_EQ(e->code, ErrorCode::internal);
  EXPECT_NE(e->message.find("the request failed"), std::string::npos) << e->message;
  EXPECT_EQ(sink->tokens_of("bad").size(), 2u) << "the tokens before the bad one were sent";
  for (const auto& [snk, id] : {std::pair{sink, "good"}, std::pair{other, "other"}}) {
    expect_well_formed(*snk, id);
    ASSERT_TRUE(snk->done_of(id)) << id;
    EXPECT_EQ(snk->done_of(id)->finish_reason, FinishReason::length) << id;
  }
  ASSERT_TRUE(h.wait_idle());
  EXPECT_EQ(h.engine->metrics().kv_blocks_used, 0);
  EXPECT_EQ(h.engine->metrics().requests_failed, 1u);
  // The session still serves, and the id may be used again.
  s.generate(gen("bad", "Hello", 5, 5));
  ASSERT_TRUE(sink->wait(
      [](const RecordingSink::Frames& fs) { return RecordingSink::count_final(fs, "bad") == 2; }));
  EXPECT_EQ(sink->done_of("good")->usage.completion_tokens, 12u);
  const auto frames = sink->of("bad");
  EXPECT_TRUE(std::holds_alternative<rz::proto::DoneFrame>(frames.back()));
}
