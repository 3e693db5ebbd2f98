// The actor engine over the real CPU executor and the default model: a greedy request gives the
// same tokens when it runs alone and when it runs amid other (sampled) requests, and those are
// the tokens of driving the executor directly (prefill, then decode until max_tokens or an
// end-of-generation token).
#include <gtest/gtest.h>

#include <caf/all.hpp>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "actors/engine.hpp"
#include "cpu/cpu_executor.hpp"
#include "formats/model_file.hpp"
#include "tests/actors/engine_test_support.hpp"

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
  rz::PrefillRequest p{0, prompt, rz::SamplingParams{}};  // temperature 0: greedy
  std::vector<int32_t> out;
  int32_t next = ex.prefill({&p, 1})[0];
  while (!tok.is_eog(next)) {
    out.push_back(next);
    if (static_cast<int>(out.size()) == n) break;
    rz::DecodeRequest d{0, next};
    next = ex.decode({&d, 1})[0];
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
  const auto expected = direct_greedy(mf, *tok, tok->encode(prompt, true, false), kMaxTokens);
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
