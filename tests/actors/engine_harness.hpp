// The engine test harness shared by the actor engine's tests (engine_test.cpp,
// session_timeout_test.cpp): an actor system and an engine over an executor behind a StepGate,
// a generate request maker, and the frame-sequence check every request must pass.
#pragma once
#include <gtest/gtest.h>

#include <caf/all.hpp>

#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <variant>

#include "actors/engine.hpp"
#include "tests/actors/engine_test_support.hpp"
#include "tokenizer/chat_template.hpp"

namespace rz_test {

using namespace std::chrono_literals;
using rz::engine::Engine;
using rz::engine::EngineConfig;
using rz::proto::DoneFrame;
using rz::proto::GenerateRequest;
using rz::proto::TokenFrame;

inline constexpr int kVocab = 49152;  // the default model's vocabulary

// An actor system, an engine over `inner` behind a StepGate, and the default tokenizer.
struct Harness {
  Harness(std::unique_ptr<rz::Executor> inner, EngineConfig ec, bool gated,
          std::optional<rz::ChatTemplate> chat = std::nullopt) {
    tok = rz_test::default_tokenizer();
    sys = std::make_unique<caf::actor_system>(cfg);
    if (!gated) gate->open();
    engine = Engine::start(*sys, std::make_unique<rz_test::GatedExecutor>(std::move(inner), gate),
                           tok, std::move(chat), ec);
  }
  ~Harness() {
    gate->open();
    engine.reset();  // shuts down (drain 0)
    sys.reset();
  }
  // Waits until the scheduler gauges show nothing queued or running.
  bool wait_idle() {
    for (int i = 0; i < 2000; ++i) {
      auto m = engine->metrics();
      if (m.active_slots == 0 && m.queue_depth == 0) return true;
      std::this_thread::sleep_for(5ms);
    }
    return false;
  }

  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::shared_ptr<StepGate> gate = std::make_shared<StepGate>();
  std::shared_ptr<const rz::Tokenizer> tok;
  std::shared_ptr<Engine> engine;
};

inline GenerateRequest gen(std::string id, std::string prompt, int max_tokens, uint64_t seed = 1) {
  GenerateRequest r;
  r.id = std::move(id);
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.seed = seed;
  r.ignore_eos = true;  // the fake's tokens are random: never end early on one
  return r;
}

// Token frames with contiguous indexes from 0, then exactly one final frame, nothing after it;
// a done frame's completion_tokens equals the tokens sent.
inline void expect_well_formed(const RecordingSink::Frames& fs, const std::string& id) {
  uint64_t index = 0;
  int finals = 0;
  for (const auto& f : fs) {
    if (const auto* t = std::get_if<TokenFrame>(&f)) {
      EXPECT_EQ(finals, 0) << id << ": token frame after the final frame";
      EXPECT_EQ(t->index, index) << id;
      EXPECT_FALSE(t->tokens.empty()) << id;
      index += t->tokens.size();
    } else {
      ++finals;
      if (const auto* d = std::get_if<DoneFrame>(&f)) {
        EXPECT_EQ(d->usage.completion_tokens, index) << id;
        EXPECT_GE(d->timings.total_ms, 0.0);
        if (index > 0) {
          ASSERT_TRUE(d->timings.ttft_ms.has_value()) << id;
          EXPECT_LE(*d->timings.ttft_ms, d->timings.total_ms) << id;
        }
      }
    }
  }
  EXPECT_EQ(finals, 1) << id;
}

inline void expect_well_formed(const RecordingSink& sink, const std::string& id) {
  expect_well_formed(sink.of(id), id);
}

inline bool model_present() { return std::filesystem::exists(rz_test::default_model_path()); }

#define REQUIRE_MODEL()          \
  if (!rz_test::model_present()) \
  FAIL() << "missing " << rz_test::default_model_path() << ": run scripts/setup.sh"

}  // namespace rz_test
