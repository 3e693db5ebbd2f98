// A deterministic fake Executor for the scheduler tests. Each slot's next token is a pure
// function of (sampling seed, the slot's tokens in KV), so a request's tokens do not depend on
// its slot or on what runs beside it. It checks its inputs the way model/executor.hpp says a real
// executor does (busy/free/full slots throw rz::Error before any work), records every call, can
// be told to throw on chosen steps (before or after doing the work), and counts decode inputs
// that are not the token it sampled last for that slot.
#pragma once
#include <cstdint>
#include <functional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "formats/common.hpp"
#include "model/executor.hpp"

namespace rz_test {

class FakeExecutor : public rz::Executor {
 public:
  struct Call {
    enum class Kind { prefill, decode, release };
    Kind kind = Kind::prefill;
    int step = -1;                 // prefill/decode calls numbered from 0; -1 for release
    std::vector<int> slots;        // in request order
    std::vector<int32_t> inputs;   // decode: the appended tokens; prefill: prompt lengths
    std::vector<int32_t> outputs;  // empty when the call threw
    bool threw = false;
  };

  FakeExecutor(int max_slots, int max_context, int n_vocab)
      : max_slots_(max_slots), max_context_(max_context), slots_(static_cast<size_t>(max_slots)) {
    cfg_.n_vocab = n_vocab;
  }

  // The reference: the token sampled after `history` (a slot's whole KV content) with `seed`.
  static int32_t next_token(uint64_t seed, std::span<const int32_t> history, int n_vocab) {
    uint64_t h = start(seed);
    for (int32_t t : history) h = mix(h, t);
    return static_cast<int32_t>(h % static_cast<uint64_t>(n_vocab));
  }

  // Decides whether a call throws; it sees the call with kind, step and slots filled in.
  std::function<bool(const Call&)> fail_if;
  bool fail_after_work = false;  // throw after the slots were updated (a partial failure)
  void fail_on_steps(std::set<int> steps) {
    fail_if = [steps](const Call& c) { return steps.count(c.step) > 0; };
  }

  std::vector<Call> calls;
  int feed_mismatches = 0;  // decode tokens that were not the slot's last sampled token
  int steps = 0;            // prefill and decode calls so far

  const rz::ModelConfig& config() const override { return cfg_; }
  int max_slots() const override { return max_slots_; }
  int max_context() const override { return max_context_; }

  std::vector<int32_t> prefill(std::span<const rz::PrefillRequest> reqs) override {
    Call c{Call::Kind::prefill, steps++, {}, {}, {}, false};
    std::set<int> seen;
    for (const auto& r : reqs) {
      check_slot(r.slot, "prefill");
      if (S(r.slot).active) fail("prefill: slot " + std::to_string(r.slot) + " is busy");
      if (!seen.insert(r.slot).second) fail("prefill: slot " + std::to_string(r.slot) + " twice");
      if (r.tokens.empty()) fail("prefill: empty prompt");
      if (static_cast<int>(r.tokens.size()) > max_context_) fail("prefill: prompt too long");
      for (int32_t t : r.tokens) check_token(t);
      c.slots.push_back(r.slot);
      c.inputs.push_back(static_cast<int32_t>(r.tokens.size()));
    }
    if (reqs.empty()) fail("prefill: no requests");
    maybe_fail(c, false);
    for (const auto& r : reqs) {
      Slot& s = S(r.slot);
      s.active = true;
      s.seed = r.sampling.seed;
      s.kv.assign(r.tokens.begin(), r.tokens.end());
      s.hash = start(s.seed);
      for (int32_t t : r.tokens) s.hash = mix(s.hash, t);
      s.last_out = sample(s);
      c.outputs.push_back(s.last_out);
    }
    maybe_fail(c, true);
    calls.push_back(c);
    return c.outputs;
  }

  std::vector<int32_t> decode(std::span<const rz::DecodeRequest> reqs) override {
    Call c{Call::Kind::decode, steps++, {}, {}, {}, false};
    std::set<int> seen;
    for (const auto& r : reqs) {
      check_slot(r.slot, "decode");
      if (!S(r.slot).active) fail("decode: slot " + std::to_string(r.slot) + " is not active");
      if (static_cast<int>(S(r.slot).kv.size()) >= max_context_)
        fail("decode: slot " + std::to_string(r.slot) + " is full");
      if (!seen.insert(r.slot).second) fail("decode: slot " + std::to_string(r.slot) + " twice");
      check_token(r.token);
      c.slots.push_back(r.slot);
      c.inputs.push_back(r.token);
    }
    if (reqs.empty()) fail("decode: no requests");
    maybe_fail(c, false);
    for (const auto& r : reqs) {
      Slot& s = S(r.slot);
      if (r.token != s.last_out) ++feed_mismatches;
      s.kv.push_back(r.token);
      s.hash = mix(s.hash, r.token);
      s.last_out = sample(s);
      c.outputs.push_back(s.last_out);
    }
    maybe_fail(c, true);
    calls.push_back(c);
    return c.outputs;
  }

  void release(int slot) override {
    check_slot(slot, "release");
    calls.push_back(Call{Call::Kind::release, -1, {slot}, {}, {}, false});
    S(slot) = Slot{};
  }
  bool slot_active(int slot) const override {
    return slot >= 0 && slot < max_slots_ && slots_[static_cast<size_t>(slot)].active;
  }
  int slot_length(int slot) const override {
    return slot_active(slot) ? static_cast<int>(slots_[static_cast<size_t>(slot)].kv.size()) : 0;
  }
  void set_keep_logits(bool) override {}
  std::span<const float> last_logits(int) const override { return {}; }

  const std::vector<int32_t>& kv(int slot) const { return slots_.at(static_cast<size_t>(slot)).kv; }
  std::vector<int> active_slots() const {
    std::vector<int> out;
    for (int i = 0; i < max_slots_; ++i)
      if (slot_active(i)) out.push_back(i);
    return out;
  }

 private:
  struct Slot {
    bool active = false;
    uint64_t seed = 0;
    std::vector<int32_t> kv;  // tokens in the "KV cache", oldest first
    uint64_t hash = 0;        // start(seed) folded with kv
    int32_t last_out = -1;
  };

  static uint64_t splitmix(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
  }
  static uint64_t start(uint64_t seed) { return splitmix(seed ^ 0x5EEDull); }
  static uint64_t mix(uint64_t h, int32_t t) {
    return splitmix(h ^ (static_cast<uint64_t>(static_cast<uint32_t>(t)) * 0x100000001B3ull));
  }
  int32_t sample(const Slot& s) const {
    return static_cast<int32_t>(s.hash % static_cast<uint64_t>(cfg_.n_vocab));
  }

  Slot& S(int slot) { return slots_[static_cast<size_t>(slot)]; }
  [[noreturn]] static void fail(const std::string& msg) {
    throw rz::Error("fake executor: " + msg);
  }
  void check_slot(int slot, const char* what) const {
    if (slot < 0 || slot >= max_slots_)
      fail(std::string(what) + ": slot " + std::to_string(slot) + " out of range");
  }
  void check_token(int32_t t) const {
    if (t < 0 || t >= cfg_.n_vocab) fail("token " + std::to_string(t) + " outside the vocabulary");
  }
  void maybe_fail(Call& c, bool after_work) {
    if (after_work != fail_after_work || !fail_if || !fail_if(c)) return;
    c.threw = true;
    c.outputs.clear();
    calls.push_back(c);
    fail("injected failure at step " + std::to_string(c.step));
  }

  rz::ModelConfig cfg_;
  int max_slots_;
  int max_context_;
  std::vector<Slot> slots_;
};

}  // namespace rz_test
