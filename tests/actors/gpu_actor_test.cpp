// The gpu actor (actors/gpu_actor.hpp): it answers step messages with the step function's result
// (sched/step.hpp, tested in sched_step_test.cpp), releases slots on request and stops;
// and the step messages (actors/messages.hpp) keep every field through CAF serialization.
#include "actors/gpu_actor.hpp"

#include <gtest/gtest.h>

#include <caf/all.hpp>

#include "actors/messages.hpp"
#include "actors/metrics.hpp"
#include "tests/sched/fake_executor.hpp"

using rz::ExecutorStep;
using rz::StepResult;
using rz_test::FakeExecutor;

namespace {

// A step that begins a sequence with the whole prompt (one KV block) and samples.
ExecutorStep prefill_step(uint64_t n, int slot, std::vector<int32_t> prompt) {
  ExecutorStep g;
  g.step = n;
  rz::StepSeq p;
  p.slot = slot;
  p.begin = true;
  p.tokens = std::move(prompt);
  p.blocks = {slot};
  p.sample = true;
  p.sampling.seed = 3;
  g.seqs.push_back(p);
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

// With a metrics registry, the executor's own counters (Executor::counters) land there after each
// step, whether or not the step succeeded.
TEST(GpuActor, PublishesTheExecutorsCounters) {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  auto metrics = std::make_shared<rz::engine::MetricsRegistry>(1);
  EXPECT_TRUE(metrics->snapshot().executor_counters.empty());
  auto gpu = rz::engine::spawn_gpu_actor(sys, std::make_unique<FakeExecutor>(1, 16, 100), metrics);
  caf::scoped_actor self{sys};
  for (uint64_t n = 1; n <= 2; ++n) {
    self->request(gpu, caf::infinite, rz::engine::step_atom::value, prefill_step(n, 0, {5}))
        .receive([&](StepResult&) {}, [&](caf::error& e) { FAIL() << sys.render(e); });
    const auto c = metrics->snapshot().executor_counters;
    ASSERT_EQ(c.size(), 1u);
    EXPECT_STREQ(c[0].name, "rz_fake_steps_total");
    EXPECT_EQ(c[0].value, n);  // the second step fails (slot 0 is busy) and counts all the same
  }
  self->send(gpu, rz::engine::stop_atom::value);
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
  s.seqs[0].cached = {7, 8};
  s.seqs[0].start = 2;
  s.seqs[0].blocks = {9, 4};
  s.seqs[0].sampling.temperature = 0.5f;
  s.seqs[0].sampling.top_k = 9;
  rz::StepSeq d;  // a decode entry: no begin, no sampling
  d.slot = 3;
  d.start = 40;
  d.tokens = {42};
  d.blocks = {1, 2, 3};
  d.sample = true;
  s.seqs.push_back(d);
  s.seqs.push_back(d);
  s.seqs.back().sample = false;
  ExecutorStep a = round_trip(sys, s);
  EXPECT_EQ(a.step, 11u);
  EXPECT_EQ(a.release, (std::vector<int>{0, 2}));
  ASSERT_EQ(a.seqs.size(), 3u);
  EXPECT_EQ(a.seqs[0].slot, 1);
  EXPECT_TRUE(a.seqs[0].begin);
  EXPECT_EQ(a.seqs[0].cached, (std::vector<int32_t>{7, 8}));
  EXPECT_EQ(a.seqs[0].start, 2);
  EXPECT_EQ(a.seqs[0].tokens, (std::vector<int32_t>{4, 5, 6}));
  EXPECT_EQ(a.seqs[0].blocks, (std::vector<int32_t>{9, 4}));
  EXPECT_TRUE(a.seqs[0].sample);
  EXPECT_EQ(a.seqs[0].sampling.seed, 3u);
  EXPECT_EQ(a.seqs[0].sampling.temperature, 0.5f);
  EXPECT_EQ(a.seqs[0].sampling.top_k, 9);
  EXPECT_EQ(a.seqs[1].slot, 3);
  EXPECT_FALSE(a.seqs[1].begin);
  EXPECT_EQ(a.seqs[1].start, 40);
  EXPECT_EQ(a.seqs[1].tokens, (std::vector<int32_t>{42}));
  EXPECT_EQ(a.seqs[1].blocks, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_TRUE(a.seqs[1].sample);
  EXPECT_FALSE(a.seqs[2].sample);
  EXPECT_EQ(a.sampled(), 2u);

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
