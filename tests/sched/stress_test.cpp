// Randomized stress of BatchedDecodeState against the fake executor: random configs, submits,
// cancels (between steps, while a step is in flight, and from the event sink) and injected step
// failures, with the invariants checked after every step; and batch invariance: a request's
// tokens are the same whatever runs beside it.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <random>
#include <set>

#include "formats/common.hpp"
#include "sched/batch_state.hpp"
#include "sched/driver.hpp"
#include "sched/step.hpp"
#include "tests/sched/event_log.hpp"
#include "tests/sched/fake_executor.hpp"

using namespace rz;
using rz_test::EventLog;
using rz_test::FakeExecutor;
using rz_test::reference_tokens;

namespace {

// How often each path was taken, so the stress test can show that it reached all of them.
struct Coverage {
  std::map<std::string, int> n;
  void add(const Coverage& o) {
    for (const auto& [k, v] : o.n) n[k] += v;
  }
};

struct Submitted {
  BatchRequest req;
  bool cancel_asked = false;
};

class Stress {
 public:
  Stress(uint64_t seed) : rng_(seed) {
    cfg_.max_slots = pick(1, 6);
    cfg_.max_context = pick(4, 40);
    cfg_.max_queue = pick(1, 10);
    cfg_.max_prefill_batch = pick(1, 4);
    cfg_.max_prefill_tokens = pick(1, 40);
    cfg_.max_consecutive_prefills = pick(1, 3);
    cfg_.n_vocab = kVocab;
    cfg_.is_eog = [](int32_t t) { return t == 0 || t == 7; };
    state_ = std::make_unique<BatchedDecodeState>(cfg_);
    ex_ = std::make_unique<FakeExecutor>(cfg_.max_slots + pick(0, 2), cfg_.max_context + pick(0, 3),
                                         kVocab);
    check_fits(cfg_, *ex_);
  }

  Coverage coverage;

  void run(int steps) {
    for (int i = 0; i < steps && !HasFailure(); ++i) {
      if (chance(0.5)) submit_some();
      if (chance(0.3)) cancel_some();
      if (chance(0.08)) {
        ex_->fail_on_steps({ex_->steps});
        ex_->fail_after_work = chance(0.5);
      }
      step(/*chaos=*/true);
      check_invariants("step " + std::to_string(i));
    }
    // Drain without chaos: everything accepted must end.
    ex_->fail_if = nullptr;
    for (int guard = 0; (state_->has_work()) && guard < 100000; ++guard) step(false);
    check_invariants("drained");
    check_outcomes();
  }

 private:
  static constexpr int kVocab = 23;

  int pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  bool chance(double p) { return std::bernoulli_distribution(p)(rng_); }

  void submit_some() {
    for (int n = pick(0, 3); n > 0; --n) {
      BatchRequest r;
      r.ref = {next_id_, 500 + next_id_ % 7};
      ++next_id_;
      const int len = pick(1, cfg_.max_context + 1);
      for (int i = 0; i < len; ++i) r.prompt.push_back(pick(1, kVocab - 1));
      r.sampling.seed = static_cast<uint64_t>(pick(0, 1 << 20));
      r.max_tokens = chance(0.3) ? 0 : pick(1, 12);
      r.ignore_eos = chance(0.2);
      SubmitStatus want = SubmitStatus::accepted;
      if (len + 1 > cfg_.max_context)
        want = SubmitStatus::context_length_exceeded;
      else if (state_->queue_depth() >= cfg_.max_queue)
        want = SubmitStatus::overloaded;
      const SubmitResult got = state_->submit(r);
      ASSERT_EQ(got.status, want) << got.message;
      ++coverage.n[std::string("submit ") + submit_status_name(got.status)];
      if (got.ok()) subs_[r.ref.id] = Submitted{r, false};
    }
  }

  void cancel_one(uint64_t id) {
    auto it = subs_.find(id);
    const bool live = state_->where(id) != BatchedDecodeState::Where::unknown;
    const bool want = it != subs_.end() && live && !it->second.cancel_asked;
    ASSERT_EQ(state_->cancel(id), want) << "cancel " << id;
    if (want) {
      it->second.cancel_asked = true;
      ++coverage.n[state_->in_flight() ? "cancel in flight" : "cancel between steps"];
    }
  }

  void cancel_some() {
    for (int n = pick(1, 2); n > 0; --n) cancel_one(static_cast<uint64_t>(pick(1, next_id_ + 2)));
  }

  void deliver(const std::vector<SchedEvent>& evs, bool chaos) {
    for (const auto& e : evs) {
      log_(e);
      // A session that cancels on a token (a stop string), from inside the sink.
      if (chaos && std::holds_alternative<TokenEvent>(e) && chance(0.03))
        cancel_one(event_request(e).id);
    }
  }

  // run_step, with submits and cancels while the step is in flight.
  void step(bool chaos) {
    StepPlan p = state_->plan();
    for (int slot : p.release) ex_->release(slot);  // not release_slots: a bad slot must throw
    deliver(p.events, chaos);
    if (p.idle()) return;
    if (p.kind == StepKind::prefill && p.size() > 1) ++coverage.n["prefill joins > 1"];
    if (!p.release.empty() && p.kind == StepKind::prefill) ++coverage.n["release+prefill"];
    if (chaos && chance(0.2)) cancel_some();
    if (chaos && chance(0.2)) submit_some();
    if (chaos && chance(0.004)) {  // the executor is lost with this step in flight
      ++coverage.n["abort_all"];
      deliver(state_->abort_all("injected abort"), chaos);
      return;
    }
    ExecutorStep run = p;
    run.release.clear();  // released above
    const StepResult r = execute_step(*ex_, run);
    deliver(apply_step_result(*state_, p, r), chaos);
  }

  void check_invariants(const std::string& when) {
    const BatchedDecodeState& s = *state_;
    SCOPED_TRACE(when);
    ASSERT_FALSE(s.in_flight());
    ASSERT_TRUE(log_.violations.empty()) << log_.violations.front();
    ASSERT_EQ(ex_->feed_mismatches, 0);
    std::set<uint64_t> ids;
    int busy = 0;
    const std::set<int> pending(s.pending_releases().begin(), s.pending_releases().end());
    ASSERT_EQ(pending.size(), s.pending_releases().size()) << "a slot listed twice for release";
    for (int i = 0; i < ex_->max_slots(); ++i) {
      if (i >= cfg_.max_slots) {
        ASSERT_FALSE(ex_->slot_active(i)) << "slot " << i << " beyond max_slots";
        continue;
      }
      const BatchSlot& sl = s.slot(i);
      if (!sl.busy()) {
        // The executor may hold a freed slot only until the next plan releases it.
        if (ex_->slot_active(i)) {
          ASSERT_TRUE(pending.count(i)) << "slot " << i << " leaked";
        }
        continue;
      }
      ++busy;
      ASSERT_FALSE(pending.count(i)) << "slot " << i << " busy and waiting for release";
      ASSERT_TRUE(ids.insert(sl.request.id).second) << "request in two slots";
      ASSERT_EQ(sl.phase, BatchSlot::Phase::decoding);
      ASSERT_EQ(s.where(sl.request.id), BatchedDecodeState::Where::running);
      ASSERT_TRUE(ex_->slot_active(i)) << "slot " << i;
      ASSERT_EQ(ex_->slot_length(i), sl.position);
      ASSERT_EQ(sl.position, sl.prompt_len + sl.generated - 1);
      // The executor's KV holds exactly this request's prompt and delivered tokens but the last.
      const auto& sub = subs_.at(sl.request.id).req;
      std::vector<int32_t> want = sub.prompt;
      const auto& toks = log_.at(sl.request.id).tokens;
      ASSERT_EQ(static_cast<int>(toks.size()), sl.generated);
      want.insert(want.end(), toks.begin(), toks.end() - 1);
      ASSERT_EQ(ex_->kv(i), want);
      ASSERT_EQ(sl.last_token, toks.back());
    }
    ASSERT_EQ(busy, s.active_slots());
    ASSERT_LE(busy, cfg_.max_slots);
    ASSERT_LE(s.queue_depth(), cfg_.max_queue);
    const auto& c = s.counters();
    ASSERT_EQ(c.submitted, subs_.size());
    ASSERT_EQ(c.submitted,
              c.finished + c.cancelled + c.failed + static_cast<uint64_t>(s.queue_depth() + busy));
  }

  void check_outcomes() {
    ASSERT_FALSE(state_->has_work());
    ASSERT_TRUE(ex_->active_slots().empty());
    uint64_t tokens = 0;
    for (const auto& [id, sub] : subs_) {
      SCOPED_TRACE("request " + std::to_string(id));
      ASSERT_TRUE(log_.req.count(id)) << "no events at all";
      const auto& l = log_.at(id);
      ASSERT_EQ(l.finals, 1);
      const auto& r = sub.req;
      const int n = static_cast<int>(l.tokens.size());
      tokens += static_cast<uint64_t>(n);
      ASSERT_EQ(l.tokens, reference_tokens(r.prompt, r.sampling.seed, n, kVocab));
      ASSERT_LE(static_cast<int>(r.prompt.size()) + n, cfg_.max_context);
      if (r.max_tokens > 0) {
        ASSERT_LE(n, r.max_tokens);
      }
      for (int i = 0; i + 1 < n && !r.ignore_eos; ++i) {
        ASSERT_FALSE(cfg_.is_eog(l.tokens[static_cast<size_t>(i)]));
      }
      ++coverage.n[l.failed ? "failed" : finish_reason_name(l.reason)];
      if (l.failed) {
        ASSERT_NE(l.failed_event.message.find("injected"), std::string::npos)
            << l.failed_event.message;
        continue;
      }
      switch (l.reason) {
        case FinishReason::cancelled: ASSERT_TRUE(sub.cancel_asked); break;
        case FinishReason::stop:
          ASSERT_FALSE(r.ignore_eos);
          ASSERT_TRUE(cfg_.is_eog(l.tokens.back()));
          break;
        case FinishReason::length:
          if (static_cast<int>(r.prompt.size()) + n == cfg_.max_context)
            ++coverage.n["context full"];
          ASSERT_TRUE(n == r.max_tokens ||
                      static_cast<int>(r.prompt.size()) + n == cfg_.max_context);
          if (!r.ignore_eos) {
            ASSERT_FALSE(cfg_.is_eog(l.tokens.back()));
          }
          break;
      }
    }
    const auto& c = state_->counters();
    ASSERT_EQ(c.tokens_generated, tokens);
    ASSERT_EQ(c.submitted, c.finished + c.cancelled + c.failed);
  }

  std::mt19937_64 rng_;
  BatchConfig cfg_;
  std::unique_ptr<BatchedDecodeState> state_;
  std::unique_ptr<FakeExecutor> ex_;
  EventLog log_;
  std::map<uint64_t, Submitted> subs_;
  uint64_t next_id_ = 1;

  static bool HasFailure() { return ::testing::Test::HasFailure(); }
};

}  // namespace

TEST(SchedStress, RandomSubmitsCancelsAndFailuresKeepEveryInvariant) {
  Coverage all;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Stress st(seed);
    st.run(1500);
    if (HasFailure()) return;
    all.add(st.coverage);
  }
  for (const char* path :
       {"submit accepted", "submit overloaded", "submit context_length_exceeded",
        "cancel in flight", "cancel between steps", "prefill joins > 1", "release+prefill",
        "failed", "abort_all", "stop", "length", "cancelled", "context full"}) {
    EXPECT_GT(all.n[path], 10) << path;
  }
  std::string summary;
  for (const auto& [k, v] : all.n) summary += k + "=" + std::to_string(v) + " ";
  RecordProperty("coverage", summary);
  std::printf("coverage: %s\n", summary.c_str());
}

namespace {

std::vector<BatchRequest> invariance_requests() {
  std::mt19937_64 rng(99);
  std::vector<BatchRequest> out;
  for (uint64_t id = 1; id <= 16; ++id) {
    BatchRequest r;
    r.ref = {id, id * 10};
    const int len = static_cast<int>(rng() % 12) + 1;
    for (int i = 0; i < len; ++i) r.prompt.push_back(static_cast<int32_t>(rng() % 1000));
    r.sampling.seed = rng();
    r.max_tokens = id % 5 == 0 ? 0 : static_cast<int>(rng() % 20) + 1;
    r.ignore_eos = id % 3 == 0;
    out.push_back(r);
  }
  return out;
}

BatchConfig invariance_config(int slots) {
  BatchConfig c;
  c.max_slots = slots;
  c.max_context = 40;
  c.max_queue = 64;
  c.n_vocab = 1000;
  c.is_eog = [](int32_t t) { return t % 31 == 0; };
  return c;
}

}  // namespace

TEST(SchedBatchInvariance, TokensDoNotDependOnWhatRunsBeside) {
  const auto reqs = invariance_requests();
  // Alone: one request at a time through a one-slot state.
  std::map<uint64_t, std::pair<std::vector<int32_t>, FinishReason>> solo;
  for (const auto& r : reqs) {
    BatchedDecodeState s(invariance_config(1));
    FakeExecutor ex(1, 40, 1000);
    EventLog log;
    ASSERT_TRUE(s.submit(r).ok());
    run_until_idle(s, ex, log.sink());
    ASSERT_TRUE(log.at(r.ref.id).finished);
    solo[r.ref.id] = {log.at(r.ref.id).tokens, log.at(r.ref.id).reason};
  }
  struct Shape {
    int slots, prefill_batch, prefill_tokens, consecutive, stagger;
  };
  for (const Shape sh : {Shape{4, 2, 1024, 1, 0}, Shape{8, 8, 1024, 3, 0}, Shape{3, 8, 10, 1, 0},
                         Shape{5, 1, 1024, 2, 3}, Shape{16, 16, 1024, 1, 1}}) {
    SCOPED_TRACE("slots " + std::to_string(sh.slots));
    BatchConfig c = invariance_config(sh.slots);
    c.max_prefill_batch = sh.prefill_batch;
    c.max_prefill_tokens = sh.prefill_tokens;
    c.max_consecutive_prefills = sh.consecutive;
    BatchedDecodeState s(c);
    FakeExecutor ex(sh.slots, 40, 1000);
    EventLog log;
    auto sink = log.sink();
    // Submit all at once, or one request every `stagger` steps so they join mid-flight.
    size_t next = 0;
    while (next < reqs.size() || s.has_work()) {
      const size_t burst = sh.stagger == 0 ? reqs.size() : 1;
      for (size_t k = 0; k < burst && next < reqs.size(); ++k)
        ASSERT_TRUE(s.submit(reqs[next++]).ok());
      for (int i = 0; i < std::max(sh.stagger, 1); ++i) run_step(s, ex, sink);
    }
    ASSERT_TRUE(log.violations.empty()) << log.violations.front();
    for (const auto& r : reqs) {
      const auto& l = log.at(r.ref.id);
      EXPECT_EQ(l.tokens, solo[r.ref.id].first) << "request " << r.ref.id;
      EXPECT_EQ(l.reason, solo[r.ref.id].second) << "request " << r.ref.id;
    }
  }
}
