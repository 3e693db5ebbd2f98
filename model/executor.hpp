// The executor interface: what the CPU executor (cpu/cpu_executor.hpp) and the CUDA executor
// (gpu/gpu_executor.hpp) implement, and what the actors drive. An executor owns a fixed number of
// slots, each with its own KV cache and sampler; it runs exactly the step it is asked for and
// decides nothing.
#pragma once
#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "formats/model_config.hpp"
#include "model/sampling.hpp"

namespace rz {

// Tokens per slot when none is asked for: the executors' default max_context and the rz
// commands' default --ctx. The context the model was trained for, at most 4096 (a KV cache per
// slot of a model's full training context, 128K tokens for Llama 3.1, is rarely what is wanted).
inline constexpr int kDefaultContextCap = 4096;
inline int default_context(const ModelConfig& cfg) {
  return cfg.n_ctx_train > 0 ? std::min(cfg.n_ctx_train, kDefaultContextCap) : kDefaultContextCap;
}

struct PrefillRequest {
  int slot = 0;                 // a free slot
  std::vector<int32_t> tokens;  // the whole prompt (at least one token)
  SamplingParams sampling;      // used for this slot until it is released
  // KV cache room to reserve for this slot now, in tokens (prompt + the tokens it may generate);
  // at least the prompt is always reserved. Executors with a shared, paged cache take the blocks
  // at prefill, so the slot's later decode steps never run out; others ignore it.
  int reserve_tokens = 0;
};

struct DecodeRequest {
  int slot = 0;
  int32_t token = 0;  // the token to append (normally the one sampled last step)
};

class Executor {
 public:
  virtual ~Executor() = default;
  virtual const ModelConfig& config() const = 0;
  virtual int max_slots() const = 0;
  virtual int max_context() const = 0;  // tokens one slot can hold (prompt + generated)

  // The KV cache as the scheduler sees it: kv_blocks() blocks of kv_block_size() tokens shared by
  // all slots. A slot holding n tokens (or reserving them) takes ceil(n / kv_block_size()) blocks.
  // The default describes a cache with a full context per slot (one "block" per slot), which
  // never makes a request wait for anything but a free slot.
  virtual int kv_block_size() const { return max_context(); }
  virtual int64_t kv_blocks() const { return max_slots(); }

  // Prefills several prompts into free slots in one step and samples each one's first token.
  // Returns one token per request, in request order. Throws rz::Error before doing any work if a
  // slot is busy or out of range, or a prompt is empty or does not fit in max_context().
  virtual std::vector<int32_t> prefill(std::span<const PrefillRequest> reqs) = 0;

  // One decode step over the given active slots: appends each token and samples the next one.
  // Returns one token per request, in request order. Throws rz::Error before doing any work if a
  // slot is not active or full.
  virtual std::vector<int32_t> decode(std::span<const DecodeRequest> reqs) = 0;

  // Frees a slot (no-op for a free one).
  virtual void release(int slot) = 0;
  virtual bool slot_active(int slot) const = 0;
  virtual int slot_length(int slot) const = 0;  // tokens in the slot's KV cache

  // When enabled, the logits each step produced for each slot are kept and readable until the
  // slot's next step (tests and tools; costs a copy of n_vocab floats per slot and step).
  virtual void set_keep_logits(bool keep) = 0;
  virtual std::span<const float> last_logits(int slot) const = 0;
};

}  // namespace rz
