// Paged KV cache bookkeeping (see kv_blocks.hpp): a free list of block ids and one block table
// per slot. Only ids move; device memory is never touched here.
#include "gpu/kv_blocks.hpp"

#include <string>

#include "formats/common.hpp"

namespace rz::gpu {

KvBlockAllocator::KvBlockAllocator(int n_blocks, int block_size, int n_slots)
    : n_blocks_(n_blocks), block_size_(block_size) {
  if (n_blocks < 0 || n_slots < 0 || block_size <= 0)
    throw Error("KvBlockAllocator: bad shape (n_blocks " + std::to_string(n_blocks) +
                ", block_size " + std::to_string(block_size) + ", n_slots " +
                std::to_string(n_slots) + ")");
  free_.reserve(n_blocks);
  for (int b = n_blocks - 1; b >= 0; --b) free_.push_back(b);  // block 0 is handed out first
  tables_.resize(n_slots);
}

void KvBlockAllocator::check_slot(int slot, const char* what) const {
  if (slot < 0 || slot >= n_slots())
    throw Error(std::string("KvBlockAllocator::") + what + ": slot " + std::to_string(slot) +
                " out of range (" + std::to_string(n_slots()) + " slots)");
}

int64_t KvBlockAllocator::blocks_needed(int64_t n_tokens) const {
  if (n_tokens < 0)
    throw Error("KvBlockAllocator: negative token count " + std::to_string(n_tokens));
  return (n_tokens + block_size_ - 1) / block_size_;
}

bool KvBlockAllocator::reserve(int slot, int64_t n_tokens) {
  check_slot(slot, "reserve");
  auto& t = tables_[slot];
  const int64_t need = blocks_needed(n_tokens);
  const int64_t have = static_cast<int64_t>(t.size());
  if (need <= have) return true;
  if (need - have > free_blocks()) return false;
  for (int64_t i = have; i < need; ++i) {
    t.push_back(free_.back());
    free_.pop_back();
  }
  return true;
}

void KvBlockAllocator::release(int slot) {
  check_slot(slot, "release");
  auto& t = tables_[slot];
  // Back in reverse so the slot's first block is the next one handed out (LIFO reuse).
  for (auto it = t.rbegin(); it != t.rend(); ++it) free_.push_back(*it);
  t.clear();
}

std::span<const int32_t> KvBlockAllocator::table(int slot) const {
  check_slot(slot, "table");
  return tables_[slot];
}

int64_t KvBlockAllocator::capacity(int slot) const {
  check_slot(slot, "capacity");
  return static_cast<int64_t>(tables_[slot].size()) * block_size_;
}

int64_t KvBlockAllocator::cache_row(int slot, int64_t pos) const {
  check_slot(slot, "cache_row");
  if (pos < 0 || pos >= capacity(slot))
    throw Error("KvBlockAllocator::cache_row: position " + std::to_string(pos) + " outside slot " +
                std::to_string(slot) + "'s " + std::to_string(capacity(slot)) + " reserved tokens");
  return int64_t(tables_[slot][pos / block_size_]) * block_size_ + pos % block_size_;
}

}  // namespace rz::gpu
