// A paged-KV fake Executor for the scheduler's KV-block tests: FakeExecutor (same tokens, same
// input checks) with a shared cache of n_blocks blocks of block_size tokens, kept the way the CUDA
// executor keeps it. A prefill takes ceil(max(prompt, reserve_tokens) / block_size) blocks per
// request and THROWS (before any work) if the step asks for more blocks than are free; a decode
// that outgrows a slot's blocks takes one more (counted in `grows`) and throws when none is free;
// release returns a slot's blocks. Every PrefillRequest's reserve_tokens is recorded.
#pragma once
#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "formats/common.hpp"
#include "tests/sched/fake_executor.hpp"

namespace rz_test {

class PagedFakeExecutor : public FakeExecutor {
 public:
  struct Reserve {
    int slot = 0;
    int prompt = 0;          // prompt tokens
    int reserve_tokens = 0;  // PrefillRequest::reserve_tokens as the executor received it
  };

  PagedFakeExecutor(int max_slots, int max_context, int n_vocab, int block_size, int64_t n_blocks)
      : FakeExecutor(max_slots, max_context, n_vocab),
        block_size_(block_size),
        n_blocks_(n_blocks),
        held_(static_cast<size_t>(max_slots), 0) {}

  int kv_block_size() const override { return block_size_; }
  int64_t kv_blocks() const override { return n_blocks_; }

  std::vector<Reserve> reserves;  // prefill requests that passed the block check, in order
  int grows = 0;                  // blocks taken by decode because a reservation was too small
  int64_t max_used = 0;           // high-water mark of used()

  int64_t used() const { return used_; }
  int64_t held(int slot) const { return in_range(slot) ? held_[static_cast<size_t>(slot)] : 0; }
  int64_t blocks_for(int64_t tokens) const { return (tokens + block_size_ - 1) / block_size_; }

  std::vector<int32_t> prefill(std::span<const rz::PrefillRequest> reqs) override {
    int64_t want = 0;
    for (const auto& r : reqs) {
      if (!in_range(r.slot)) continue;  // FakeExecutor::prefill throws for it
      if (held(r.slot) != 0)
        fail("prefill: slot " + std::to_string(r.slot) + " still holds blocks");
      want += need(r);
    }
    if (used_ + want > n_blocks_)
      fail("prefill: " + std::to_string(want) + " KV blocks reserved at once, only " +
           std::to_string(n_blocks_ - used_) + " of " + std::to_string(n_blocks_) + " free");
    for (const auto& r : reqs)
      reserves.push_back({r.slot, static_cast<int>(r.tokens.size()), r.reserve_tokens});
    std::vector<int32_t> out;
    try {
      out = FakeExecutor::prefill(reqs);
    } catch (...) {
      take(reqs);  // a failure after the work left the slots active: their blocks are taken
      throw;
    }
    take(reqs);
    return out;
  }

  std::vector<int32_t> decode(std::span<const rz::DecodeRequest> reqs) override {
    int64_t extra = 0;
    for (const auto& r : reqs)
      if (in_range(r.slot) && slot_active(r.slot))
        extra += std::max<int64_t>(0, blocks_for(slot_length(r.slot) + 1) - held(r.slot));
    if (used_ + extra > n_blocks_)
      fail("decode: " + std::to_string(extra) + " more KV blocks needed, only " +
           std::to_string(n_blocks_ - used_) + " free");
    try {
      auto out = FakeExecutor::decode(reqs);
      grow(reqs);
      return out;
    } catch (...) {
      grow(reqs);
      throw;
    }
  }

  void release(int slot) override {
    FakeExecutor::release(slot);
    used_ -= held_[static_cast<size_t>(slot)];
    held_[static_cast<size_t>(slot)] = 0;
  }

 private:
  bool in_range(int slot) const { return slot >= 0 && slot < max_slots(); }
  int64_t need(const rz::PrefillRequest& r) const {
    return blocks_for(std::max<int64_t>(static_cast<int64_t>(r.tokens.size()), r.reserve_tokens));
  }
  void add(int slot, int64_t blocks) {
    held_[static_cast<size_t>(slot)] += blocks;
    used_ += blocks;
    max_used = std::max(max_used, used_);
  }
  void take(std::span<const rz::PrefillRequest> reqs) {
    for (const auto& r : reqs)
      if (in_range(r.slot) && slot_active(r.slot) && held(r.slot) == 0) add(r.slot, need(r));
  }
  void grow(std::span<const rz::DecodeRequest> reqs) {
    for (const auto& r : reqs) {
      if (!in_range(r.slot) || !slot_active(r.slot)) continue;
      const int64_t more = blocks_for(slot_length(r.slot)) - held(r.slot);
      if (more > 0) {
        add(r.slot, more);
        grows += static_cast<int>(more);
      }
    }
  }
  [[noreturn]] static void fail(const std::string& msg) {
    throw rz::Error("paged fake executor: " + msg);
  }

  int block_size_;
  int64_t n_blocks_;
  std::vector<int64_t> held_;  // blocks each slot holds
  int64_t used_ = 0;
};

}  // namespace rz_test
