// The actor engine over the real CPU executor and the default model: a greedy request gives the
// same tokens when it runs alone and when it runs amid other (sampled) requests, and those are
// the tokens of driving the executor directly (prefill, then decode until max_tokens or an
// end-of-generation token).
#include <gtest/gtest.h>

#include <caf/all.hpp>

#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "actors/engine.hpp"
#include "cpu/cpu_executor.hpp"
#include "formats/gguf.hpp"
#include "formats/model_file.hpp"
#include "sched/slot_runner.hpp"
#include "tests/actors/engine_test_support.hpp"
#include "tokenizer/chat_template.hpp"

using rz::engine::Engine;
using rz::engine::EngineConfig;
using rz::engine::Session;
using rz::proto::GenerateRequest;
using rz_test::RecordingSink;

namespace {

constexpr int kCtx = 256;
constexpr int kMaxTokens = 16;

std::vector<int32_t> direct_greedy(std::shared_ptr<const rz::ModelFile> mf,
                                   const rz::Tokenizer& tok, const std::vector<int32_t>& prompt,
                                   int n) {
  rz::CpuExecutor ex(mf, {.slots = 1, .max_context = kCtx, .threads = 0});
  rz::SlotRunner run(ex);
  std::vector<int32_t> out;
  int32_t next = run.prefill({0, prompt, rz::SamplingParams{}});  // temperature 0: greedy
  while (!tok.is_eog(next)) {
    out.push_back(next);
    if (static_cast<int>(out.size()) == n) break;
    next = run.decode(0, next);
  }
  return out;
}

GenerateRequest greedy(std::string id, std::string prompt) {
  GenerateRequest r;
  r.id = std::move(id);
  r.prompt = std::move(prompt);
  r.max_tokens = kMaxTokens;
  r.sampling.temperature = 0.0f;
  return r;
}

}  // namespace

TEST(EngineCpu, GreedyTokensAloneAndUnderLoadEqualTheExecutor) {
  const std::string path = rz_test::default_model_path();
  if (!std::filesystem::exists(path)) FAIL() << "missing " << path << ": run scripts/setup.sh";
  auto mf = rz::ModelFile::open(path);
  auto tok = rz_test::default_tokenizer();
  const std::string prompt = "The capital of France is";
  const auto expected = direct_greedy(mf, *tok, tok->encode(prompt, true, true), kMaxTokens);
  ASSERT_FALSE(expected.empty());

  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  EngineConfig ec;
  auto engine =
      Engine::start(sys, std::make_unique<rz::CpuExecutor>(mf, rz::CpuExecutorOptions{4, kCtx, 0}),
                    tok, std::nullopt, ec);
  auto sink = std::make_shared<RecordingSink>();
  Session s = engine->open_session(sink);

  s.generate(greedy("alone", prompt));
  ASSERT_TRUE(sink->wait_final("alone", std::chrono::seconds(120)));
  EXPECT_EQ(sink->tokens_of("alone"), expected);
  EXPECT_EQ(sink->text_of("alone"), tok->decode(expected, true));

  // The same request amid three others that join at different steps.
  auto other = std::make_shared<RecordingSink>();
  Session o = engine->open_session(other);
  GenerateRequest noisy = greedy("n1", "Once upon a time, in a land far away,");
  noisy.sampling.temperature = 0.8f;
  noisy.sampling.seed = 42;
  noisy.ignore_eos = true;
  o.generate(noisy);
  ASSERT_TRUE(other->wait_tokens("n1", 1, std::chrono::seconds(120)));
  s.generate(greedy("loaded", prompt));
  noisy.id = "n2";
  noisy.prompt = "List three colours:";
  o.generate(noisy);
  noisy.id = "n3";
  noisy.prompt = "def fibonacci(n):";
  noisy.max_tokens = 24;
  o.generate(noisy);
  ASSERT_TRUE(sink->wait_final("loaded", std::chrono::seconds(120)));
  for (const char* id : {"n1", "n2", "n3"})
    ASSERT_TRUE(other->wait_final(id, std::chrono::seconds(120))) << id;
  EXPECT_EQ(sink->tokens_of("loaded"), expected);
  for (const char* id : {"n1", "n2", "n3"}) {
    auto d = other->done_of(id);
    ASSERT_TRUE(d) << id;
    EXPECT_EQ(d->finish_reason, rz::proto::FinishReason::length) << id;
  }
  engine->shutdown(std::chrono::seconds(1));
}

namespace {

// A CPU engine on the default model with the model's chat template.
struct CpuEngine {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  std::shared_ptr<Engine> engine;
  CpuEngine(std::shared_ptr<const rz::ModelFile> mf, std::shared_ptr<const rz::Tokenizer> tok,
            rz::CpuExecutorOptions opt, EngineConfig ec) {
    auto g = rz::GgufFile::open(rz_test::default_model_path());
    auto tmpl = rz::ChatTemplate::from_jinja(g->get_string("tokenizer.chat_template").value_or(""),
                                             tok->token_text(tok->bos_id()),
                                             tok->token_text(tok->eos_id()));
    engine = Engine::start(sys, std::make_unique<rz::CpuExecutor>(mf, opt), tok, tmpl, ec);
  }
  ~CpuEngine() { engine->shutdown(std::chrono::seconds(1)); }
};

struct Turn {
  std::string text;
  std::vector<int32_t> tokens;
  rz::proto::Usage usage;
};

// A chat of three turns, each resending the whole history; greedy answers of up to 12 tokens.
std::vector<Turn> chat_three_turns(Engine& engine) {
  auto sink = std::make_shared<RecordingSink>();
  Session s = engine.open_session(sink);
  std::vector<rz::ChatMessage> history;
  std::vector<Turn> turns;
  const char* questions[] = {"What is the capital of France?", "And of Italy?",
                             "Which of the two is larger?"};
  for (int t = 0; t < 3; ++t) {
    history.push_back({"user", questions[t]});
    GenerateRequest r;
    r.id = "t" + std::to_string(t);
    r.messages = history;
    r.max_tokens = 12;
    r.sampling.temperature = 0.0f;
    s.generate(r);
    if (!sink->wait_final(r.id, std::chrono::seconds(120))) return turns;
    auto d = sink->done_of(r.id);
    if (!d) return turns;
    turns.push_back({sink->text_of(r.id), sink->tokens_of(r.id), d->usage});
    history.push_back({"assistant", turns.back().text});
  }
  return turns;
}

}  // namespace

// Each turn of a chat resends its history: with the prefix cache, the previous turn's prompt (in
// whole blocks) is reused, the answers are the same as without the cache, and without it nothing
// is reused.
TEST(EngineCpu, MultiTurnChatReusesItsHistory) {
  const std::string path = rz_test::default_model_path();
  if (!std::filesystem::exists(path)) FAIL() << "missing " << path << ": run scripts/setup.sh";
  auto mf = rz::ModelFile::open(path);
  auto tok = rz_test::default_tokenizer();
  std::vector<Turn> on, off;
  for (bool cache : {true, false}) {
    EngineConfig ec;
    ec.prefix_cache = cache;
    CpuEngine e(mf, tok, {.slots = 2, .max_context = 512, .threads = 0}, ec);
    (cache ? on : off) = chat_three_turns(*e.engine);
  }
  ASSERT_EQ(on.size(), 3u);
  ASSERT_EQ(off.size(), 3u);
  const int bs = rz::kDefaultKvBlockSize;
  for (size_t t = 0; t < 3; ++t) {
    EXPECT_EQ(on[t].tokens, off[t].tokens) << "turn " << t;
    EXPECT_EQ(on[t].usage.prompt_tokens, off[t].usage.prompt_tokens) << "turn " << t;
    EXPECT_EQ(off[t].usage.cached_tokens, 0u) << "turn " << t;
    EXPECT_EQ(on[t].usage.cached_tokens % bs, 0u) << "whole blocks";
    EXPECT_LT(on[t].usage.cached_tokens, on[t].usage.prompt_tokens);
    if (t == 0) continue;
    // The previous prompt is a prefix of this one (its answer and the next question follow).
    const uint64_t prev = on[t - 1].usage.prompt_tokens;
    EXPECT_GE(on[t].usage.cached_tokens, prev / bs * bs)
        << "turn " << t << ": " << on[t].usage.cached_tokens << " of " << on[t].usage.prompt_tokens;
  }
}

// More distinct prompts than the KV cache holds: eviction makes room, every request completes
// with the tokens it gets alone, and the used blocks return to zero.
TEST(EngineCpu, EvictionKeepsServingUnderMemoryPressure) {
  const std::string path = rz_test::default_model_path();
  if (!std::filesystem::exists(path)) FAIL() << "missing " << path << ": run scripts/setup.sh";
  auto mf = rz::ModelFile::open(path);
  auto tok = rz_test::default_tokenizer();
  // 24 blocks of 16 tokens: room for about three of the prompts below at a time.
  EngineConfig ec;
  CpuEngine e(mf, tok, {.slots = 2, .max_context = kCtx, .threads = 0, .kv_blocks = 24}, ec);
  auto sink = std::make_shared<RecordingSink>();
  Session s = e.engine->open_session(sink);
  std::vector<std::string> prompts;
  for (int i = 0; i < 8; ++i) {
    std::string p = "Story " + std::to_string(i) + ":";
    for (int w = 0; w < 40; ++w) p += " word" + std::to_string((i * 7 + w * 3) % 50);
    prompts.push_back(p);
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerateRequest r = greedy("p" + std::to_string(i), prompts[i]);
    r.max_tokens = 4;
    r.ignore_eos = true;
    s.generate(r);
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::string id = "p" + std::to_string(i);
    ASSERT_TRUE(sink->wait_final(id, std::chrono::seconds(120))) << id;
    auto d = sink->done_of(id);
    ASSERT_TRUE(d) << id << " failed";
    EXPECT_EQ(d->finish_reason, rz::proto::FinishReason::length);
    EXPECT_EQ(sink->tokens_of(id), direct_greedy(mf, *tok, tok->encode(prompts[i], true, true), 4))
        << id;
  }
  const auto m = e.engine->metrics();
  EXPECT_GT(m.prefix_cache_evictions, 0u);
  EXPECT_EQ(m.requests_failed, 0u);
  for (int i = 0; i < 100 && e.engine->metrics().kv_blocks_used != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(e.engine->metrics().kv_blocks_used, 0);
}

// A burst of max_slots requests into an idle engine with no queue beyond the slots: none is
// refused, all complete.
TEST(EngineCpu, BurstOfMaxSlotsRequestsAllComplete) {
  const std::string path = rz_test::default_model_path();
  if (!std::filesystem::exists(path)) FAIL() << "missing " << path << ": run scripts/setup.sh";
  auto mf = rz::ModelFile::open(path);
  auto tok = rz_test::default_tokenizer();
  EngineConfig ec;
  ec.max_queue = 0;
  CpuEngine e(mf, tok, {.slots = 6, .max_context = kCtx, .threads = 0}, ec);
  auto sink = std::make_shared<RecordingSink>();
  Session s = e.engine->open_session(sink);
  for (int i = 0; i < 6; ++i) {
    GenerateRequest r = greedy("b" + std::to_string(i), "Count to " + std::to_string(i + 3) + ":");
    r.max_tokens = 3;
    s.generate(r);
  }
  for (int i = 0; i < 6; ++i) {
    const std::string id = "b" + std::to_string(i);
    ASSERT_TRUE(sink->wait_final(id, std::chrono::seconds(120))) << id;
    EXPECT_TRUE(sink->done_of(id))
        << id << ": " << (sink->error_of(id) ? sink->error_of(id)->message : "");
  }
  EXPECT_EQ(e.engine->metrics().requests_rejected, 0u);
}

namespace {

// The token frames of one choice of request `id` (choice unset counts as 0).
std::vector<rz::proto::TokenFrame> choice_frames(const RecordingSink& sink, const std::string& id,
                                                 int choice) {
  std::vector<rz::proto::TokenFrame> out;
  for (const auto& f : sink.of(id))
    if (const auto* t = std::get_if<rz::proto::TokenFrame>(&f);
        t && t->choice.value_or(0) == choice)
      out.push_back(*t);
  return out;
}

std::vector<int32_t> tokens_in(const std::vector<rz::proto::TokenFrame>& fs) {
  std::vector<int32_t> v;
  for (const auto& f : fs) v.insert(v.end(), f.tokens.begin(), f.tokens.end());
  return v;
}

}  // namespace

// n choices run as n requests, choice i with seed s + i (so choice 1 of seed 10 is the lone
// request of seed 11), each ending with its own done frame; presence/frequency penalties and
// log-probabilities reach the executor: a greedy, penalised request with logprobs gives the
// tokens and log-probabilities of driving the executor directly with the same settings.
TEST(EngineCpu, ChoicesPenaltiesAndLogprobs) {
  const std::string path = rz_test::default_model_path();
  if (!std::filesystem::exists(path)) FAIL() << "missing " << path << ": run scripts/setup.sh";
  auto mf = rz::ModelFile::open(path);
  auto tok = rz_test::default_tokenizer();
  const std::string prompt = "List the colours of the rainbow:";
  constexpr int kN = 8;

  // The executor alone: greedy with penalties, 3 alternatives per token.
  rz::SamplingParams sp;
  sp.presence_penalty = 0.7f;
  sp.frequency_penalty = 0.4f;
  sp.logprobs = 3;
  std::vector<int32_t> want;
  std::vector<rz::TokenLogprobs> want_lp;
  {
    rz::CpuExecutor ex(mf, {.slots = 1, .max_context = kCtx, .threads = 0});
    rz::SlotRunner run(ex);
    int32_t next = run.prefill({0, tok->encode(prompt, true, true), sp});
    for (int i = 0; i < kN; ++i) {
      want.push_back(next);
      want_lp.push_back(ex.step_logprobs()[0]);
      if (i + 1 < kN) next = run.decode(0, next);
    }
  }
  // Without penalties the greedy tokens repeat more: the penalties changed something.
  EXPECT_NE(want, direct_greedy(mf, *tok, tok->encode(prompt, true, true), kN));

  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  auto engine =
      Engine::start(sys, std::make_unique<rz::CpuExecutor>(mf, rz::CpuExecutorOptions{4, kCtx, 0}),
                    tok, std::nullopt, EngineConfig{});
  auto sink = std::make_shared<RecordingSink>();
  Session s = engine->open_session(sink);

  GenerateRequest g = greedy("pen", prompt);
  g.max_tokens = kN;
  g.ignore_eos = true;
  g.sampling.presence_penalty = sp.presence_penalty;
  g.sampling.frequency_penalty = sp.frequency_penalty;
  g.logprobs = 3;
  s.generate(g);

  GenerateRequest multi;
  multi.id = "multi";
  multi.prompt = prompt;
  multi.max_tokens = 6;
  multi.ignore_eos = true;
  multi.sampling.temperature = 1.0f;
  multi.sampling.seed = 10;
  multi.n = 3;
  s.generate(multi);
  GenerateRequest single = multi;
  single.id = "single";
  single.n = 1;
  single.sampling.seed = 11;
  s.generate(single);

  ASSERT_TRUE(sink->wait(
      [](const RecordingSink::Frames& fs) {
        int done = 0;
        for (const auto& f : fs) done += std::holds_alternative<rz::proto::DoneFrame>(f);
        return done == 5;  // pen, three choices, single
      },
      std::chrono::seconds(180)));

  const auto pen = choice_frames(*sink, "pen", 0);
  EXPECT_EQ(tokens_in(pen), want);
  size_t k = 0;
  for (const auto& f : pen) {
    EXPECT_FALSE(f.choice.has_value());  // n = 1: no choice field
    ASSERT_EQ(f.logprobs.size(), f.tokens.size());
    for (size_t j = 0; j < f.tokens.size(); ++j, ++k) {
      const auto& lp = f.logprobs[j];
      ASSERT_LT(k, want_lp.size());
      EXPECT_EQ(lp.token, f.tokens[j]);
      EXPECT_EQ(lp.text, tok->token_to_piece(lp.token));
      EXPECT_NEAR(lp.logprob, want_lp[k].logprob, 1e-3);  // batched matmuls round apart
      ASSERT_EQ(lp.top.size(), 3u);
      for (size_t a = 0; a < 3; ++a) {
        EXPECT_EQ(lp.top[a].token, want_lp[k].top_ids[a]);
        EXPECT_NEAR(lp.top[a].logprob, want_lp[k].top_logprobs[a], 1e-3);
      }
      EXPECT_LE(lp.logprob, lp.top[0].logprob);
    }
  }

  std::vector<std::vector<int32_t>> choices;
  int dones = 0;
  for (const auto& f : sink->of("multi"))
    if (const auto* d = std::get_if<rz::proto::DoneFrame>(&f)) {
      ASSERT_TRUE(d->choice.has_value());
      EXPECT_EQ(d->usage.completion_tokens, 6u);
      ++dones;
    }
  EXPECT_EQ(dones, 3);
  for (int c = 0; c < 3; ++c) {
    const auto fs = choice_frames(*sink, "multi", c);
    for (const auto& f : fs) {
      EXPECT_EQ(f.choice, c);
      EXPECT_TRUE(f.logprobs.empty());  // not asked for
    }
    choices.push_back(tokens_in(fs));
    EXPECT_EQ(choices.back().size(), 6u);
  }
  EXPECT_EQ(choices[1], sink->tokens_of("single"));  // seed 10 + 1
  EXPECT_NE(choices[0], choices[1]);
}
