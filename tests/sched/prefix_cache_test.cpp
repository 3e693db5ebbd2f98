// Tests of the scheduler's automatic prefix caching (sched/batch_state.hpp, the prefix-cache rule
// of its policy) against the paged fake executor, which checks that every cached block it is
// told to reuse really holds those tokens: cached_tokens of a repeated or extended prompt,
// multi-turn chats that reuse generated tokens, sharing with a running request, reservations of
// revived blocks, eviction under memory pressure, and the same greedy output with the cache on
// and off and for any token budget.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "sched/batch_state.hpp"
#include "sched/driver.hpp"
#include "sched/step.hpp"
#include "tests/sched/event_log.hpp"
#include "tests/sched/fake_executor.hpp"

using namespace rz;
using rz_test::EventLog;
using rz_test::expect_clean;
using rz_test::FakeExecutor;
using rz_test::reference_tokens;

namespace {

constexpr int kVocab = 500;
constexpr int kBs = 4;

BatchConfig config(int slots, int context, int64_t blocks, bool prefix = true) {
  BatchConfig c;
  c.max_slots = slots;
  c.max_context = context;
  c.max_queue = 64;
  c.n_vocab = kVocab;
  c.kv_block_size = kBs;
  c.kv_blocks = blocks;
  c.prefix_cache = prefix;
  return c;
}

std::vector<int32_t> tokens(int n, int32_t first) {
  std::vector<int32_t> v;
  for (int i = 0; i < n; ++i) v.push_back((first + 11 * i) % kVocab);
  return v;
}

std::vector<int32_t> cat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

BatchRequest make_req(uint64_t id, std::vector<int32_t> prompt, int max_tokens, uint64_t seed = 0) {
  BatchRequest r;
  r.ref = {id, 7};
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.seed = seed == 0 ? id : seed;
  return r;
}

// The first entry the executor saw for a request (its begin entry), recorded from the plans.
struct Begin {
  int start = -1;
  std::vector<int32_t> cached;
  size_t n_tokens = 0;
};

// run_until_idle, remembering each request's begin entry and checking the budget of each step.
class Runner {
 public:
  Runner(BatchedDecodeState& s, FakeExecutor& ex) : s_(s), ex_(ex) {}
  EventLog log;
  std::map<uint64_t, Begin> begins;
  int max_step = 0;
  std::function<void(const SchedEvent&)> on_event;  // after the log, may submit or cancel

  bool step() {
    StepPlan p = s_.plan();
    deliver(p.events);
    int n = 0;
    for (size_t i = 0; i < p.seqs.size(); ++i) {
      const StepSeq& e = p.seqs[i];
      n += static_cast<int>(e.tokens.size());
      if (e.begin) begins[p.requests[i].id] = Begin{e.start, e.cached, e.tokens.size()};
    }
    max_step = std::max(max_step, n);
    const StepResult r = execute_step(ex_, p);
    if (p.idle()) return false;
    deliver(apply_step_result(s_, p, r));
    return true;
  }
  void run() {
    for (int guard = 0; guard < 100000; ++guard)
      if (!step() && !s_.has_work()) return;
    ADD_FAILURE() << "did not finish";
  }

 private:
  void deliver(const std::vector<SchedEvent>& evs) {
    for (const auto& e : evs) {
      log(e);
      if (on_event) on_event(e);
    }
  }
  BatchedDecodeState& s_;
  FakeExecutor& ex_;
};

}  // namespace

TEST(PrefixCache, ARepeatedPrefixReusesItsWholeCachedBlocks) {
  // The first request computes 11 prompt tokens and 2 generated ones (the last one's KV is never
  // computed): blocks 0 and 1 (tokens 0..7) and block 2 (tokens 8..10 and the first generated
  // token) are full and cached.
  const auto first = tokens(11, 3);
  BatchedDecodeState s(config(1, 64, 16));
  FakeExecutor ex(1, 64, kVocab, kBs, 16);
  Runner run(s, ex);
  ASSERT_TRUE(s.submit(make_req(1, first, 2)).ok());
  run.run();
  EXPECT_EQ(run.log.at(1).finished_event.usage.cached_tokens, 0);
  EXPECT_EQ(s.kv().cached_blocks(), 3);
  EXPECT_EQ(s.kv_blocks_used(), 0);
  EXPECT_EQ(s.counters().prefix_lookups, 1u);
  EXPECT_EQ(s.counters().prefix_hit_tokens, 0u);

  struct Case {
    std::vector<int32_t> prompt;
    int cached;  // k * kBs
  };
  const std::vector<Case> cases = {
      {cat({first.begin(), first.begin() + 9}, {77, 78}), 8},  // 2 blocks + 1 token shared
      {cat({first.begin(), first.begin() + 8}, {77}), 8},      // exactly 2 blocks shared
      {{first.begin(), first.begin() + 8}, 4},  // all cached: the last block is recomputed
      {{first.begin(), first.begin() + 4}, 0},  // one block, all of the prompt: nothing reused
      {{first.begin(), first.begin() + 7}, 4},
      {cat({first.begin(), first.begin() + 3}, {first[4], first[3]}), 0},  // differs in block 0
      {cat(tokens(4, 200), {first.begin() + 4, first.end()}), 0},  // block 1 after another 0
      {first, 8},
  };
  uint64_t id = 2, hits = 0, computed = first.size();
  for (const Case& c : cases) {
    SCOPED_TRACE("request " + std::to_string(id));
    ASSERT_TRUE(s.submit(make_req(id, c.prompt, 3)).ok());
    run.run();
    const auto& l = run.log.at(id);
    ASSERT_TRUE(l.finished);
    EXPECT_EQ(l.finished_event.usage.cached_tokens, c.cached);
    EXPECT_EQ(l.tokens, reference_tokens(c.prompt, id, 3, kVocab));
    const Begin& b = run.begins.at(id);
    EXPECT_EQ(b.start, c.cached);
    EXPECT_EQ(b.cached, std::vector<int32_t>(c.prompt.begin(), c.prompt.begin() + c.cached));
    EXPECT_EQ(b.n_tokens, c.prompt.size() - static_cast<size_t>(c.cached))
        << "only the rest is computed";
    hits += static_cast<uint64_t>(c.cached);
    computed += c.prompt.size() - static_cast<size_t>(c.cached);
    ++id;
  }
  EXPECT_EQ(s.counters().prefix_lookups, 1u + cases.size());
  EXPECT_EQ(s.counters().prefix_hit_tokens, hits);
  EXPECT_EQ(s.counters().prefill_tokens, computed) << "prompt tokens computed, cached ones not";
  EXPECT_EQ(s.kv_blocks_used(), 0);
  EXPECT_EQ(s.kv().free_blocks(), 16);
  expect_clean(run.log, ex);
}

TEST(PrefixCache, WithoutThePrefixCacheNothingIsReused) {
  const auto p = tokens(13, 5);
  BatchedDecodeState s(config(1, 64, 16, false));
  FakeExecutor ex(1, 64, kVocab, kBs, 16);
  Runner run(s, ex);
  for (uint64_t id = 1; id <= 3; ++id) {
    ASSERT_TRUE(s.submit(make_req(id, p, 4)).ok());
    run.run();
    EXPECT_EQ(run.log.at(id).finished_event.usage.cached_tokens, 0);
    EXPECT_EQ(run.begins.at(id).start, 0);
    EXPECT_EQ(run.log.at(id).tokens, reference_tokens(p, id, 4, kVocab));
  }
  EXPECT_EQ(s.kv().cached_blocks(), 0);
  EXPECT_EQ(s.counters().prefix_lookups, 0u);
  EXPECT_EQ(s.counters().prefix_hit_tokens, 0u);
  expect_clean(run.log, ex);
}

TEST(PrefixCache, AMultiTurnChatReusesThePreviousPromptAndItsGeneratedTokens) {
  for (bool prefix : {true, false}) {
    SCOPED_TRACE(prefix ? "prefix cache" : "no prefix cache");
    BatchedDecodeState s(config(2, 128, 64, prefix));
    FakeExecutor ex(2, 128, kVocab, kBs, 64);
    Runner run(s, ex);
    std::vector<int32_t> prompt = tokens(6, 40);
    // (new tokens of the turn, max_tokens): each turn = previous prompt + its answer + new.
    const std::vector<std::pair<int, int>> turns = {{0, 7}, {3, 5}, {9, 1}, {2, 6}, {1, 4}};
    int prev_computed = 0;  // KV computed by the previous turn: its prompt and answer but the last
    int prev_prompt = 0;
    int answer_reused = 0;  // turns that reused blocks of the previous answer
    uint64_t id = 1;
    for (const auto& [add, max_tokens] : turns) {
      SCOPED_TRACE("turn " + std::to_string(id));
      if (id > 1) {
        const auto& prev = run.log.at(id - 1);
        prompt = cat(prompt, prev.tokens);
        prompt = cat(prompt, tokens(add, static_cast<int32_t>(100 * id)));
      }
      // A request beside it, with another prompt, must not disturb it.
      ASSERT_TRUE(s.submit(make_req(100 + id, tokens(9, static_cast<int32_t>(id)), 5)).ok());
      ASSERT_TRUE(s.submit(make_req(id, prompt, max_tokens)).ok());
      run.run();
      const auto& l = run.log.at(id);
      ASSERT_TRUE(l.finished);
      EXPECT_EQ(l.tokens, reference_tokens(prompt, id, max_tokens, kVocab));
      const int n = static_cast<int>(prompt.size());
      const int want = prefix ? std::min(prev_computed / kBs, (n - 1) / kBs) * kBs : 0;
      EXPECT_EQ(l.finished_event.usage.cached_tokens, want);
      answer_reused += want > prev_prompt ? 1 : 0;
      prev_prompt = n;
      prev_computed = n + static_cast<int>(l.tokens.size()) - 1;
      ++id;
    }
    EXPECT_EQ(answer_reused, prefix ? 3 : 0);
    EXPECT_EQ(s.kv_blocks_used(), 0);
    expect_clean(run.log, ex);
  }
}

TEST(PrefixCache, ARunningRequestsPromptIsSharedWhileItRuns) {
  const auto shared = tokens(12, 9);
  BatchedDecodeState s(config(3, 64, 24));
  FakeExecutor ex(3, 64, kVocab, kBs, 24);
  Runner run(s, ex);
  ASSERT_TRUE(s.submit(make_req(1, cat(shared, {1, 2}), 20)).ok());
  run.step();  // 1's prompt: blocks 0..2 full and registered
  ASSERT_EQ(s.kv().cached_blocks(), 3);
  ASSERT_TRUE(s.submit(make_req(2, cat(shared, {3}), 20)).ok());
  ASSERT_TRUE(s.submit(make_req(3, shared, 20)).ok());
  run.step();
  EXPECT_EQ(s.slot(1).cached_tokens, 12);
  EXPECT_EQ(s.slot(2).cached_tokens, 8) << "the whole prompt is cached: its last block is not";
  for (int i = 0; i < 2; ++i)
    EXPECT_EQ(s.slot(1).blocks[static_cast<size_t>(i)], s.slot(0).blocks[static_cast<size_t>(i)]);
  EXPECT_EQ(s.kv().refs(s.slot(0).blocks[0]), 3);
  // 3 computed its last block itself (its last token needs its logits); once registered, that
  // copy moved onto 1's cached block.
  EXPECT_EQ(run.begins.at(3).n_tokens, 4u);
  EXPECT_EQ(s.slot(2).blocks[2], s.slot(0).blocks[2]);
  EXPECT_EQ(s.kv().refs(s.slot(0).blocks[2]), 3);
  run.run();
  EXPECT_EQ(run.log.at(1).tokens, reference_tokens(cat(shared, {1, 2}), 1, 20, kVocab));
  EXPECT_EQ(run.log.at(2).tokens, reference_tokens(cat(shared, {3}), 2, 20, kVocab));
  EXPECT_EQ(run.log.at(3).tokens, reference_tokens(shared, 3, 20, kVocab));
  EXPECT_EQ(s.kv_blocks_used(), 0);
  EXPECT_EQ(s.kv().free_blocks(), 24);
  expect_clean(run.log, ex);
}

// Two requests with the same prompt admitted in one step both compute it; when the second one
// registers its copy it moves onto the first one's cached blocks, so the blocks of its own answer
// chain onto the cached prefix: a follow-up of prompt + that answer reuses all of it.
TEST(PrefixCache, ADuplicateComputedAtOnceStillCachesWhatFollowsIt) {
  const auto prompt = tokens(13, 5);  // 3 full blocks and one token
  BatchedDecodeState s(config(2, 64, 32));
  FakeExecutor ex(2, 64, kVocab, kBs, 32);
  Runner run(s, ex);
  ASSERT_TRUE(s.submit(make_req(1, prompt, 10)).ok());
  ASSERT_TRUE(s.submit(make_req(2, prompt, 10)).ok());
  run.step();  // both prompts in one step: neither could reuse the other's blocks
  EXPECT_EQ(s.slot(0).cached_tokens, 0);
  EXPECT_EQ(s.slot(1).cached_tokens, 0);
  for (size_t i = 0; i < 3; ++i)
    EXPECT_EQ(s.slot(1).blocks[i], s.slot(0).blocks[i]) << "moved onto the cached block " << i;
  EXPECT_EQ(s.kv().cached_blocks(), 3);
  run.run();
  const auto& second = run.log.at(2);
  ASSERT_TRUE(second.finished);
  EXPECT_NE(second.tokens, run.log.at(1).tokens) << "the seeds differ, so the answers do";
  // prompt + the second answer: 23 tokens, of which 22 had their KV computed (5 whole blocks),
  // and a prompt reuses at most (23 - 1) / 4 = 5 blocks.
  const auto follow = cat(prompt, second.tokens);
  ASSERT_TRUE(s.submit(make_req(3, follow, 2)).ok());
  run.run();
  EXPECT_EQ(run.log.at(3).finished_event.usage.cached_tokens, 20);
  EXPECT_EQ(run.log.at(3).tokens, reference_tokens(follow, 3, 2, kVocab));
  EXPECT_EQ(s.kv_blocks_used(), 0);
  expect_clean(run.log, ex);
}

TEST(PrefixCache, RevivedCachedBlocksCountAgainstTheFreeBlocks) {
  // 4 blocks. A leaves its two prompt blocks cached and unreferenced (free, evictable). R runs
  // with 1 block taken and 1 reserved. B reuses A's 2 blocks and needs 1 more: if reviving them
  // were not counted, B would fit (1 <= 3 free - 1 promised), take the last free block, and R
  // would find no block for its second one. B must wait for R instead.
  BatchedDecodeState s(config(2, 64, 4));
  FakeExecutor ex(2, 64, kVocab, kBs, 4);
  Runner run(s, ex);
  const auto a = tokens(8, 1);
  ASSERT_TRUE(s.submit(make_req(1, a, 1)).ok());
  run.run();
  ASSERT_EQ(s.kv().cached_blocks(), 2);
  ASSERT_EQ(s.kv().free_blocks(), 4);
  ASSERT_TRUE(s.submit(make_req(2, tokens(2, 300), 6)).ok());  // R: 8 tokens, 2 blocks
  run.step();
  ASSERT_TRUE(s.submit(make_req(3, cat(a, {5}), 3)).ok());  // B: 12 tokens, 3 blocks, 2 cached
  bool b_waited = false;
  for (int g = 0; g < 100 && s.where(2) != BatchedDecodeState::Where::unknown; ++g) {
    ASSERT_NO_THROW(run.step());
    if (s.where(2) == BatchedDecodeState::Where::running)
      b_waited |= s.where(3) == BatchedDecodeState::Where::queued;
    ASSERT_FALSE(s.where(3) == BatchedDecodeState::Where::running &&
                 s.where(2) == BatchedDecodeState::Where::running)
        << "B was admitted beside R";
  }
  EXPECT_TRUE(b_waited);
  run.run();
  EXPECT_TRUE(run.log.at(2).finished);
  ASSERT_TRUE(run.log.at(3).finished) << run.log.at(3).failed_event.message;
  EXPECT_EQ(run.log.at(3).finished_event.usage.cached_tokens, 8);
  EXPECT_EQ(run.log.at(3).tokens, reference_tokens(cat(a, {5}), 3, 3, kVocab));
  expect_clean(run.log, ex);
}

TEST(PrefixCache, AFinishedSequenceLosesItsTailFirst) {
  // 4 blocks. A leaves 3 cached blocks; B needs 2 blocks while only one has never been used, so
  // one of A's is evicted: its last one. A's prompt again then still reuses its first two blocks.
  BatchedDecodeState s(config(1, 64, 4));
  FakeExecutor ex(1, 64, kVocab, kBs, 4);
  Runner run(s, ex);
  const auto a = tokens(12, 7);
  ASSERT_TRUE(s.submit(make_req(1, a, 1)).ok());
  run.run();
  ASSERT_EQ(s.kv().cached_blocks(), 3);
  ASSERT_TRUE(s.submit(make_req(2, tokens(4, 400), 5)).ok());  // 8 tokens of KV: 2 blocks
  run.run();
  EXPECT_EQ(s.kv().stats().evictions, 1u);
  ASSERT_TRUE(s.submit(make_req(3, a, 2)).ok());
  run.run();
  EXPECT_EQ(run.log.at(3).finished_event.usage.cached_tokens, 8);
  EXPECT_EQ(run.log.at(3).tokens, reference_tokens(a, 3, 2, kVocab));
  expect_clean(run.log, ex);
}

TEST(PrefixCache, MemoryPressureEvictsAndEverythingCompletes) {
  // 3 slots and 18 blocks of 4: each request reserves 6 blocks (20 prompt + 4 generated), so the
  // running requests may reserve the whole cache, and 40 distinct prompts of 5 full blocks each
  // cannot all stay cached. Every tenth request repeats an earlier prompt: it hits when that is
  // still cached and recomputes it when evicted, correctly either way.
  for (int budget : {3, 16, 512}) {
    SCOPED_TRACE("max_step_tokens " + std::to_string(budget));
    BatchConfig cfg = config(3, 64, 18);
    cfg.max_step_tokens = budget;
    BatchedDecodeState s(cfg);
    FakeExecutor ex(3, 64, kVocab, kBs, 18);
    Runner run(s, ex);
    std::map<uint64_t, std::vector<int32_t>> prompts;
    uint64_t id = 1;
    int64_t max_cached = 0;
    for (int wave = 0; wave < 20; ++wave) {
      for (int k = 0; k < 2; ++k, ++id) {
        auto p = id % 10 == 0 ? prompts.at(id - 7) : tokens(20, static_cast<int32_t>(13 * id));
        ASSERT_TRUE(s.submit(make_req(id, p, 4)).ok());
        prompts[id] = p;
      }
      for (int i = 0; i < 3; ++i) {
        ASSERT_NO_THROW(run.step());
        max_cached = std::max(max_cached, s.kv().cached_blocks());
        ASSERT_LE(s.kv_blocks_used(), 18);
      }
    }
    run.run();
    for (const auto& [rid, p] : prompts) {
      SCOPED_TRACE("request " + std::to_string(rid));
      const auto& l = run.log.at(rid);
      ASSERT_TRUE(l.finished) << l.failed_event.message;
      EXPECT_EQ(l.reason, FinishReason::length);
      EXPECT_EQ(l.tokens, reference_tokens(p, rid, 4, kVocab));
    }
    EXPECT_GT(s.kv().stats().evictions, 0u);
    EXPECT_LE(max_cached, 18);
    EXPECT_EQ(s.kv_blocks_used(), 0);
    EXPECT_EQ(s.kv().free_blocks(), 18);
    EXPECT_EQ(s.kv().referenced_blocks(), 0);
    EXPECT_LE(run.max_step, budget);
    EXPECT_FALSE(s.has_work());
    EXPECT_TRUE(ex.active_slots().empty());
    expect_clean(run.log, ex);
  }
}

namespace {

// A workload with shared prefixes, identical prompts, follow-up turns, joins, recycles and
// cancellations whose outcome does not depend on timing (a cancel from the sink at a given token
// index, or right after submit), submitted in waves.
struct Workload {
  struct Req {
    BatchRequest r;
    int cancel_at = -1;           // cancel from the sink at this token index
    bool cancel_at_once = false;  // cancel right after submit (still queued)
    uint64_t follow = 0;          // submitted when this request finishes: its prompt + answer + r
  };
  std::vector<std::vector<Req>> waves;
  std::vector<Req> follow_ups;
};

Workload make_workload() {
  std::mt19937_64 rng(2024);
  auto pick = [&rng](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const std::vector<std::vector<int32_t>> systems = {tokens(5, 1), tokens(8, 50), tokens(13, 99)};
  Workload w;
  uint64_t id = 1;
  for (int wave = 0; wave < 8; ++wave) {
    std::vector<Workload::Req> reqs;
    for (int k = pick(1, 4); k > 0; --k, ++id) {
      Workload::Req q;
      std::vector<int32_t> prompt = systems[static_cast<size_t>(pick(0, 2))];
      for (int n = pick(0, 9); n > 0; --n) prompt.push_back(pick(0, kVocab - 1));
      q.r = make_req(id, prompt, pick(0, 4) == 0 ? 0 : pick(1, 12), id % 4 == 0 ? 7 : 0);
      q.r.ignore_eos = id % 5 == 0;
      if (id % 7 == 3) q.cancel_at = pick(0, 3);
      if (id % 11 == 5) q.cancel_at_once = true;
      reqs.push_back(q);
      if (id % 3 == 0) {  // the same prompt again, another seed
        Workload::Req again = q;
        ++id;
        again.r.ref.id = id;
        again.r.sampling.seed = id;
        again.cancel_at = -1;
        again.cancel_at_once = false;
        reqs.push_back(again);
      }
    }
    w.waves.push_back(reqs);
  }
  // Follow-up turns of a few finished requests (never of a cancelled one).
  for (uint64_t of : {2, 6, 9, 14}) {
    Workload::Req q;
    std::vector<int32_t> add;
    for (int n = pick(1, 5); n > 0; --n) add.push_back(pick(0, kVocab - 1));
    q.r = make_req(1000 + of, add, pick(1, 8));
    q.follow = of;
    w.follow_ups.push_back(q);
  }
  return w;
}

struct Outcome {
  std::vector<int32_t> tokens;
  bool failed = false;
  FinishReason reason = FinishReason::stop;
  std::vector<int32_t> prompt;
  uint64_t seed = 0;
  friend bool operator==(const Outcome&, const Outcome&) = default;
};

struct RunResult {
  std::map<uint64_t, Outcome> out;
  uint64_t hit_tokens = 0;
  int64_t rows_written = 0;
};

RunResult run_workload(const Workload& w, int slots, int budget, bool prefix, int64_t blocks) {
  RunResult res;
  const int ctx = 64;
  BatchConfig cfg = config(slots, ctx, blocks, prefix);
  cfg.max_step_tokens = budget;
  cfg.is_eog = [](int32_t t) { return t % 37 == 0; };
  BatchedDecodeState s(cfg);
  FakeExecutor ex(slots, ctx, kVocab, kBs, blocks);
  check_fits(cfg, ex);
  Runner run(s, ex);
  std::map<uint64_t, Workload::Req> all;
  std::map<uint64_t, std::vector<int32_t>> prompts;
  auto submit = [&](const Workload::Req& q) {
    EXPECT_TRUE(s.submit(q.r).ok()) << q.r.ref.id;
    all[q.r.ref.id] = q;
    prompts[q.r.ref.id] = q.r.prompt;
    if (q.cancel_at_once) {
      EXPECT_TRUE(s.cancel(q.r.ref.id));
    }
  };
  run.on_event = [&](const SchedEvent& e) {
    const uint64_t id = event_request(e).id;
    if (const auto* t = std::get_if<TokenEvent>(&e)) {
      if (all.at(id).cancel_at == t->index) s.cancel(id);
      return;
    }
    for (const auto& f : w.follow_ups) {
      if (f.follow != id) continue;
      Workload::Req q = f;
      std::vector<int32_t> p = cat(prompts.at(id), run.log.at(id).tokens);
      p = cat(p, f.r.prompt);
      if (static_cast<int>(p.size()) + 1 > ctx) p.resize(ctx - 1);
      q.r.prompt = p;
      submit(q);
    }
  };
  for (const auto& wave : w.waves) {
    for (const auto& q : wave) submit(q);
    for (int i = 0; i < 3; ++i) run.step();
  }
  run.run();
  EXPECT_LE(run.max_step, budget);
  for (const auto& [id, q] : all) {
    const auto& l = run.log.at(id);
    Outcome o{l.tokens, l.failed, l.reason, prompts.at(id), q.r.sampling.seed};
    res.out[id] = o;
  }
  EXPECT_EQ(s.kv_blocks_used(), 0);
  EXPECT_EQ(s.kv().free_blocks(), blocks);
  EXPECT_TRUE(ex.active_slots().empty());
  expect_clean(run.log, ex);
  res.hit_tokens = s.counters().prefix_hit_tokens;
  res.rows_written = ex.rows_written;
  return res;
}

}  // namespace

TEST(PrefixCache, GreedyOutputIsTheSameWithTheCacheOnOrOffAndForAnyBudget) {
  const Workload w = make_workload();
  const int slots = 4;
  std::map<uint64_t, Outcome> first;
  int64_t rows_off = 0, rows_on = 0;
  for (int64_t blocks : {int64_t{64}, int64_t{24}}) {  // a full context per slot, or tight
    for (bool prefix : {false, true}) {
      for (int budget : {slots, 7, 64, 4096}) {
        SCOPED_TRACE("blocks " + std::to_string(blocks) + (prefix ? " cache on" : " cache off") +
                     " max_step_tokens " + std::to_string(budget));
        const RunResult r = run_workload(w, slots, budget, prefix, blocks);
        if (HasFailure()) return;
        if (first.empty()) {
          first = r.out;
          // The reference: each request on its own.
          int cancelled = 0, stopped = 0, follow = 0;
          for (const auto& [id, o] : first) {
            SCOPED_TRACE("request " + std::to_string(id));
            ASSERT_FALSE(o.failed);
            EXPECT_EQ(o.tokens, reference_tokens(o.prompt, o.seed,
                                                 static_cast<int>(o.tokens.size()), kVocab));
            cancelled += o.reason == FinishReason::cancelled;
            stopped += o.reason == FinishReason::stop;
            follow += id > 1000;
          }
          EXPECT_GT(cancelled, 2);
          EXPECT_GT(stopped, 0);
          EXPECT_EQ(follow, 4);
          EXPECT_GT(first.size(), 20u);
        } else {
          ASSERT_EQ(r.out.size(), first.size());
          for (const auto& [id, o] : first) EXPECT_EQ(r.out.at(id), o) << "request " << id;
        }
        if (prefix) {
          EXPECT_GT(r.hit_tokens, 0u);
        } else {
          EXPECT_EQ(r.hit_tokens, 0u);
        }
        if (blocks == 64 && budget == 64) (prefix ? rows_on : rows_off) = r.rows_written;
      }
    }
  }
  EXPECT_LT(rows_on, rows_off) << "the cache saves computed tokens";
}
