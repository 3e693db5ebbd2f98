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

void check_prefill(std::span<const PrefillRequest> reqs, const SlotView& v) {
  std::set<int> seen;
  for (const auto& r : reqs) {
    check_slot(r.slot, v.n_slots, "prefill");
    if (v.active(r.slot) || !seen.insert(r.slot).second)
      throw Error("prefill: slot " + std::to_string(r.slot) + " is busy");
    if (r.tokens.empty()) throw Error("prefill: empty prompt for slot " + std::to_string(r.slot));
    if (static_cast<int64_t>(r.tokens.size()) > v.max_context)
      throw Error("prefill: prompt of " + std::to_string(r.tokens.size()) +
                  " tokens does not fit the context of " + std::to_string(v.max_context) +
                  " tokens");
    for (int32_t t : r.tokens) check_token(t, v.n_vocab, "prefill");
  }
}

void check_decode(std::span<const DecodeRequest> reqs, const SlotView& v) {
  std::set<int> seen;
  for (const auto& r : reqs) {
    check_slot(r.slot, v.n_slots, "decode");
    if (!v.active(r.slot)) throw Error("decode: slot " + std::to_string(r.slot) + " is not active");
    if (!seen.insert(r.slot).second)
      throw Error("decode: slot " + std::to_string(r.slot) + " appears twice in one step");
    if (v.length(r.slot) >= v.max_context)
      throw Error("decode: slot " + std::to_string(r.slot) + " is full (" +
                  std::to_string(v.max_context) + " tokens)");
    check_token(r.token, v.n_vocab, "decode");
  }
}

}  // namespace rz
