// The gpu actor (actors/gpu_actor.hpp): it answers step messages with the step function's result
// (sched/step.hpp, tested in sched_step_test.cpp), releases slots on request and stops;
// and the step messages (actors/messages.hpp) keep every field through CAF serialization.
#include "actors/gpu_actor.hpp"

#include <gtest/gtest.h>

#include <caf/all.hpp>

#include "actors/messages.hpp"
#include "tests/sched/fake_executor.hpp"

using rz::ExecutorStep;
using rz::StepResult;
using rz_test::FakeExecutor;

namespace {

ExecutorStep prefill_step(uint64_t n, int slot, std::vector<int32_t> prompt) {
  ExecutorStep g;
  g.step = n;
  g.kind = rz::StepKind::prefill;
  rz::PrefillRequest p;
  p.slot = slot;
  p.tokens = std::move(prompt);
  p.sampling.seed = 3;
  g.prefill.push_back(p);
  return g;
}

// Serializes and deserializes a message value the way CAF does when one leaves the process.
template <class T>
T round_trip(caf::actor_system& sys, T x) {
  std::vector<char> buf;
  caf::binary_serializer sink{sys, buf};
  if (auto err = sink(x)) ADD_FAILURE() << sys.render(err);
  T y;
  caf::binary_deserializer source{sys, buf};
  if (auto err = source(y)) ADD_FAILURE() << sys.render(err);
  return y;
}

}  // namespace

TEST(GpuActor, AnswersStepsAndStops) {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  auto gpu = rz::engine::spawn_gpu_actor(sys, std::make_unique<FakeExecutor>(1, 16, 100));
  caf::scoped_actor self{sys};
  StepResult got;
  self->request(gpu, caf::infinite, rz::engine::step_atom::value, prefill_step(7, 0, {5, 6}))
      .receive([&](StepResult& r) { got = r; }, [&](caf::error& e) { FAIL() << sys.render(e); });
  EXPECT_EQ(got.step, 7u);
  ASSERT_EQ(got.tokens.size(), 1u);
  EXPECT_EQ(got.tokens[0], FakeExecutor::next_token(3, std::vector<int32_t>{5, 6}, 100));
  self->monitor(gpu);
  self->send(gpu, rz::engine::stop_atom::value);
  bool down = false;
  self->receive([&](caf::down_msg&) { down = true; });
  EXPECT_TRUE(down);
}

TEST(GpuActor, ReleaseMessageFreesSlots) {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  auto gpu = rz::engine::spawn_gpu_actor(sys, std::make_unique<FakeExecutor>(1, 16, 100));
  caf::scoped_actor self{sys};
  auto step = [&](uint64_t n) {
    StepResult got;
    self->request(gpu, caf::infinite, rz::engine::step_atom::value, prefill_step(n, 0, {5}))
        .receive([&](StepResult& r) { got = r; }, [&](caf::error& e) { FAIL() << sys.render(e); });
    return got;
  };
  EXPECT_TRUE(step(1).ok());
  EXPECT_FALSE(step(2).ok()) << "slot 0 is busy";
  self->send(gpu, rz::engine::release_atom::value, std::vector<int>{0});
  const StepResult r = step(3);  // the mailbox keeps order: the release came first
  EXPECT_TRUE(r.ok()) << r.error;
  self->send(gpu, rz::engine::stop_atom::value);
}

TEST(EngineMessages, KeepEveryFieldThroughSerialization) {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  ExecutorStep s = prefill_step(11, 1, {4, 5, 6});
  s.release = {0, 2};
  s.prefill[0].reserve_tokens = 77;
  s.prefill[0].sampling.temperature = 0.5f;
  s.prefill[0].sampling.top_k = 9;
  ExecutorStep a = round_trip(sys, s);
  EXPECT_EQ(a.kind, rz::StepKind::prefill);
  EXPECT_EQ(a.step, 11u);
  EXPECT_EQ(a.release, (std::vector<int>{0, 2}));
  ASSERT_EQ(a.prefill.size(), 1u);
  EXPECT_EQ(a.prefill[0].slot, 1);
  EXPECT_EQ(a.prefill[0].tokens, (std::vector<int32_t>{4, 5, 6}));
  EXPECT_EQ(a.prefill[0].reserve_tokens, 77);
  EXPECT_EQ(a.prefill[0].sampling.seed, 3u);
  EXPECT_EQ(a.prefill[0].sampling.temperature, 0.5f);
  EXPECT_EQ(a.prefill[0].sampling.top_k, 9);

  ExecutorStep d;
  d.kind = rz::StepKind::decode;
  d.decode = {{3, 42}};
  ExecutorStep b = round_trip(sys, d);
  EXPECT_EQ(b.kind, rz::StepKind::decode);
  ASSERT_EQ(b.decode.size(), 1u);
  EXPECT_EQ(b.decode[0].slot, 3);
  EXPECT_EQ(b.decode[0].token, 42);

  StepResult r;
  r.step = 5;
  r.tokens = {1, 2};
  r.error = "e";
  r.seconds = 0.25;
  StepResult c = round_trip(sys, r);
  EXPECT_EQ(c.step, 5u);
  EXPECT_EQ(c.tokens, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(c.error, "e");
  EXPECT_EQ(c.seconds, 0.25);

  rz::engine::SubmitReply rep{9, rz::SubmitStatus::context_length_exceeded, "too long"};
  rz::engine::SubmitReply e = round_trip(sys, rep);
  EXPECT_EQ(e.id, 9u);
  EXPECT_EQ(e.status, rz::SubmitStatus::context_length_exceeded);
  EXPECT_EQ(e.message, "too long");
}
