// The request checks every Executor makes before it does any work, with the same messages
// everywhere: a failed check throws rz::Error and leaves the executor unchanged.
#pragma once
#include <cstdint>
#include <functional>
#include <span>

#include "model/executor.hpp"

namespace rz {

// What the checks need to know of an executor's slots and KV cache.
struct SlotView {
  int n_slots = 0;
  int max_context = 0;
  int n_vocab = 0;
  int kv_block_size = 0;
  int64_t kv_blocks = 0;
  std::function<bool(int)> active;  // slot in range -> holds a sequence
  std::function<int(int)> length;   // slot in range -> tokens in its history
};

void check_slot(int slot, int n_slots, const char* what);
void check_token(int32_t tok, int n_vocab, const char* what);
// Every entry's slot in range and named once; a `begin` entry's slot free and its start the
// number of cached tokens, any other's slot active and its start the slot's length; at least one
// token, the end within the context, ids in the vocabulary; a block table that covers the end
// with block ids in range.
void check_step(std::span<const StepSeq> seqs, const SlotView& v);

}  // namespace rz
