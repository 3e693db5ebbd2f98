// Drives an Executor directly, one sequence per slot, without a scheduler: a prompt goes in one
// step, each decode in one step, and the runner keeps each slot's block table in its own
// KvBlockManager (prefix cache off). For tests, benchmarks and tools (rz generate, gpu_verify);
// the engine's scheduler (sched/batch_state.hpp) does the same with a token budget and caching.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "model/executor.hpp"
#include "sched/kv_block_manager.hpp"

namespace rz {

struct PrefillRequest {
  int slot = 0;                 // a free slot
  std::vector<int32_t> tokens;  // the whole prompt (at least one token)
  SamplingParams sampling;      // used for this slot until it is released
};

struct DecodeRequest {
  int slot = 0;
  int32_t token = 0;  // the token to append (normally the one sampled last step)
};

class SlotRunner {
 public:
  // Blocks as the executor has them (kv_blocks() of kv_block_size()).
  explicit SlotRunner(Executor& ex);

  Executor& executor() { return ex_; }
  // Prefills the prompts into free slots in one step and samples each one's first token.
  // Decodes append one token to each active slot in one step and sample the next one.
  // One token per request, in request order. Throws rz::Error (the executor's, or "no free KV
  // block") before any work when a request does not fit; the runner's tables are unchanged then.
  std::vector<int32_t> prefill(std::span<const PrefillRequest> reqs);
  int32_t prefill(const PrefillRequest& req) { return prefill(std::span(&req, 1))[0]; }
  std::vector<int32_t> decode(std::span<const DecodeRequest> reqs);
  int32_t decode(int slot, int32_t token) {
    const DecodeRequest r{slot, token};
    return decode(std::span(&r, 1))[0];
  }
  // Releases the slot in the executor and returns its blocks.
  void release(int slot);

  const KvBlockManager& blocks() const { return blocks_; }
  std::span<const int32_t> table(int slot) const { return tables_.at(size_t(slot)); }

 private:
  std::vector<int32_t> run(std::vector<StepSeq>& seqs);

  Executor& ex_;
  KvBlockManager blocks_;
  std::vector<std::vector<int32_t>> tables_;  // [slot] block ids in token order
};

}  // namespace rz
