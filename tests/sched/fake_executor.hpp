// A deterministic, paged and strict fake Executor (model/executor.hpp) for the scheduler tests.
//
// Tokens: a sequence's next token is a pure function of (sampling seed, its whole token history),
// next_token(), so a request's tokens do not depend on its slot, on how its prompt was chunked,
// on the prefix cache or on what runs beside it.
//
// KV: it keeps a simulated paged KV store of kv_blocks() x kv_block_size() rows, each holding
// (token id, position) or nothing. A step first writes each entry's tokens into the rows its
// block table names for positions start .. end - 1, then reads each entry's whole history
// (positions 0 .. end - 1) back through its block table, compares it with the slot's history
// (begin: `cached` then the tokens; else the history so far plus the tokens) and samples from
// what it read, as attention would. A row that is unwritten or holds another token or position
// counts in kv_mismatches (and changes the sampled token). A write into a row that a live
// sequence's table covers at a position that sequence has already computed (a shared or cached
// block), or into a row another entry of the same step writes too, counts in shared_writes.
// Either means the scheduler handed out a wrong block table; kv_errors says where, and the step
// throws (after its work) unless throw_on_kv_error is off.
//
// Checks: the input checks of every real executor (check_step, model/executor_checks.hpp), before
// any work, plus an empty step. Records one Call per step() and every release(). Failure
// injection: fail_if / fail_on_steps throw before the work, or after it with fail_after_work (the
// slots keep what the step did: harsher than the contract, under which an executor releases them,
// so the scheduler's release list is what frees them). feed_mismatches counts continuing entries
// whose first token is not the token the slot sampled last.
#pragma once
#include <cstdint>
#include <functional>
#include <set>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "formats/common.hpp"
#include "model/executor.hpp"
#include "model/executor_checks.hpp"

namespace rz_test {

class FakeExecutor : public rz::Executor {
 public:
  struct Call {
    int step = 0;                  // numbered from 0, refused and failed steps included
    std::vector<int> slots;        // entry order
    std::vector<int> n_tokens;     // tokens of each entry
    std::vector<int> starts;       // start of each entry
    std::vector<bool> begin;       // each entry's begin flag
    std::vector<bool> sample;      // each entry's sample flag
    std::vector<int32_t> outputs;  // one per sampling entry; empty when the step threw
    bool threw = false;
    std::string error;  // what it threw
    int tokens() const {
      int n = 0;
      for (int k : n_tokens) n += k;
      return n;
    }
  };
  struct Release {
    int slot = 0;
    int before_step = 0;  // the number the next step() gets
  };

  // n_blocks == 0: one full context per slot, max_slots * ceil(max_context / block_size) (what
  // BatchConfig uses by default).
  FakeExecutor(int max_slots, int max_context, int n_vocab,
               int block_size = rz::kDefaultKvBlockSize, int64_t n_blocks = 0)
      : max_slots_(max_slots),
        max_context_(max_context),
        block_size_(block_size),
        n_blocks_(n_blocks > 0
                      ? n_blocks
                      : int64_t{max_slots} * ((max_context + block_size - 1) / block_size)),
        slots_(static_cast<size_t>(max_slots)),
        rows_(static_cast<size_t>(n_blocks_ * block_size)) {
    cfg_.n_vocab = n_vocab;
  }

  // The reference: the token sampled after `history` (a sequence's whole KV content) with `seed`.
  static int32_t next_token(uint64_t seed, std::span<const int32_t> history, int n_vocab) {
    uint64_t h = start_hash(seed);
    for (int32_t t : history) h = mix(h, t);
    return static_cast<int32_t>(h % static_cast<uint64_t>(n_vocab));
  }

  // Decides whether a step throws; it sees the Call with step, slots and the entry fields filled.
  std::function<bool(const Call&)> fail_if;
  bool fail_after_work = false;  // throw after the work (KV written, slots updated)
  // A wrong block table also throws (after the work), so that tests that do not look at the
  // counters see failed requests.
  bool throw_on_kv_error = true;
  void fail_on_steps(std::set<int> steps) {
    fail_if = [steps](const Call& c) { return steps.count(c.step) > 0; };
  }

  std::vector<Call> calls;             // one per step(), in order
  std::vector<Release> releases;       // every release(), in order
  int steps = 0;                       // step() calls so far
  int feed_mismatches = 0;             // continuing entries not fed the slot's last sampled token
  int kv_mismatches = 0;               // rows read back that did not hold the sequence's token
  int shared_writes = 0;               // rows written that another sequence had computed
  int64_t rows_written = 0;            // KV rows written (tokens computed), all steps
  std::vector<std::string> kv_errors;  // the first few of both, for messages

  // One counter of its own, as the CUDA executor reports its graphs (Executor::counters).
  std::vector<rz::ExecutorCounter> counters() const override {
    return {{"rz_fake_steps_total", "step() calls of the test executor.", uint64_t(steps)}};
  }

  const rz::ModelConfig& config() const override { return cfg_; }
  int max_slots() const override { return max_slots_; }
  int max_context() const override { return max_context_; }
  int kv_block_size() const override { return block_size_; }
  int64_t kv_blocks() const override { return n_blocks_; }

  std::vector<int32_t> step(std::span<const rz::StepSeq> seqs) override {
    Call c;
    c.step = steps++;
    for (const rz::StepSeq& e : seqs) {
      c.slots.push_back(e.slot);
      c.n_tokens.push_back(static_cast<int>(e.tokens.size()));
      c.starts.push_back(e.start);
      c.begin.push_back(e.begin);
      c.sample.push_back(e.sample);
    }
    try {
      if (seqs.empty()) throw rz::Error("step: no entries");
      rz::check_step(seqs, view());
    } catch (const std::exception& ex) {
      c.threw = true;
      c.error = ex.what();
      calls.push_back(c);
      throw;
    }
    maybe_fail(c, false);
    const int bad_before = kv_mismatches + shared_writes;
    const size_t notes_before = kv_errors.size();
    check_shared_writes(seqs);
    for (const rz::StepSeq& e : seqs) {
      Slot& s = S(e.slot);
      if (e.begin) {
        s = Slot{};
        s.active = true;
        s.seed = e.sampling.seed;
        s.history = e.cached;
      } else if (s.last_out >= 0 && e.tokens[0] != s.last_out) {
        ++feed_mismatches;
      }
      s.history.insert(s.history.end(), e.tokens.begin(), e.tokens.end());
      s.blocks = e.blocks;
      s.last_out = -1;
    }
    for (const rz::StepSeq& e : seqs) write(e, S(e.slot));
    for (const rz::StepSeq& e : seqs) {
      Slot& s = S(e.slot);
      const int32_t t = read_and_sample(e, s);
      if (!e.sample) continue;
      s.last_out = t;
      c.outputs.push_back(t);
    }
    if (throw_on_kv_error && kv_mismatches + shared_writes > bad_before) {
      c.threw = true;
      c.outputs.clear();
      c.error = "fake executor: wrong KV block table: " +
                (kv_errors.size() > notes_before ? kv_errors[notes_before] : std::string("?"));
      calls.push_back(c);
      throw rz::Error(c.error);
    }
    maybe_fail(c, true);
    calls.push_back(c);
    return c.outputs;
  }

  void release(int slot) override {
    rz::check_slot(slot, max_slots_, "release");
    releases.push_back(Release{slot, steps});
    S(slot) = Slot{};  // the KV rows are the scheduler's: they stay as they are
  }
  bool slot_active(int slot) const override {
    return slot >= 0 && slot < max_slots_ && slots_[static_cast<size_t>(slot)].active;
  }
  int slot_length(int slot) const override {
    return slot_active(slot) ? static_cast<int>(slots_[static_cast<size_t>(slot)].history.size())
                             : 0;
  }
  void set_keep_logits(bool) override {}
  std::span<const float> last_logits(int) const override { return {}; }

  // Observation.
  const std::vector<int32_t>& history(int slot) const {
    return slots_.at(static_cast<size_t>(slot)).history;
  }
  const std::vector<int32_t>& table(int slot) const {
    return slots_.at(static_cast<size_t>(slot)).blocks;
  }
  std::vector<int> active_slots() const {
    std::vector<int> out;
    for (int i = 0; i < max_slots_; ++i)
      if (slot_active(i)) out.push_back(i);
    return out;
  }
  // The row of block b at offset o: (token, position), or (-1, -1) when never written.
  std::pair<int32_t, int32_t> row(int32_t block, int offset) const {
    const Row& r = rows_.at(static_cast<size_t>(block) * static_cast<size_t>(block_size_) +
                            static_cast<size_t>(offset));
    return {r.token, r.pos};
  }
  // No wrong table or feed seen so far.
  bool kv_clean() const { return kv_mismatches == 0 && shared_writes == 0 && feed_mismatches == 0; }
  std::string kv_report() const {
    std::string s;
    for (const auto& e : kv_errors) s += e + "\n";
    return s;
  }

 private:
  struct Slot {
    bool active = false;
    uint64_t seed = 0;
    std::vector<int32_t> history;  // tokens in the KV cache, oldest first
    std::vector<int32_t> blocks;   // the block table of its last step
    int32_t last_out = -1;         // sampled by its last step; -1 when that step did not sample
  };
  struct Row {
    int32_t token = -1;
    int32_t pos = -1;  // -1: never written
    uint64_t ctx = 0;  // hash of the sequence's tokens 0 .. pos: what a real row depends on
  };

  static uint64_t splitmix(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
  }
  static uint64_t start_hash(uint64_t seed) { return splitmix(seed ^ 0x5EEDull); }
  static uint64_t mix(uint64_t h, int32_t t) {
    return splitmix(h ^ (static_cast<uint64_t>(static_cast<uint32_t>(t)) * 0x100000001B3ull));
  }

  Slot& S(int slot) { return slots_[static_cast<size_t>(slot)]; }
  size_t row_index(const std::vector<int32_t>& blocks, int pos) const {
    return static_cast<size_t>(blocks[static_cast<size_t>(pos / block_size_)]) *
               static_cast<size_t>(block_size_) +
           static_cast<size_t>(pos % block_size_);
  }
  void note(std::string msg) {
    if (kv_errors.size() < 8) kv_errors.push_back("step " + std::to_string(steps - 1) + ": " + msg);
  }

  rz::SlotView view() const {
    rz::SlotView v;
    v.n_slots = max_slots_;
    v.max_context = max_context_;
    v.n_vocab = cfg_.n_vocab;
    v.kv_block_size = block_size_;
    v.kv_blocks = n_blocks_;
    v.active = [this](int s) { return slots_[static_cast<size_t>(s)].active; };
    v.length = [this](int s) {
      return static_cast<int>(slots_[static_cast<size_t>(s)].history.size());
    };
    return v;
  }

  // Every row this step writes, against every live table (the step's entries with their new
  // tables and start, the other active slots with their last table and length).
  void check_shared_writes(std::span<const rz::StepSeq> seqs) {
    struct Cover {
      int slot;
      int index;     // block index in that table
      int computed;  // positions [0, computed) of that sequence hold their KV
    };
    std::unordered_map<int32_t, std::vector<Cover>> cover;  // written blocks only
    for (const rz::StepSeq& e : seqs)
      for (int p = e.start; p < e.end(); ++p) cover[e.blocks[static_cast<size_t>(p / block_size_)]];
    auto scan = [&](int slot, const std::vector<int32_t>& table, int computed) {
      for (size_t j = 0; j < table.size() && static_cast<int>(j) * block_size_ < computed; ++j) {
        auto it = cover.find(table[j]);
        if (it != cover.end()) it->second.push_back({slot, static_cast<int>(j), computed});
      }
    };
    std::set<int> in_step;
    for (const rz::StepSeq& e : seqs) {
      in_step.insert(e.slot);
      scan(e.slot, e.blocks, e.start);
    }
    for (int i = 0; i < max_slots_; ++i)
      if (slots_[static_cast<size_t>(i)].active && !in_step.count(i))
        scan(i, slots_[static_cast<size_t>(i)].blocks,
             static_cast<int>(slots_[static_cast<size_t>(i)].history.size()));
    std::unordered_map<size_t, std::pair<int, int>> written;  // row -> (slot, position)
    for (const rz::StepSeq& e : seqs) {
      for (int p = e.start; p < e.end(); ++p) {
        const int32_t b = e.blocks[static_cast<size_t>(p / block_size_)];
        const int o = p % block_size_;
        for (const Cover& cv : cover[b]) {
          const int q = cv.index * block_size_ + o;
          if (q < cv.computed) {
            ++shared_writes;
            note("slot " + std::to_string(e.slot) + " writes position " + std::to_string(p) +
                 " into block " + std::to_string(b) + ", which slot " + std::to_string(cv.slot) +
                 " holds computed at position " + std::to_string(q));
          }
        }
        const auto [it, fresh] = written.emplace(row_index(e.blocks, p), std::make_pair(e.slot, p));
        if (!fresh) {
          ++shared_writes;
          note("slot " + std::to_string(e.slot) + " position " + std::to_string(p) + " and slot " +
               std::to_string(it->second.first) + " position " + std::to_string(it->second.second) +
               " write the same row of block " + std::to_string(b));
        }
      }
    }
  }

  // The KV of a position depends on every token up to it, as in a real model.
  static uint64_t context_hash(uint64_t prev, int32_t token) {
    return mix(prev ^ 0xC0DEull, token);
  }

  // Writes positions start .. end - 1 (the slot's history already holds the entry's tokens).
  void write(const rz::StepSeq& e, const Slot& s) {
    uint64_t ctx = 0;
    for (int p = 0; p < e.end(); ++p) {
      ctx = context_hash(ctx, s.history[static_cast<size_t>(p)]);
      if (p < e.start) continue;
      Row& r = rows_[row_index(e.blocks, p)];
      r.token = s.history[static_cast<size_t>(p)];
      r.pos = p;
      r.ctx = ctx;
      ++rows_written;
    }
  }

  // Reads positions 0 .. end - 1 back through the entry's table, checks them against the slot's
  // history and samples from what was read: a wrong row changes the token, as it would change a
  // real model's logits.
  int32_t read_and_sample(const rz::StepSeq& e, const Slot& s) {
    uint64_t h = start_hash(s.seed);
    uint64_t ctx = 0;
    int bad = 0;
    for (int p = 0; p < e.end(); ++p) {
      const Row& r = rows_[row_index(e.blocks, p)];
      const int32_t want = s.history[static_cast<size_t>(p)];
      ctx = context_hash(ctx, want);
      if (r.pos != p || r.token != want || r.ctx != ctx) {
        if (bad++ == 0) {
          std::string held = "nothing";
          if (r.pos >= 0)
            held = "token " + std::to_string(r.token) + " of position " + std::to_string(r.pos) +
                   (r.pos == p && r.token == want ? " after another prefix" : "");
          note("slot " + std::to_string(e.slot) + " position " + std::to_string(p) + ": block " +
               std::to_string(e.blocks[static_cast<size_t>(p / block_size_)]) + " holds " + held +
               ", the sequence has token " + std::to_string(want));
        }
        h = mix(h, ~r.token);  // what attention would see: not the sequence's token
        continue;
      }
      h = mix(h, r.token);
    }
    kv_mismatches += bad;
    return static_cast<int32_t>(h % static_cast<uint64_t>(cfg_.n_vocab));
  }

  void maybe_fail(Call& c, bool after_work) {
    if (after_work != fail_after_work || !fail_if || !fail_if(c)) return;
    c.threw = true;
    c.outputs.clear();
    c.error = "fake executor: injected failure at step " + std::to_string(c.step);
    calls.push_back(c);
    throw rz::Error(c.error);
  }

  rz::ModelConfig cfg_;
  int max_slots_;
  int max_context_;
  int block_size_;
  int64_t n_blocks_;
  std::vector<Slot> slots_;
  std::vector<Row> rows_;
};

}  // namespace rz_test
