// Tests of the fake executor the scheduler tests rely on (tests/sched/fake_executor.hpp): it
// must refuse what model/executor.hpp says a real executor refuses, be a pure function of each
// slot's history, and fail exactly where it is told to.
#include "tests/sched/fake_executor.hpp"

#include <gtest/gtest.h>

#include <vector>

using rz::DecodeRequest;
using rz::Error;
using rz::PrefillRequest;
using rz_test::FakeExecutor;

namespace {

PrefillRequest pre(int slot, std::vector<int32_t> toks, uint64_t seed = 1) {
  PrefillRequest r;
  r.slot = slot;
  r.tokens = std::move(toks);
  r.sampling.seed = seed;
  return r;
}

}  // namespace

TEST(FakeExecutor, RefusesWhatARealExecutorRefuses) {
  FakeExecutor ex(2, 4, 50);
  const std::vector<PrefillRequest> out_of_range = {pre(2, {1})};
  EXPECT_THROW(ex.prefill(out_of_range), Error);
  const std::vector<PrefillRequest> empty = {pre(0, {})};
  EXPECT_THROW(ex.prefill(empty), Error);
  const std::vector<PrefillRequest> too_long = {pre(0, {1, 2, 3, 4, 5})};
  EXPECT_THROW(ex.prefill(too_long), Error);
  const std::vector<PrefillRequest> bad_token = {pre(0, {50})};
  EXPECT_THROW(ex.prefill(bad_token), Error);
  const std::vector<PrefillRequest> twice = {pre(0, {1}), pre(0, {2})};
  EXPECT_THROW(ex.prefill(twice), Error);
  const std::vector<DecodeRequest> inactive = {{1, 3}};
  EXPECT_THROW(ex.decode(inactive), Error);
  EXPECT_TRUE(ex.active_slots().empty()) << "a refused call does no work";

  const std::vector<PrefillRequest> ok = {pre(0, {1, 2, 3})};
  const auto t = ex.prefill(ok);
  EXPECT_THROW(ex.prefill(ok), Error) << "busy slot";
  const std::vector<DecodeRequest> d = {{0, t[0]}};
  const auto t2 = ex.decode(d);  // the slot now holds 4 tokens: full
  EXPECT_EQ(ex.slot_length(0), 4);
  const std::vector<DecodeRequest> d2 = {{0, t2[0]}};
  EXPECT_THROW(ex.decode(d2), Error) << "full slot";
  ex.release(0);
  EXPECT_FALSE(ex.slot_active(0));
  EXPECT_NO_THROW(ex.prefill(ok));
}

TEST(FakeExecutor, TokensArePureFunctionsOfSeedAndHistory) {
  FakeExecutor a(3, 32, 97), b(3, 32, 97);
  const std::vector<int32_t> prompt = {5, 6, 7};
  const std::vector<PrefillRequest> pa = {pre(0, prompt, 9), pre(1, {1, 2}, 4)};
  const std::vector<PrefillRequest> pb = {pre(2, prompt, 9)};
  auto ta = a.prefill(pa);
  auto tb = b.prefill(pb);
  EXPECT_EQ(ta[0], tb[0]) << "slot and neighbours do not matter";
  std::vector<int32_t> hist = prompt;
  EXPECT_EQ(ta[0], FakeExecutor::next_token(9, hist, 97));
  for (int i = 0; i < 5; ++i) {
    hist.push_back(ta[0]);
    const std::vector<DecodeRequest> da = {{0, ta[0]}, {1, ta[1]}};
    const std::vector<DecodeRequest> db = {{2, tb[0]}};
    ta = a.decode(da);
    tb = b.decode(db);
    EXPECT_EQ(ta[0], tb[0]);
    EXPECT_EQ(ta[0], FakeExecutor::next_token(9, hist, 97));
    EXPECT_EQ(a.kv(0), hist);
  }
  int differ = 0;
  for (uint64_t seed = 10; seed < 30; ++seed)
    differ += FakeExecutor::next_token(seed, prompt, 97) != FakeExecutor::next_token(9, prompt, 97);
  EXPECT_GT(differ, 10) << "the seed changes the stream";
  EXPECT_EQ(a.feed_mismatches, 0);
  const std::vector<DecodeRequest> wrong = {{0, (ta[0] + 1) % 97}};
  a.decode(wrong);
  EXPECT_EQ(a.feed_mismatches, 1);
}

TEST(FakeExecutor, FailsOnTheStepsItIsTold) {
  for (bool after : {false, true}) {
    FakeExecutor ex(2, 16, 50);
    ex.fail_on_steps({1});
    ex.fail_after_work = after;
    const std::vector<PrefillRequest> p0 = {pre(0, {1, 2})};
    const auto t = ex.prefill(p0);  // step 0
    const std::vector<PrefillRequest> p1 = {pre(1, {3})};
    EXPECT_THROW(ex.prefill(p1), Error);  // step 1
    EXPECT_EQ(ex.slot_active(1), after) << "work done before the throw only when asked";
    EXPECT_TRUE(ex.calls.back().threw);
    const std::vector<DecodeRequest> d = {{0, t[0]}};
    EXPECT_NO_THROW(ex.decode(d));  // step 2
    EXPECT_EQ(ex.steps, 3);
  }
}
