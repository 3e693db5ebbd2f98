// Tests of the fake executor the scheduler tests rely on (tests/sched/fake_executor.hpp): it must
// refuse what model/executor.hpp says a real executor refuses (with check_step's messages), be a
// pure function of each sequence's history whatever the chunking and the blocks, catch every
// wrong block table (unwritten, stale or overwritten rows; writes into computed rows), and fail
// exactly where it is told to.
#include "tests/sched/fake_executor.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using rz::Error;
using rz::StepSeq;
using rz_test::FakeExecutor;

namespace {

constexpr int kVocab = 97;

// A new sequence in `slot`: `cached` tokens already in the blocks, `tokens` computed now.
StepSeq begin(int slot, std::vector<int32_t> tokens, std::vector<int32_t> blocks, uint64_t seed = 1,
              std::vector<int32_t> cached = {}, bool sample = true) {
  StepSeq s;
  s.slot = slot;
  s.begin = true;
  s.sampling.seed = seed;
  s.start = static_cast<int>(cached.size());
  s.cached = std::move(cached);
  s.tokens = std::move(tokens);
  s.blocks = std::move(blocks);
  s.sample = sample;
  return s;
}

// The continuation of the sequence in `slot` at `start`.
StepSeq more(int slot, int start, std::vector<int32_t> tokens, std::vector<int32_t> blocks,
             bool sample = true) {
  StepSeq s;
  s.slot = slot;
  s.start = start;
  s.tokens = std::move(tokens);
  s.blocks = std::move(blocks);
  s.sample = sample;
  return s;
}

std::vector<int32_t> run(FakeExecutor& ex, std::vector<StepSeq> seqs) { return ex.step(seqs); }

std::string error_of(FakeExecutor& ex, std::vector<StepSeq> seqs) {
  try {
    ex.step(seqs);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

std::vector<int32_t> iota(int n, int32_t first) {
  std::vector<int32_t> v;
  for (int i = 0; i < n; ++i) v.push_back((first + 3 * i) % kVocab);
  return v;
}

std::vector<int32_t> cat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

TEST(FakeExecutor, RefusesWhatARealExecutorRefuses) {
  FakeExecutor ex(2, 8, 50, 4, 6);  // 2 slots, context 8, blocks of 4, 6 blocks
  EXPECT_EQ(ex.kv_block_size(), 4);
  EXPECT_EQ(ex.kv_blocks(), 6);
  EXPECT_NE(error_of(ex, {begin(2, {1}, {0})}).find("out of range"), std::string::npos);
  EXPECT_NE(error_of(ex, {begin(0, {}, {0})}).find("no tokens"), std::string::npos);
  EXPECT_NE(error_of(ex, {begin(0, iota(9, 1), {0, 1, 2})}).find("do not fit the context"),
            std::string::npos);
  EXPECT_NE(error_of(ex, {begin(0, {50}, {0})}).find("token id 50"), std::string::npos);
  EXPECT_NE(error_of(ex, {begin(0, {1}, {0}), begin(0, {2}, {1})}).find("twice"),
            std::string::npos);
  EXPECT_NE(error_of(ex, {more(1, 0, {3}, {0})}).find("is not active"), std::string::npos);
  EXPECT_NE(error_of(ex, {begin(0, iota(5, 1), {0})}).find("KV blocks for 5 tokens"),
            std::string::npos);
  EXPECT_NE(error_of(ex, {begin(0, {1}, {6})}).find("KV block 6 out of range"), std::string::npos);
  StepSeq bad_start = begin(0, {1}, {0}, 1, {4, 5});
  bad_start.start = 1;
  EXPECT_NE(error_of(ex, {bad_start}).find("cached tokens"), std::string::npos);
  EXPECT_NE(error_of(ex, {}).find("no entries"), std::string::npos);
  EXPECT_TRUE(ex.active_slots().empty()) << "a refused step does no work";
  EXPECT_EQ(ex.rows_written, 0);
  ASSERT_EQ(ex.calls.size(), 10u) << "refused steps are recorded";
  EXPECT_TRUE(ex.calls.back().threw);

  const auto t = run(ex, {begin(0, {1, 2, 3}, {0})});
  EXPECT_NE(error_of(ex, {begin(0, {1}, {1})}).find("is busy"), std::string::npos);
  EXPECT_NE(error_of(ex, {more(0, 2, {t[0]}, {0})}).find("holds 3 tokens, the step starts at 2"),
            std::string::npos);
  const auto t2 = run(ex, {more(0, 3, {t[0], 7, 8, 9, 10}, {0, 1})});  // 8 tokens: full
  EXPECT_EQ(ex.slot_length(0), 8);
  EXPECT_NE(error_of(ex, {more(0, 8, {t2[0]}, {0, 1, 2})}).find("do not fit"), std::string::npos);
  EXPECT_THROW(ex.release(2), Error);
  ex.release(0);
  EXPECT_FALSE(ex.slot_active(0));
  EXPECT_NO_THROW(run(ex, {begin(0, {1, 2, 3}, {2})}));
  EXPECT_TRUE(ex.kv_clean()) << ex.kv_report();
}

TEST(FakeExecutor, TokensArePureFunctionsOfSeedAndHistory) {
  FakeExecutor a(3, 32, kVocab, 4, 24), b(3, 32, kVocab, 4, 24);
  const std::vector<int32_t> prompt = {5, 6, 7, 8, 9, 10};
  auto ta = run(a, {begin(0, prompt, {3, 1}, 9), begin(1, {1, 2}, {0}, 4)});
  auto tb = run(b, {begin(2, prompt, {7, 8}, 9)});
  EXPECT_EQ(ta[0], tb[0]) << "slot, blocks and neighbours do not matter";
  std::vector<int32_t> hist = prompt;
  EXPECT_EQ(ta[0], FakeExecutor::next_token(9, hist, kVocab));
  std::vector<int32_t> tab_a = {3, 1}, tab_b = {7, 8};
  for (int i = 0; i < 5; ++i) {
    const int pos = static_cast<int>(hist.size());
    hist.push_back(ta[0]);
    if (pos % 4 == 0) {
      tab_a.push_back(10 + i);
      tab_b.push_back(16 + i);
    }
    const int32_t a1 = ta[1];
    ta = run(a, {more(0, pos, {ta[0]}, tab_a), more(1, 2 + i, {a1}, {0, 2})});
    tb = run(b, {more(2, pos, {tb[0]}, tab_b)});
    EXPECT_EQ(ta[0], tb[0]);
    EXPECT_EQ(ta[0], FakeExecutor::next_token(9, hist, kVocab));
    EXPECT_EQ(a.history(0), hist);
  }
  int differ = 0;
  for (uint64_t seed = 10; seed < 30; ++seed)
    differ += FakeExecutor::next_token(seed, prompt, kVocab) !=
              FakeExecutor::next_token(9, prompt, kVocab);
  EXPECT_GT(differ, 10) << "the seed changes the stream";
  EXPECT_TRUE(a.kv_clean()) << a.kv_report();
  EXPECT_TRUE(b.kv_clean()) << b.kv_report();
}

TEST(FakeExecutor, ChunkingAndACachedPrefixDoNotChangeTheTokens) {
  const auto prompt = iota(11, 4);
  const int32_t want = FakeExecutor::next_token(5, prompt, kVocab);
  {  // one step
    FakeExecutor ex(1, 16, kVocab, 4, 4);
    EXPECT_EQ(run(ex, {begin(0, prompt, {0, 1, 2}, 5)}), std::vector<int32_t>{want});
  }
  {  // three chunks: only the last samples
    FakeExecutor ex(1, 16, kVocab, 4, 4);
    const std::vector<int32_t> tab = {2, 0, 3};
    EXPECT_TRUE(
        run(ex, {begin(0, {prompt.begin(), prompt.begin() + 3}, tab, 5, {}, false)}).empty());
    EXPECT_TRUE(
        run(ex, {more(0, 3, {prompt.begin() + 3, prompt.begin() + 9}, tab, false)}).empty());
    EXPECT_EQ(run(ex, {more(0, 9, {prompt.begin() + 9, prompt.end()}, tab)}),
              std::vector<int32_t>{want});
    ASSERT_EQ(ex.calls.size(), 3u);
    EXPECT_EQ(ex.calls[1].n_tokens, std::vector<int>{6});
    EXPECT_EQ(ex.calls[1].starts, std::vector<int>{3});
    EXPECT_TRUE(ex.calls[1].outputs.empty());
    EXPECT_TRUE(ex.kv_clean()) << ex.kv_report();
  }
  {  // a prefix another sequence computed: only the rest is computed
    FakeExecutor ex(2, 16, kVocab, 4, 6);
    const auto other = cat({prompt.begin(), prompt.begin() + 8}, {1, 2});
    run(ex, {begin(0, other, {4, 5, 0}, 77)});
    const int64_t written = ex.rows_written;
    const std::vector<int32_t> cached(prompt.begin(), prompt.begin() + 8);
    EXPECT_EQ(run(ex, {begin(1, {prompt.begin() + 8, prompt.end()}, {4, 5, 1}, 5, cached)}),
              std::vector<int32_t>{want});
    EXPECT_EQ(ex.rows_written - written, 3);
    EXPECT_EQ(ex.history(1), prompt);
    EXPECT_TRUE(ex.kv_clean()) << ex.kv_report();
  }
}

TEST(FakeExecutor, CatchesUnwrittenStaleAndOverwrittenRows) {
  const auto prompt = iota(8, 2);
  {  // a "cached" prefix whose blocks were never written
    FakeExecutor ex(1, 16, kVocab, 4, 4);
    ex.throw_on_kv_error = false;
    const std::vector<int32_t> cached(prompt.begin(), prompt.begin() + 4);
    const auto t = run(ex, {begin(0, {prompt.begin() + 4, prompt.end()}, {0, 1}, 3, cached)});
    EXPECT_EQ(ex.kv_mismatches, 4);
    EXPECT_NE(t[0], FakeExecutor::next_token(3, prompt, kVocab)) << "sampled from what it read";
    EXPECT_NE(ex.kv_report().find("holds nothing"), std::string::npos) << ex.kv_report();
  }
  {  // a prefix block that holds another sequence's tokens (stale)
    FakeExecutor ex(2, 16, kVocab, 4, 4);
    ex.throw_on_kv_error = false;
    run(ex, {begin(0, iota(6, 50), {0, 1})});
    ex.release(0);
    const std::vector<int32_t> cached(prompt.begin(), prompt.begin() + 4);
    run(ex, {begin(1, {prompt.begin() + 4, prompt.end()}, {0, 2}, 3, cached)});
    EXPECT_EQ(ex.kv_mismatches, 4);
    EXPECT_EQ(ex.shared_writes, 0) << "slot 0 was released: its rows are nobody's";
  }
  {  // a running sequence's block overwritten by another one; its next step reads the damage
    FakeExecutor ex(2, 16, kVocab, 4, 4);
    ex.throw_on_kv_error = false;
    auto a = run(ex, {begin(0, prompt, {0, 1}, 3)});
    run(ex, {begin(1, {9, 9, 9}, {1}, 4)});
    EXPECT_EQ(ex.shared_writes, 3);
    EXPECT_EQ(ex.kv_mismatches, 0);
    run(ex, {more(0, 8, {a[0]}, {0, 1, 2})});
    EXPECT_EQ(ex.kv_mismatches, 3);
  }
  {  // same position, wrong token (a block of the same prefix but another content)
    FakeExecutor ex(2, 16, kVocab, 4, 4);
    ex.throw_on_kv_error = false;
    run(ex, {begin(0, cat({1, 2, 3, 90}, {5}), {0, 1})});
    run(ex, {begin(1, {5}, {0, 2}, 1, {1, 2, 3, 4})});
    EXPECT_EQ(ex.kv_mismatches, 1);
    EXPECT_NE(ex.kv_report().find("token 90 of position 3"), std::string::npos) << ex.kv_report();
  }
  {  // the same tokens at the same positions, computed after another prefix
    FakeExecutor ex(2, 16, kVocab, 4, 4);
    ex.throw_on_kv_error = false;
    run(ex, {begin(0, {1, 2, 3, 4, 5, 6, 7, 8}, {0, 1})});
    run(ex, {begin(1, {9, 9, 9, 9}, {2})});
    ex.release(1);
    run(ex, {begin(1, {10}, {2, 1, 3}, 1, {9, 9, 9, 9, 5, 6, 7, 8})});
    EXPECT_EQ(ex.kv_mismatches, 4);
    EXPECT_NE(ex.kv_report().find("after another prefix"), std::string::npos) << ex.kv_report();
  }
  {  // the block table names one block twice
    FakeExecutor ex(1, 16, kVocab, 4, 4);
    ex.throw_on_kv_error = false;
    run(ex, {begin(0, prompt, {2, 2})});
    EXPECT_GT(ex.kv_mismatches, 0);
  }
}

TEST(FakeExecutor, CatchesWritesIntoSharedAndComputedRows) {
  const auto prompt = iota(10, 7);
  {  // sharing done right: the shared block is read, the new tokens go to the sequence's own
    FakeExecutor ex(2, 16, kVocab, 4, 6);
    ex.throw_on_kv_error = false;
    run(ex, {begin(0, prompt, {0, 1, 2})});
    const std::vector<int32_t> cached(prompt.begin(), prompt.begin() + 4);
    const auto t = run(ex, {begin(1, {1, 2, 3}, {0, 3}, 8, cached)});
    EXPECT_EQ(t[0], FakeExecutor::next_token(8, cat(cached, {1, 2, 3}), kVocab));
    EXPECT_TRUE(ex.kv_clean()) << ex.kv_report();
  }
  {  // the second sequence writes into the first one's computed second block
    FakeExecutor ex(2, 16, kVocab, 4, 6);
    ex.throw_on_kv_error = false;
    run(ex, {begin(0, prompt, {0, 1, 2})});
    const std::vector<int32_t> cached(prompt.begin(), prompt.begin() + 4);
    run(ex, {begin(1, {1, 2, 3}, {0, 1}, 8, cached)});
    EXPECT_EQ(ex.shared_writes, 3);
    EXPECT_NE(ex.kv_report().find("writes position 4 into block 1"), std::string::npos)
        << ex.kv_report();
  }
  {  // two new sequences of one step given the same block
    FakeExecutor ex(2, 16, kVocab, 4, 6);
    ex.throw_on_kv_error = false;
    run(ex, {begin(0, {1, 2}, {3}), begin(1, {4, 5}, {3})});
    EXPECT_EQ(ex.shared_writes, 2);
  }
  {  // the same block in the same step: one sequence writes what the other reads as its prefix
    FakeExecutor ex(2, 16, kVocab, 4, 6);
    ex.throw_on_kv_error = false;
    run(ex, {begin(0, {1, 2, 3, 4, 5}, {0, 1})});
    run(ex, {more(0, 5, {6}, {0, 1}, true), begin(1, {5}, {0, 1}, 1, {1, 2, 3, 4})});
    EXPECT_EQ(ex.shared_writes, 1);
  }
}

TEST(FakeExecutor, AWrongTableThrowsByDefault) {
  FakeExecutor ex(2, 16, kVocab, 4, 4);
  const auto a = run(ex, {begin(0, {1, 2, 3, 4, 5}, {0, 1})});
  try {
    run(ex, {begin(1, {6}, {2, 3}, 1, {1, 2, 3, 9})});  // block 2 never written
    ADD_FAILURE() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("wrong KV block table"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(ex.calls.back().threw);
  EXPECT_EQ(ex.kv_mismatches, 4);
  EXPECT_THROW(run(ex, {more(0, 5, {a[0]}, {0, 2})}), Error) << "writes into slot 1's block 2";
  EXPECT_GT(ex.shared_writes, 0);
}

TEST(FakeExecutor, CountsTokensThatAreNotTheLastSampled) {
  FakeExecutor ex(1, 16, kVocab, 4, 4);
  const auto t = run(ex, {begin(0, {1, 2}, {0})});
  EXPECT_EQ(ex.feed_mismatches, 0);
  const auto t2 = run(ex, {more(0, 2, {t[0]}, {0})});
  EXPECT_EQ(ex.feed_mismatches, 0);
  run(ex, {more(0, 3, {static_cast<int32_t>((t2[0] + 1) % kVocab)}, {0, 1})});
  EXPECT_EQ(ex.feed_mismatches, 1);
  // After a chunk that did not sample, any token may follow.
  FakeExecutor ex2(1, 16, kVocab, 4, 4);
  run(ex2, {begin(0, {1, 2}, {0}, 1, {}, false)});
  run(ex2, {more(0, 2, {40}, {0})});
  EXPECT_EQ(ex2.feed_mismatches, 0);
}

TEST(FakeExecutor, FailsOnTheStepsItIsTold) {
  for (bool after : {false, true}) {
    FakeExecutor ex(2, 16, 50, 4, 8);
    ex.fail_on_steps({1});
    ex.fail_after_work = after;
    const auto t = run(ex, {begin(0, {1, 2}, {0})});     // step 0
    EXPECT_THROW(run(ex, {begin(1, {3}, {1})}), Error);  // step 1
    EXPECT_EQ(ex.slot_active(1), after) << "work done before the throw only when asked";
    EXPECT_EQ(ex.row(1, 0).first, after ? 3 : -1);
    ASSERT_EQ(ex.calls.size(), 2u);
    EXPECT_TRUE(ex.calls.back().threw);
    EXPECT_TRUE(ex.calls.back().outputs.empty());
    EXPECT_NE(ex.calls.back().error.find("injected failure at step 1"), std::string::npos);
    EXPECT_NO_THROW(run(ex, {more(0, 2, {t[0]}, {0})}));  // step 2
    EXPECT_EQ(ex.steps, 3);
    EXPECT_EQ(ex.calls.size(), 3u);
  }
  FakeExecutor ex(2, 16, 50, 4, 8);
  ex.fail_if = [](const FakeExecutor::Call& c) { return c.tokens() > 3; };
  EXPECT_NO_THROW(run(ex, {begin(0, {1, 2, 3}, {0})}));
  EXPECT_THROW(run(ex, {begin(1, {1, 2, 3, 4}, {1})}), Error);
  ex.release(1);
  ASSERT_EQ(ex.releases.size(), 1u);
  EXPECT_EQ(ex.releases[0].slot, 1);
  EXPECT_EQ(ex.releases[0].before_step, 2);
}
