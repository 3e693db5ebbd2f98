// Randomized stress of BatchedDecodeState's KV-block accounting against the paged fake executor
// (which throws if more blocks are reserved than exist): random configs and block budgets, random
// prompts, max_tokens, cancels (between steps and in flight), injected step failures and rare
// abort_all. After every step: blocks in use never exceed the budget and agree with the slots and
// with the executor; admission is FIFO. At the end every request has ended, only injected
// failures failed, and no block is held.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "formats/common.hpp"
#include "sched/batch_state.hpp"
#include "sched/driver.hpp"
#include "sched/step.hpp"
#include "tests/sched/event_log.hpp"
#include "tests/sched/paged_executor.hpp"

using namespace rz;
using rz_test::EventLog;
using rz_test::PagedFakeExecutor;
using rz_test::reference_tokens;

namespace {

constexpr int kVocab = 29;

class KvStress {
 public:
  explicit KvStress(uint64_t seed) : rng_(seed) {
    cfg_.max_slots = pick(1, 6);
    cfg_.max_context = pick(4, 48);
    cfg_.max_queue = pick(2, 12);
    cfg_.max_prefill_batch = pick(1, 4);
    cfg_.max_prefill_tokens = pick(4, 64);
    cfg_.max_consecutive_prefills = pick(1, 3);
    cfg_.n_vocab = kVocab;
    cfg_.is_eog = [](int32_t t) { return t == 0; };
    cfg_.kv_block_size = pick(1, 8);
    // From less than one full-context request to a full context for every slot.
    const int64_t full = ceil_div(cfg_.max_context, cfg_.kv_block_size);
    cfg_.kv_blocks = pick(static_cast<int>(std::max<int64_t>(1, full / 3)),
                          static_cast<int>(full * cfg_.max_slots));
    state_ = std::make_unique<BatchedDecodeState>(cfg_);
    ex_ = std::make_unique<PagedFakeExecutor>(cfg_.max_slots + pick(0, 1), cfg_.max_context, kVocab,
                                              cfg_.kv_block_size, cfg_.kv_blocks);
    check_fits(cfg_, *ex_);
  }

  std::map<std::string, int> coverage;

  void run(int steps) {
    for (int i = 0; i < steps && !HasFailure(); ++i) {
      if (chance(0.5)) submit_some();
      if (chance(0.15)) cancel_some();
      if (chance(0.04)) {
        ex_->fail_on_steps({ex_->steps});
        ex_->fail_after_work = chance(0.5);
      }
      step(true);
      check_invariants("step " + std::to_string(i));
    }
    ex_->fail_if = nullptr;
    for (int guard = 0; state_->has_work() && guard < 100000 && !HasFailure(); ++guard) {
      step(false);
      check_invariants("draining");
    }
    check_outcomes();
  }

 private:
  static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
  int pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  bool chance(double p) { return std::bernoulli_distribution(p)(rng_); }

  // The policy's reserve, written out here rather than taken from BatchConfig.
  int64_t blocks_of(const BatchRequest& r) const {
    const int p = static_cast<int>(r.prompt.size());
    const int reserve =
        std::min(p + (r.max_tokens > 0 ? r.max_tokens : cfg_.max_context - p), cfg_.max_context);
    return ceil_div(reserve, cfg_.kv_block_size);
  }

  void submit_some() {
    for (int n = pick(0, 3); n > 0; --n) {
      BatchRequest r;
      r.ref = {next_id_, 7 + next_id_ % 5};
      ++next_id_;
      const int len = pick(1, cfg_.max_context + 1);
      for (int i = 0; i < len; ++i) r.prompt.push_back(pick(1, kVocab - 1));
      r.sampling.seed = static_cast<uint64_t>(pick(0, 1 << 20));
      r.max_tokens = chance(0.25) ? 0 : pick(1, cfg_.max_context);
      r.ignore_eos = chance(0.5);
      SubmitStatus want = SubmitStatus::accepted;
      if (len + 1 > cfg_.max_context || blocks_of(r) > cfg_.kv_blocks)
        want = SubmitStatus::context_length_exceeded;
      else if (state_->queue_depth() >= cfg_.max_queue)
        want = SubmitStatus::overloaded;
      const SubmitResult got = state_->submit(r);
      ASSERT_EQ(got.status, want) << got.message;
      ASSERT_EQ(got.message.find('\n'), std::string::npos);
      if (len + 1 <= cfg_.max_context && blocks_of(r) > cfg_.kv_blocks) ++coverage["refused kv"];
      if (got.ok()) subs_[r.ref.id] = r;
    }
  }

  void cancel_some() {
    for (int n = pick(1, 2); n > 0; --n) {
      const auto id = static_cast<uint64_t>(pick(1, static_cast<int>(next_id_)));
      const bool live = state_->where(id) != BatchedDecodeState::Where::unknown;
      const bool ok = state_->cancel(id);
      if (!live) {
        ASSERT_FALSE(ok);
      }
      if (ok) {
        cancelled_.insert(id);
        ++coverage[state_->in_flight() ? "cancel in flight" : "cancel between steps"];
      }
    }
  }

  // The head of the queue: admissions are FIFO, so it is the first queued id after the last
  // admitted one. nullptr when the queue is empty.
  const BatchRequest* queue_head() const {
    for (auto it = subs_.upper_bound(last_admitted_); it != subs_.end(); ++it)
      if (state_->where(it->first) == BatchedDecodeState::Where::queued) return &it->second;
    return nullptr;
  }

  void step(bool chaos) {
    StepPlan p = state_->plan();
    for (const auto& e : p.events) log_(e);
    for (int slot : p.release) ex_->release(slot);  // not release_slots: a bad slot must throw
    if (p.kind != StepKind::prefill) {
      const BatchRequest* head = queue_head();
      // Nothing may wait while nothing runs (every accepted request fits in the empty cache).
      if (p.idle()) {
        ASSERT_EQ(head, nullptr) << "the queue is stuck";
      }
      // After a decode step (prefill then has priority) a head with a free slot waits only for
      // blocks; after a prefill it may also wait for its turn (max_consecutive_prefills).
      if (head && state_->free_slots() > 0 && !prev_prefill_) {
        ASSERT_GT(state_->kv_blocks_used() + blocks_of(*head), cfg_.kv_blocks)
            << "request " << head->ref.id << " could have been admitted";
        ++coverage["head waited for blocks"];
      }
    }
    if (p.idle()) return;
    prev_prefill_ = p.kind == StepKind::prefill;
    if (p.kind == StepKind::prefill) {
      for (const auto& r : p.requests) {
        // FIFO: ids are given in submission order, so admissions come in increasing id order.
        ASSERT_GT(r.id, last_admitted_) << "request " << r.id << " overtook " << last_admitted_;
        last_admitted_ = r.id;
      }
      for (size_t i = 0; i < p.prefill.size(); ++i) {
        const BatchRequest& r = subs_.at(p.requests[i].id);
        ASSERT_EQ(ex_->blocks_for(p.prefill[i].reserve_tokens), blocks_of(r));
        ASSERT_EQ(state_->slot(p.prefill[i].slot).kv_blocks, blocks_of(r));
      }
    }
    if (chaos && chance(0.15)) cancel_some();
    if (chaos && chance(0.15)) submit_some();
    if (chaos && chance(0.003)) {
      ++coverage["abort_all"];
      for (const auto& e : state_->abort_all("injected abort")) log_(e);
      return;
    }
    ExecutorStep run = p;
    run.release.clear();  // released above
    const StepResult r = execute_step(*ex_, run);
    for (const auto& e : apply_step_result(*state_, p, r)) log_(e);
  }

  void check_invariants(const std::string& when) {
    SCOPED_TRACE(when);
    const BatchedDecodeState& s = *state_;
    ASSERT_TRUE(log_.violations.empty()) << log_.violations.front();
    ASSERT_LE(s.kv_blocks_used(), cfg_.kv_blocks);
    ASSERT_LE(ex_->used(), cfg_.kv_blocks);
    int64_t sum = 0, pending_held = 0;
    for (int i = 0; i < cfg_.max_slots; ++i) {
      const BatchSlot& sl = s.slot(i);
      if (!sl.busy()) {
        ASSERT_EQ(sl.kv_blocks, 0);
        continue;
      }
      ASSERT_EQ(sl.kv_blocks, blocks_of(subs_.at(sl.request.id))) << "slot " << i;
      ASSERT_EQ(ex_->held(i), sl.kv_blocks) << "slot " << i;
      sum += sl.kv_blocks;
    }
    for (int slot : s.pending_releases()) pending_held += ex_->held(slot);
    ASSERT_EQ(sum, s.kv_blocks_used());
    // The executor holds the busy slots' blocks plus those of slots it has yet to release.
    ASSERT_EQ(ex_->used(), s.kv_blocks_used() + pending_held);
    if (s.active_slots() == 0) {
      ASSERT_EQ(s.kv_blocks_used(), 0);
    }
    coverage["max use %"] = std::max(coverage["max use %"],
                                     static_cast<int>(100 * s.kv_blocks_used() / cfg_.kv_blocks));
  }

  void check_outcomes() {
    ASSERT_FALSE(state_->has_work());
    ASSERT_EQ(state_->kv_blocks_used(), 0);
    ASSERT_EQ(ex_->used(), 0);
    ASSERT_TRUE(ex_->active_slots().empty());
    ASSERT_EQ(ex_->grows, 0) << "a request outgrew its reservation";
    for (const auto& [id, r] : subs_) {
      SCOPED_TRACE("request " + std::to_string(id));
      ASSERT_TRUE(log_.done(id)) << "never ended";
      const auto& l = log_.at(id);
      const int n = static_cast<int>(l.tokens.size());
      ASSERT_EQ(l.tokens, reference_tokens(r.prompt, r.sampling.seed, n, kVocab));
      if (l.failed) {
        ASSERT_NE(l.failed_event.message.find("injected"), std::string::npos)
            << l.failed_event.message;
        ++coverage["failed"];
        continue;
      }
      if (l.reason == FinishReason::cancelled) {
        ASSERT_TRUE(cancelled_.count(id));
      } else if (l.reason == FinishReason::length) {
        ASSERT_TRUE(n == r.max_tokens || static_cast<int>(r.prompt.size()) + n == cfg_.max_context);
      }
      ++coverage[finish_reason_name(l.reason)];
    }
    const auto& c = state_->counters();
    ASSERT_EQ(c.submitted, subs_.size());
    ASSERT_EQ(c.submitted, c.finished + c.cancelled + c.failed);
  }

  static bool HasFailure() { return ::testing::Test::HasFailure(); }

  std::mt19937_64 rng_;
  BatchConfig cfg_;
  std::unique_ptr<BatchedDecodeState> state_;
  std::unique_ptr<PagedFakeExecutor> ex_;
  EventLog log_;
  std::map<uint64_t, BatchRequest> subs_;
  std::set<uint64_t> cancelled_;
  uint64_t next_id_ = 1;
  uint64_t last_admitted_ = 0;
  bool prev_prefill_ = false;  // the last non-idle plan was a prefill
};

}  // namespace

TEST(SchedKvStress, BlocksNeverExceedTheBudgetAndAllComeBack) {
  std::map<std::string, int> all;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    KvStress st(seed);
    st.run(1200);
    if (::testing::Test::HasFailure()) return;
    for (const auto& [k, v] : st.coverage)
      all[k] = k == "max use %" ? std::max(all[k], v) : all[k] + v;
  }
  for (const char* path :
       {"refused kv", "head waited for blocks", "cancel in flight", "cancel between steps",
        "failed", "abort_all", "stop", "length", "cancelled"}) {
    EXPECT_GT(all[path], 5) << path;
  }
  EXPECT_EQ(all["max use %"], 100);  // some run filled the cache completely
  std::string summary;
  for (const auto& [k, v] : all) summary += k + "=" + std::to_string(v) + " ";
  std::printf("coverage: %s\n", summary.c_str());
}
