// The randomized stress harness of the scheduler tests (stress_test.cpp, kv_stress_test.cpp):
// a random BatchConfig (slots, context, queue bound, token budget, block size and count, prefix
// cache on or off), random submits (fresh prompts, prompts that share a prefix, repeats and
// follow-up turns), cancels (between steps, while a step is in flight, from the event sink),
// injected step failures and rare abort_all, against the paged fake executor. Every plan is
// checked against the policy of sched/batch_state.hpp before it runs, every state after it, and
// at the end every request has ended with the reference tokens and no block is held.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "formats/common.hpp"
#include "sched/batch_state.hpp"
#include "sched/driver.hpp"
#include "sched/step.hpp"
#include "tests/sched/event_log.hpp"
#include "tests/sched/fake_executor.hpp"

namespace rz_test {

class Stress {
 public:
  // kv_tight: small caches (from a third of one full-context request up to a full context per
  // slot), long generations and prompts that share prefixes; otherwise a mix of everything.
  Stress(uint64_t seed, bool kv_tight) : rng_(seed), kv_tight_(kv_tight) {
    cfg_.max_slots = pick(1, 6);
    cfg_.max_context = pick(4, kv_tight ? 48 : 40);
    cfg_.max_queue = pick(0, 10);
    const int budget = pick(0, 9);
    cfg_.max_step_tokens = budget < 3   ? cfg_.max_slots
                           : budget < 8 ? pick(cfg_.max_slots, 3 * cfg_.max_context)
                                        : 4096;
    cfg_.idle_step_tokens = chance(0.5) ? 0 : pick(1, 3 * cfg_.max_context);
    cfg_.n_vocab = kVocab;
    cfg_.is_eog = [](int32_t t) { return t == 0 || t == 7; };
    cfg_.kv_block_size = pick(1, 8);
    const int64_t full = ceil_div(cfg_.max_context, cfg_.kv_block_size);
    if (kv_tight || chance(0.5))
      cfg_.kv_blocks = pick(static_cast<int>(std::max<int64_t>(1, full / 3)),
                            static_cast<int>(full * cfg_.max_slots));
    cfg_.prefix_cache = chance(0.75);
    state_ = std::make_unique<rz::BatchedDecodeState>(cfg_);
    n_blocks_ = cfg_.kv_block_count();
    ex_ = std::make_unique<FakeExecutor>(cfg_.max_slots + pick(0, 2), cfg_.max_context + pick(0, 3),
                                         kVocab, cfg_.kv_block_size, n_blocks_ + pick(0, 3));
    runner_ = std::make_unique<rz::StepRunner>(ex_->max_slots());
    rz::check_fits(cfg_, *ex_);
    for (int i = 0; i < 3; ++i) {
      std::vector<int32_t> sys;
      for (int n = pick(1, cfg_.max_context); n > 0; --n) sys.push_back(pick(1, kVocab - 1));
      systems_.push_back(sys);
    }
  }

  std::map<std::string, int> coverage;
  // Plan a step ahead while each ordinary step is in flight, where the state allows it (the
  // batcher's protocol, BatchedDecodeState::plan_ahead), with cancels and submits between the
  // two; the steps run through a StepRunner.
  bool plan_ahead = false;

  void run(int steps) {
    for (int i = 0; i < steps && !HasFailure(); ++i) {
      if (chance(0.5)) submit_some();
      if (chance(kv_tight_ ? 0.15 : 0.3)) cancel_some();
      if (chance(kv_tight_ ? 0.04 : 0.08)) {
        ex_->fail_on_steps({ex_->steps});
        ex_->fail_after_work = chance(0.5);
      }
      step(/*chaos=*/true);
      check_state("step " + std::to_string(i));
    }
    // Drain without chaos: everything accepted must end.
    ex_->fail_if = nullptr;
    for (int guard = 0; state_->has_work() && guard < 100000 && !HasFailure(); ++guard) {
      step(false);
      check_state("draining");
    }
    check_outcomes();
  }

 private:
  static constexpr int kVocab = 23;
  struct Submitted {
    rz::BatchRequest req;
    bool cancel_asked = false;
  };

  static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
  static bool HasFailure() { return ::testing::Test::HasFailure(); }
  int pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  bool chance(double p) { return std::bernoulli_distribution(p)(rng_); }

  // The policy's reservation, written out here rather than taken from BatchConfig.
  int64_t reserve_blocks(const rz::BatchRequest& r) const {
    const int p = static_cast<int>(r.prompt.size());
    const int reserve =
        std::min(p + (r.max_tokens > 0 ? r.max_tokens : cfg_.max_context - p), cfg_.max_context);
    return ceil_div(reserve, cfg_.kv_block_size);
  }

  std::vector<int32_t> make_prompt() {
    const int max_len = cfg_.max_context + 1;  // one too long now and then
    std::vector<int32_t> p;
    const int kind = pick(0, 99);
    if (kind < 30 && !systems_.empty()) {
      p = systems_[static_cast<size_t>(pick(0, 2))];
    } else if (kind < 45 && !subs_.empty()) {
      const auto& r = std::next(subs_.begin(), pick(0, static_cast<int>(subs_.size()) - 1))->second;
      p = r.req.prompt;
      if (chance(0.5)) return p;               // an exact repeat
    } else if (kind < 60 && !subs_.empty()) {  // a follow-up turn of an earlier request
      const auto& [id, r] = *std::next(subs_.begin(), pick(0, static_cast<int>(subs_.size()) - 1));
      p = r.req.prompt;
      if (log_.req.count(id)) {
        const auto& t = log_.at(id).tokens;
        p.insert(p.end(), t.begin(), t.end());
      }
      ++coverage["follow-up"];
    }
    for (int n = pick(p.empty() ? 1 : 0, std::max(1, max_len / 3)); n > 0; --n)
      p.push_back(pick(1, kVocab - 1));
    if (static_cast<int>(p.size()) > max_len) p.resize(static_cast<size_t>(max_len));
    return p;
  }

  void submit_some() {
    for (int n = pick(0, 3); n > 0; --n) {
      rz::BatchRequest r;
      r.ref = {next_id_, 500 + next_id_ % 7};
      ++next_id_;
      r.prompt = make_prompt();
      r.sampling.seed = static_cast<uint64_t>(pick(0, 1 << 20));
      r.max_tokens =
          chance(kv_tight_ ? 0.25 : 0.3) ? 0 : pick(1, kv_tight_ ? cfg_.max_context : 12);
      r.ignore_eos = chance(kv_tight_ ? 0.5 : 0.2);
      const int len = static_cast<int>(r.prompt.size());
      const int live = state_->queue_depth() + state_->active_slots();
      rz::SubmitStatus want = rz::SubmitStatus::accepted;
      if (len + 1 > cfg_.max_context || reserve_blocks(r) > n_blocks_)
        want = rz::SubmitStatus::context_length_exceeded;
      else if (live >= cfg_.max_slots + cfg_.max_queue)
        want = rz::SubmitStatus::overloaded;
      const rz::SubmitResult got = state_->submit(r);
      ASSERT_EQ(got.status, want) << got.message;
      ASSERT_EQ(got.message.find('\n'), std::string::npos);
      ++coverage[std::string("submit ") + rz::submit_status_name(got.status)];
      if (len + 1 <= cfg_.max_context && reserve_blocks(r) > n_blocks_) ++coverage["refused kv"];
      if (got.ok()) subs_[r.ref.id] = Submitted{r, false};
    }
  }

  void cancel_one(uint64_t id) {
    auto it = subs_.find(id);
    const bool live = state_->where(id) != rz::BatchedDecodeState::Where::unknown;
    const bool want = it != subs_.end() && live && !it->second.cancel_asked;
    ASSERT_EQ(state_->cancel(id), want) << "cancel " << id;
    if (want) {
      it->second.cancel_asked = true;
      ++coverage[state_->in_flight() ? "cancel in flight" : "cancel between steps"];
    }
  }

  void cancel_some() {
    for (int n = pick(1, 2); n > 0; --n)
      cancel_one(static_cast<uint64_t>(pick(1, static_cast<int>(next_id_) + 2)));
  }

  void deliver(const std::vector<rz::SchedEvent>& evs, bool chaos) {
    for (const auto& e : evs) {
      log_(e);
      // A session that cancels on a token (a stop string), from inside the sink.
      if (chaos && std::holds_alternative<rz::TokenEvent>(e) && chance(0.03))
        cancel_one(rz::event_request(e).id);
    }
  }

  // The policy's next admission (sched/batch_state.hpp): among the waiting `candidates` (ids,
  // ascending = submission order), the first whose owner runs the fewest requests; 0 for none.
  uint64_t fair_pick(const std::vector<uint64_t>& candidates,
                     const std::map<uint64_t, int>& running) const {
    uint64_t best = 0;
    int fewest = std::numeric_limits<int>::max();
    for (uint64_t id : candidates) {
      const auto it = running.find(subs_.at(id).req.ref.owner);
      const int n = it == running.end() ? 0 : it->second;
      if (n < fewest) fewest = n, best = id;
    }
    return best;
  }

  // The token budget of a step with `decodes` decode entries (BatchConfig::idle_step_tokens).
  int budget_of(size_t decodes) const {
    return decodes == 0 ? std::max(cfg_.max_step_tokens, cfg_.idle_step_tokens)
                        : cfg_.max_step_tokens;
  }

  // The plan against the policy, before it runs. `decoding` and `prefilling`: the slots in that
  // phase at the boundary whose cancel was not pending; `free_before`: the slots free then.
  void check_plan(const rz::StepPlan& p, const std::vector<int>& decoding,
                  const std::vector<int>& prefilling, const std::vector<int>& free_before) {
    const rz::BatchedDecodeState& s = *state_;
    int tokens = 0;
    for (const auto& e : p.seqs) tokens += static_cast<int>(e.tokens.size());
    const int budget = budget_of(decoding.size());
    ASSERT_LE(tokens, budget) << "over the token budget";
    if (decoding.empty() && tokens > cfg_.max_step_tokens) ++coverage["idle step over the budget"];
    ASSERT_EQ(p.seqs.size(), p.requests.size());
    // 1. Every decoding slot, one token each, in slot order.
    ASSERT_GE(p.seqs.size(), decoding.size());
    for (size_t i = 0; i < decoding.size(); ++i) {
      const rz::StepSeq& e = p.seqs[i];
      ASSERT_EQ(e.slot, decoding[i]) << "decodes first, every one, in slot order";
      ASSERT_FALSE(e.begin);
      ASSERT_TRUE(e.sample);
      ASSERT_EQ(e.tokens.size(), 1u);
      ASSERT_EQ(e.tokens[0], s.slot(e.slot).tokens.back());
      ASSERT_EQ(e.start, s.slot(e.slot).computed);
    }
    // 2. Prompts part-way through, in admission order, a chunk each while the budget lasts.
    int left = budget - static_cast<int>(decoding.size());
    std::vector<int> partial = prefilling;
    std::sort(partial.begin(), partial.end(),
              [&s](int a, int b) { return s.slot(a).admission < s.slot(b).admission; });
    if (partial.size() > 1) ++coverage["prompts part-way > 1"];
    size_t k = decoding.size();
    for (int slot : partial) {
      if (left <= 0) break;
      ASSERT_LT(k, p.seqs.size()) << "a prompt part-way through got no chunk";
      const rz::StepSeq& e = p.seqs[k++];
      ASSERT_EQ(e.slot, slot) << "prompt chunks in admission order";
      ASSERT_FALSE(e.begin);
      const rz::BatchSlot& sl = s.slot(slot);
      ASSERT_EQ(static_cast<int>(e.tokens.size()), std::min(sl.prompt_len - e.start, left));
      left -= static_cast<int>(e.tokens.size());
      ++coverage["chunk continued"];
    }
    // 3. Admissions while budget is left: fair across owners (the oldest waiting request of the
    // owner running fewest, FIFO with one owner), into the lowest free slots, each with its
    // cached prefix and a chunk of the rest of its prompt.
    std::map<uint64_t, int> running;  // owner -> requests in slots before the admissions
    for (int slot : decoding) ++running[s.slot(slot).request.owner];
    for (int slot : prefilling) ++running[s.slot(slot).request.owner];
    std::vector<uint64_t> waiting;  // what waited before this plan: still queued, or admitted now
    for (const auto& [id, sub] : subs_)
      if (state_->where(id) == rz::BatchedDecodeState::Where::queued) waiting.push_back(id);
    for (size_t j = k; j < p.seqs.size(); ++j) waiting.push_back(p.requests[j].id);
    std::sort(waiting.begin(), waiting.end());
    size_t next_free = 0;
    int begins = 0;
    for (; k < p.seqs.size(); ++k) {
      const rz::StepSeq& e = p.seqs[k];
      ASSERT_TRUE(e.begin) << "entry " << k;
      ASSERT_GT(left, 0) << "an admission beyond the budget";
      const uint64_t id = p.requests[k].id;
      ASSERT_EQ(id, fair_pick(waiting, running)) << "request " << id << " out of the fair order";
      if (running.size() > 1 && id != waiting.front()) ++coverage["fair overtake"];
      waiting.erase(std::find(waiting.begin(), waiting.end(), id));
      ++running[subs_.at(id).req.ref.owner];
      ASSERT_LT(next_free, free_before.size());
      ASSERT_EQ(e.slot, free_before[next_free++]) << "the lowest free slot";
      const rz::BatchRequest& r = subs_.at(id).req;
      const int n = static_cast<int>(r.prompt.size());
      ASSERT_EQ(e.start % cfg_.kv_block_size, 0);
      ASSERT_LE(e.start, (n - 1) / cfg_.kv_block_size * cfg_.kv_block_size);
      if (!cfg_.prefix_cache) {
        ASSERT_EQ(e.start, 0);
      }
      ASSERT_EQ(e.cached, std::vector<int32_t>(r.prompt.begin(), r.prompt.begin() + e.start));
      ASSERT_EQ(static_cast<int>(e.tokens.size()), std::min(n - e.start, left));
      left -= static_cast<int>(e.tokens.size());
      ASSERT_EQ(e.sampling.seed, r.sampling.seed);
      if (e.start > 0) ++coverage["prefix hit"];
      ++begins;
    }
    if (begins > 1) ++coverage["joins > 1"];
    if (begins > 0 && !p.release.empty()) ++coverage["release+join"];
    for (const auto& e : p.seqs) {
      const rz::BatchSlot& sl = s.slot(e.slot);
      ASSERT_EQ(e.sample, e.end() == static_cast<int>(sl.tokens.size()));
      if (!e.sample) ++coverage["chunk without sample"];
      ASSERT_EQ(e.blocks, sl.blocks);
    }
    // The next in the fair order, if one still waits with a slot and budget left, waits for its
    // reservation.
    const uint64_t next = fair_pick(waiting, running);
    const rz::BatchRequest* head = next ? &subs_.at(next).req : nullptr;
    if (head && s.free_slots() > 0 && tokens < budget) {
      const auto& kv = s.kv();
      const int n = static_cast<int>(head->prompt.size());
      const auto cached = kv.match_prefix(head->prompt, (n - 1) / cfg_.kv_block_size);
      int64_t revived = 0, promised = 0;
      for (int32_t b : cached) revived += kv.refs(b) == 0 ? 1 : 0;
      for (int i = 0; i < cfg_.max_slots; ++i)
        promised += s.slot(i).reserved_blocks - static_cast<int64_t>(s.slot(i).blocks.size());
      const int64_t need = reserve_blocks(*head) - static_cast<int64_t>(cached.size());
      ASSERT_GT(need, kv.free_blocks() - revived - promised)
          << "request " << head->ref.id << " could have been admitted";
      ++coverage["head waited for blocks"];
    }
  }

  // run_step, with checks of the plan and submits and cancels while the step is in flight.
  void step(bool chaos) {
    const rz::BatchedDecodeState& s = *state_;
    std::vector<int> decoding, prefilling, free_before;
    for (int i = 0; i < cfg_.max_slots; ++i) {
      const rz::BatchSlot& sl = s.slot(i);
      if (!sl.busy() || sl.cancel_requested) {
        free_before.push_back(i);
        continue;
      }
      (sl.phase == rz::BatchSlot::Phase::decoding ? decoding : prefilling).push_back(i);
    }
    rz::StepPlan p = state_->plan();
    for (int slot : p.release) ex_->release(slot);  // not release_slots: a bad slot must throw
    deliver(p.events, chaos);
    check_plan(p, decoding, prefilling, free_before);
    if (HasFailure() || p.idle()) return;
    if (chaos && chance(0.2)) cancel_some();
    if (chaos && chance(0.2)) submit_some();
    if (chaos && chance(0.004)) {  // the executor is lost with this step in flight
      ++coverage["abort_all"];
      deliver(state_->abort_all("injected abort"), chaos);
      return;
    }
    rz::ExecutorStep run = p;
    run.release.clear();  // released above
    rz::StepPlan ahead;
    if (plan_ahead && chance(0.8)) {
      ahead = state_->plan_ahead();
      if (!ahead.idle()) {
        ++coverage["planned ahead"];
        check_ahead(p, ahead);
      }
    }
    const rz::StepResult r = runner_->run(*ex_, run);
    deliver(rz::apply_step_result(*state_, p, r), chaos);
    if (ahead.idle() || HasFailure()) return;
    if (chaos && chance(0.2)) cancel_some();
    if (chaos && chance(0.2)) submit_some();
    const rz::StepResult r2 = runner_->run(*ex_, ahead);
    deliver(rz::apply_step_result(*state_, ahead, r2), chaos);
  }

  // A step planned ahead of `p`: a decode of the token p samples for each of p's sampling entries
  // that p cannot end by length (at that token's position), prompts continuing after p's chunks,
  // new requests; within the budget, one entry a slot.
  void check_ahead(const rz::StepPlan& p, const rz::StepPlan& a) {
    ASSERT_TRUE(a.ahead);
    ASSERT_EQ(a.step, p.step + 1);
    ASSERT_TRUE(a.events.empty());
    int tokens = 0;
    size_t decodes = 0;
    std::set<int> slots;
    for (const rz::StepSeq& e : a.seqs) {
      ASSERT_TRUE(slots.insert(e.slot).second) << "slot " << e.slot << " twice";
      tokens += static_cast<int>(e.tokens.size());
      size_t j = 0;
      while (j < p.seqs.size() && p.seqs[j].slot != e.slot) ++j;
      const bool in_p = j < p.seqs.size();
      const bool placeholder = e.tokens == std::vector<int32_t>{rz::kTokenOfLastStep};
      ASSERT_GE(static_cast<int64_t>(e.blocks.size()) * cfg_.kv_block_size, e.end());
      if (placeholder) {
        ++decodes;
        ASSERT_TRUE(in_p) << "slot " << e.slot << ": a token from a step it was not in";
        ASSERT_TRUE(p.seqs[j].sample);
        ASSERT_EQ(e.start, p.seqs[j].end());
        ASSERT_TRUE(e.sample);
        ASSERT_FALSE(e.begin);
        continue;
      }
      for (int32_t t : e.tokens) ASSERT_NE(t, rz::kTokenOfLastStep);
      if (in_p && !e.begin) {  // a prompt continuing after p's chunk (not a new request there)
        ASSERT_FALSE(p.seqs[j].sample) << "slot " << e.slot;
        ASSERT_EQ(e.start, p.seqs[j].end());
      }
    }
    ASSERT_LE(tokens, budget_of(decodes));
  }

  void check_state(const std::string& when) {
    const rz::BatchedDecodeState& s = *state_;
    SCOPED_TRACE(when);
    ASSERT_FALSE(s.in_flight());
    ASSERT_TRUE(log_.violations.empty()) << log_.violations.front();
    ASSERT_EQ(ex_->feed_mismatches, 0);
    ASSERT_EQ(ex_->kv_mismatches, 0) << ex_->kv_report();
    ASSERT_EQ(ex_->shared_writes, 0) << ex_->kv_report();
    std::set<uint64_t> ids;
    std::map<int32_t, int> refs;  // block -> busy slots whose table holds it
    int busy = 0;
    int64_t promised = 0;
    const std::set<int> pending(s.pending_releases().begin(), s.pending_releases().end());
    ASSERT_EQ(pending.size(), s.pending_releases().size()) << "a slot listed twice for release";
    const int bs = cfg_.kv_block_size;
    for (int i = 0; i < ex_->max_slots(); ++i) {
      if (i >= cfg_.max_slots) {
        ASSERT_FALSE(ex_->slot_active(i)) << "slot " << i << " beyond max_slots";
        continue;
      }
      const rz::BatchSlot& sl = s.slot(i);
      if (!sl.busy()) {
        // The executor may hold a freed slot only until the next plan releases it.
        if (ex_->slot_active(i)) {
          ASSERT_TRUE(pending.count(i)) << "slot " << i << " leaked";
        }
        ASSERT_TRUE(sl.blocks.empty());
        continue;
      }
      SCOPED_TRACE("slot " + std::to_string(i));
      ++busy;
      ASSERT_FALSE(pending.count(i)) << "busy and waiting for release";
      ASSERT_TRUE(ids.insert(sl.request.id).second) << "request in two slots";
      ASSERT_EQ(s.where(sl.request.id), rz::BatchedDecodeState::Where::running);
      const rz::BatchRequest& r = subs_.at(sl.request.id).req;
      // The slot's tokens: its prompt and exactly the tokens delivered.
      const auto& delivered =
          log_.req.count(sl.request.id) ? log_.at(sl.request.id).tokens : std::vector<int32_t>{};
      ASSERT_EQ(static_cast<int>(delivered.size()), sl.generated);
      std::vector<int32_t> want = r.prompt;
      want.insert(want.end(), delivered.begin(), delivered.end());
      ASSERT_EQ(sl.tokens, want);
      ASSERT_EQ(sl.prompt_len, static_cast<int>(r.prompt.size()));
      if (sl.phase == rz::BatchSlot::Phase::decoding) {
        ASSERT_GE(sl.generated, 1);
        ASSERT_EQ(sl.computed + 1, static_cast<int>(sl.tokens.size()));
      } else {
        ASSERT_EQ(sl.generated, 0);
        ASSERT_LT(sl.computed, sl.prompt_len);
      }
      // The executor holds exactly the computed tokens, through the slot's block table.
      ASSERT_TRUE(ex_->slot_active(i));
      ASSERT_EQ(ex_->slot_length(i), sl.computed);
      ASSERT_EQ(ex_->history(i),
                std::vector<int32_t>(sl.tokens.begin(), sl.tokens.begin() + sl.computed));
      // The table the executor last saw, but for full blocks the scheduler has since moved onto
      // a cached copy of the same prefix (KvBlockManager::register_full): those must hold the
      // same rows.
      {
        const std::vector<int32_t>& seen = ex_->table(i);
        ASSERT_EQ(seen.size(), sl.blocks.size());
        for (size_t j = 0; j < seen.size(); ++j) {
          if (seen[j] == sl.blocks[j]) continue;
          ASSERT_LE(static_cast<int64_t>(j + 1) * bs, sl.computed) << "a moved block is full";
          for (int o = 0; o < bs; ++o)
            ASSERT_EQ(ex_->row(seen[j], o), ex_->row(sl.blocks[j], o))
                << "block " << j << " moved onto a block holding other rows";
        }
      }
      ASSERT_EQ(static_cast<int64_t>(sl.blocks.size()), ceil_div(sl.computed, bs));
      ASSERT_EQ(sl.reserved_blocks, reserve_blocks(r));
      ASSERT_LE(static_cast<int64_t>(sl.blocks.size()), sl.reserved_blocks);
      ASSERT_EQ(sl.cached_tokens % bs, 0);
      ASSERT_LE(sl.cached_tokens, (sl.prompt_len - 1) / bs * bs);
      if (!cfg_.prefix_cache) {
        ASSERT_EQ(sl.cached_tokens, 0);
      }
      promised += sl.reserved_blocks - static_cast<int64_t>(sl.blocks.size());
      for (int32_t b : sl.blocks) ++refs[b];
    }
    ASSERT_EQ(busy, s.active_slots());
    ASSERT_LE(s.queue_depth() + busy, cfg_.max_slots + cfg_.max_queue);
    // The block manager agrees with the tables, and the reservations fit in what is free.
    const auto& kv = s.kv();
    ASSERT_EQ(kv.n_blocks(), n_blocks_);
    for (const auto& [b, n] : refs) ASSERT_EQ(kv.refs(b), n) << "block " << b;
    ASSERT_EQ(s.kv_blocks_used(), static_cast<int64_t>(refs.size()));
    ASSERT_EQ(kv.free_blocks() + kv.referenced_blocks(), n_blocks_);
    ASSERT_LE(promised, kv.free_blocks()) << "reservations exceed the free blocks";
    ASSERT_LE(kv.cached_blocks(), n_blocks_);
    const auto& c = s.counters();
    ASSERT_EQ(c.submitted, subs_.size());
    ASSERT_EQ(c.submitted,
              c.finished + c.cancelled + c.failed + static_cast<uint64_t>(s.queue_depth() + busy));
    coverage["max use %"] = std::max(
        coverage["max use %"],
        static_cast<int>(100 * (s.kv_blocks_used() + promised) / std::max<int64_t>(1, n_blocks_)));
  }

  void check_outcomes() {
    ASSERT_FALSE(state_->has_work());
    ASSERT_TRUE(ex_->active_slots().empty());
    ASSERT_EQ(state_->kv_blocks_used(), 0);
    ASSERT_EQ(state_->kv().free_blocks(), n_blocks_);
    if (state_->kv().stats().evictions > 0) ++coverage["evictions"];
    uint64_t tokens = 0;
    for (const auto& [id, sub] : subs_) {
      SCOPED_TRACE("request " + std::to_string(id));
      ASSERT_TRUE(log_.done(id)) << "never ended";
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
      ++coverage[l.failed ? "failed" : rz::finish_reason_name(l.reason)];
      if (l.failed) {
        ASSERT_NE(l.failed_event.message.find("injected"), std::string::npos)
            << l.failed_event.message;
        continue;
      }
      const auto& u = l.finished_event.usage;
      ASSERT_EQ(u.prompt_tokens, static_cast<int>(r.prompt.size()));
      ASSERT_EQ(u.cached_tokens % cfg_.kv_block_size, 0);
      switch (l.reason) {
        case rz::FinishReason::cancelled: ASSERT_TRUE(sub.cancel_asked); break;
        case rz::FinishReason::stop:
          ASSERT_FALSE(r.ignore_eos);
          ASSERT_TRUE(cfg_.is_eog(l.tokens.back()));
          break;
        case rz::FinishReason::length:
          if (static_cast<int>(r.prompt.size()) + n == cfg_.max_context) ++coverage["context full"];
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
    ASSERT_EQ(c.submitted, subs_.size());
    ASSERT_EQ(c.submitted, c.finished + c.cancelled + c.failed);
    if (!cfg_.prefix_cache) {
      ASSERT_EQ(c.prefix_hit_tokens, 0u);
    }
  }

  std::mt19937_64 rng_;
  bool kv_tight_;
  rz::BatchConfig cfg_;
  int64_t n_blocks_ = 0;
  std::unique_ptr<rz::BatchedDecodeState> state_;
  std::unique_ptr<FakeExecutor> ex_;
  std::unique_ptr<rz::StepRunner> runner_;
  EventLog log_;
  std::map<uint64_t, Submitted> subs_;
  std::vector<std::vector<int32_t>> systems_;
  uint64_t next_id_ = 1;
};

// Runs `seeds` random stresses of `steps` steps and returns the merged coverage ("max use %" is
// the maximum, the rest are sums); prints it.
inline std::map<std::string, int> run_stress(uint64_t seeds, int steps, bool kv_tight,
                                             bool plan_ahead = false) {
  std::map<std::string, int> all;
  for (uint64_t seed = 1; seed <= seeds; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Stress st(seed, kv_tight);
    st.plan_ahead = plan_ahead;
    st.run(steps);
    if (::testing::Test::HasFailure()) return all;
    for (const auto& [k, v] : st.coverage)
      all[k] = k == "max use %" ? std::max(all[k], v) : all[k] + v;
  }
  std::string summary;
  for (const auto& [k, v] : all) summary += k + "=" + std::to_string(v) + " ";
  ::testing::Test::RecordProperty("coverage", summary);
  std::printf("coverage: %s\n", summary.c_str());
  return all;
}

}  // namespace rz_test
