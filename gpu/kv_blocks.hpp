// Paged KV cache bookkeeping for the CUDA executor: which fixed-size cache blocks each batch slot
// owns, in order (its block table). Plain host data, no CUDA: the device caches are allocated
// once, up front, and never reallocated; only block ids move between the free list and the
// slots' tables. "No room" is an answer (reserve returns false and changes nothing), never an
// exception: what to do about it (queue, preempt) is the scheduler's business.
//
// The device layout of the caches and the per-layer shape the kernels take (KvCacheShape) are
// in kernels/kv_cache_shape.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/kv_cache_shape.hpp"

namespace rz::gpu {

class KvBlockAllocator {
 public:
  // n_blocks blocks of block_size tokens each, shared by n_slots slots (all empty at first).
  // Throws rz::Error for a non-positive block_size or negative counts.
  KvBlockAllocator(int n_blocks, int block_size, int n_slots);

  int n_blocks() const { return n_blocks_; }
  int block_size() const { return block_size_; }
  int n_slots() const { return static_cast<int>(tables_.size()); }
  int free_blocks() const { return static_cast<int>(free_.size()); }

  // Blocks that hold n_tokens tokens: ceil(n_tokens / block_size). n_tokens >= 0.
  int64_t blocks_needed(int64_t n_tokens) const;
  // Whether a new (empty) sequence of n_tokens tokens fits in the free blocks now.
  bool can_fit(int64_t n_tokens) const { return blocks_needed(n_tokens) <= free_blocks(); }

  // Grows slot's table so that it holds n_tokens tokens. All or nothing: returns false ("no
  // room") and changes nothing when the free blocks do not suffice. Never shrinks: a slot that
  // already holds n_tokens is left as it is (true). Throws rz::Error for a bad slot or
  // n_tokens < 0.
  bool reserve(int slot, int64_t n_tokens);
  // Returns all of slot's blocks to the free list; its table becomes empty.
  void release(int slot);

  // The slot's block ids in token order: token p is in table(slot)[p / block_size].
  std::span<const int32_t> table(int slot) const;
  // Tokens the slot's table holds now: table(slot).size() * block_size.
  int64_t capacity(int slot) const;
  // Flat cache row of token pos of slot: block * block_size + offset (kv_append's row index).
  // Throws rz::Error when pos is not within capacity(slot).
  int64_t cache_row(int slot, int64_t pos) const;

 private:
  void check_slot(int slot, const char* what) const;

  int n_blocks_;
  int block_size_;
  std::vector<int32_t> free_;                 // free block ids, taken from the back
  std::vector<std::vector<int32_t>> tables_;  // [n_slots] block ids in token order
};

}  // namespace rz::gpu
