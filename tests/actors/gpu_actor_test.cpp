// The gpu actor (actors/gpu_actor.hpp): a step releases its slots first, runs prefill or decode,
// and turns an executor exception into StepResult::error; the actor answers requests in order.
#include "actors/gpu_actor.hpp"

#include <gtest/gtest.h>

#include <caf/all.hpp>

#include "tests/actors/fake_executor.hpp"

using rz::engine::GpuStep;
using rz::engine::StepResult;
using rz_test::FakeExecutor;

namespace {

GpuStep prefill_step(uint64_t n, int slot, std::vector<int32_t> prompt) {
  GpuStep g;
  g.step = n;
  g.kind = 1;
  rz::PrefillRequest p;
  p.slot = slot;
  p.tokens = std::move(prompt);
  p.sampling.seed = 3;
  g.prefill.push_back(p);
  return g;
}

}  // namespace

TEST(GpuStep, RunsPrefillAndDecodeAndReleasesFirst) {
  FakeExecutor ex(2, 16, 100);
  StepResult r = rz::engine::run_gpu_step(ex, prefill_step(1, 0, {1, 2, 3}));
  ASSERT_TRUE(r.error.empty()) << r.error;
  ASSERT_EQ(r.tokens.size(), 1u);
  EXPECT_EQ(r.step, 1u);
  EXPECT_EQ(r.tokens[0], FakeExecutor::next_token(3, std::vector<int32_t>{1, 2, 3}, 100));

  GpuStep d;
  d.step = 2;
  d.kind = 2;
  d.decode.push_back({0, r.tokens[0]});
  StepResult r2 = rz::engine::run_gpu_step(ex, d);
  ASSERT_TRUE(r2.error.empty()) << r2.error;
  EXPECT_EQ(r2.tokens[0],
            FakeExecutor::next_token(3, std::vector<int32_t>{1, 2, 3, r.tokens[0]}, 100));

  // Slot 0 is busy: a prefill into it works only when the same step releases it first.
  StepResult busy = rz::engine::run_gpu_step(ex, prefill_step(3, 0, {4}));
  EXPECT_FALSE(busy.error.empty());
  EXPECT_TRUE(busy.tokens.empty());
  GpuStep again = prefill_step(4, 0, {4});
  again.release = {0};
  StepResult ok = rz::engine::run_gpu_step(ex, again);
  EXPECT_TRUE(ok.error.empty()) << ok.error;
}

TEST(GpuStep, ExecutorExceptionBecomesError) {
  FakeExecutor ex(1, 16, 100);
  ex.fail_on_steps({0});
  StepResult r = rz::engine::run_gpu_step(ex, prefill_step(1, 0, {1}));
  EXPECT_NE(r.error.find("injected failure"), std::string::npos) << r.error;
  EXPECT_TRUE(r.tokens.empty());
}

TEST(GpuActor, AnswersStepsAndStops) {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  auto gpu = rz::engine::spawn_gpu_actor(sys, std::make_unique<FakeExecutor>(1, 16, 100));
  caf::scoped_actor self{sys};
  StepResult got;
  self->request(gpu, caf::infinite, rz::engine::step_atom::value, prefill_step(7, 0, {5, 6}))
      .receive([&](StepResult& r) { got = r; },
               [&](caf::error& e) { FAIL() << sys.render(e); });
  EXPECT_EQ(got.step, 7u);
  ASSERT_EQ(got.tokens.size(), 1u);
  EXPECT_EQ(got.tokens[0], FakeExecutor::next_token(3, std::vector<int32_t>{5, 6}, 100));
  self->monitor(gpu);
  self->send(gpu, rz::engine::stop_atom::value);
  bool down = false;
  self->receive([&](caf::down_msg&) { down = true; });
  EXPECT_TRUE(down);
}
