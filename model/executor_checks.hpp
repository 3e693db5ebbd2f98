// The request checks every Executor makes before it does any work, with the same messages
// everywhere: a failed check throws rz::Error and leaves the executor unchanged.
#pragma once
#include <cstdint>
#include <functional>
#include <span>

#include "model/executor.hpp"

namespace rz {

// What the checks need to know of an executor's slots.
struct SlotView {
  int n_slots = 0;
  int max_context = 0;
  int n_vocab = 0;
  std::function<bool(int)> active;  // slot in range -> holds a sequence
  std::function<int(int)> length;   // slot in range -> tokens in its cache
};

void check_slot(int slot, int n_slots, const char* what);
void check_token(int32_t tok, int n_vocab, const char* what);
// Every slot free, in range and named once; prompts non-empty, within the context, ids in range.
void check_prefill(std::span<const PrefillRequest> reqs, const SlotView& v);
// Every slot active, in range, named once and not full; ids in range.
void check_decode(std::span<const DecodeRequest> reqs, const SlotView& v);

}  // namespace rz
