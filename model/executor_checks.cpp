// Request checks shared by the executors (see executor_checks.hpp).
#include "model/executor_checks.hpp"

#include <set>
#include <string>

#include "formats/common.hpp"

namespace rz {

void check_slot(int slot, int n_slots, const char* what) {
  if (slot < 0 || slot >= n_slots)
    throw Error(std::string(what) + ": slot " + std::to_string(slot) + " out of range (0.." +
                std::to_string(n_slots - 1) + ")");
}

void check_token(int32_t tok, int n_vocab, const char* what) {
  if (tok < 0 || tok >= n_vocab)
    throw Error(std::string(what) + ": token id " + std::to_string(tok) +
                " out of range (vocabulary " + std::to_string(n_vocab) + ")");
}

void check_step(std::span<const StepSeq> seqs, const SlotView& v) {
  std::set<int> seen;
  for (const StepSeq& s : seqs) {
    check_slot(s.slot, v.n_slots, "step");
    const std::string slot = "step: slot " + std::to_string(s.slot);
    if (!seen.insert(s.slot).second) throw Error(slot + " appears twice in one step");
    if (s.begin) {
      if (v.active(s.slot)) throw Error(slot + " is busy");
      if (s.start != static_cast<int64_t>(s.cached.size()))
        throw Error(slot + " starts at " + std::to_string(s.start) + " with " +
                    std::to_string(s.cached.size()) + " cached tokens");
      for (int32_t t : s.cached) check_token(t, v.n_vocab, "step");
    } else {
      if (!v.active(s.slot)) throw Error(slot + " is not active");
      if (s.start != v.length(s.slot))
        throw Error(slot + " holds " + std::to_string(v.length(s.slot)) +
                    " tokens, the step starts at " + std::to_string(s.start));
    }
    if (s.tokens.empty()) throw Error(slot + ": no tokens");
    if (s.end() > v.max_context)
      throw Error(slot + ": " + std::to_string(s.end()) + " tokens do not fit the context of " +
                  std::to_string(v.max_context) + " tokens");
    for (int32_t t : s.tokens) check_token(t, v.n_vocab, "step");
    const int64_t need = (int64_t{s.end()} + v.kv_block_size - 1) / v.kv_block_size;
    if (static_cast<int64_t>(s.blocks.size()) < need)
      throw Error(slot + ": " + std::to_string(s.blocks.size()) + " KV blocks for " +
                  std::to_string(s.end()) + " tokens (" + std::to_string(need) + " needed)");
    for (int32_t b : s.blocks)
      if (b < 0 || b >= v.kv_blocks)
        throw Error(slot + ": KV block " + std::to_string(b) + " out of range (0.." +
                    std::to_string(v.kv_blocks - 1) + ")");
  }
}

}  // namespace rz
