// The executor interface: what the CPU executor (cpu/cpu_executor.hpp) and the CUDA executor
// (gpu/gpu_executor.hpp) implement, and what the actors drive. An executor owns a fixed number of
// slots (each a sequence's token history and sampler) and a paged KV cache of kv_blocks() blocks
// of kv_block_size() tokens. It runs exactly the step it is asked for and decides nothing: which
// block holds which tokens is the scheduler's business (sched/kv_block_manager.hpp), and each
// step says it.
//
// One step mixes decode tokens (one per running sequence) and prefill chunks (a piece of a
// prompt), any number of each:
//
//   StepSeq{slot 0, start 37, tokens [t37],         blocks [4 9 2], sample}     decode
//   StepSeq{slot 3, begin, cached [a0..a31], start 32, tokens [a32..a95],
//           blocks [7 1 12 8 5 3], no sample}                                  first prompt chunk,
//                                                                               32 tokens reused
//   StepSeq{slot 5, start 96, tokens [b96..b111], blocks [...], sample}         last prompt chunk
//
// Token p of a sequence has its K and V in block blocks[p / kv_block_size()], row
// p % kv_block_size(). Blocks a sequence shares with another (a cached prefix) are only read:
// a step writes the KV of positions start .. start + n - 1 alone.
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

// Tokens per KV cache block when none is asked for (both executors).
inline constexpr int kDefaultKvBlockSize = 16;

// One sequence's part of a step.
struct StepSeq {
  int slot = 0;
  // begin: the slot (free) starts a new sequence with this entry. Its sampler starts from
  // `sampling`, and its history is `cached`, the tokens at positions [0, start) whose KV the
  // blocks already hold (a reused prefix; often empty). Otherwise the entry continues the slot's
  // sequence and start is the slot's length; `sampling` and `cached` are ignored.
  bool begin = false;
  SamplingParams sampling;
  std::vector<int32_t> cached;
  int start = 0;                // position of tokens[0]
  std::vector<int32_t> tokens;  // computed at positions start .. start + n - 1 (n >= 1)
  // The sequence's block table, covering at least start + n tokens.
  std::vector<int32_t> blocks;
  // Sample the next token from the logits of the last token (a decode, or a prompt's last
  // chunk). Without it the step only fills the KV cache (an earlier prompt chunk). The slot's
  // first sampling marks where its prompt ends: the presence and frequency penalties count the
  // tokens after that.
  bool sample = false;
  int end() const { return start + static_cast<int>(tokens.size()); }
};

// A count an executor keeps about its own work, exported on /metrics as a Prometheus counter
// (never decreasing while the executor lives). name and help are static strings.
struct ExecutorCounter {
  const char* name = "";  // e.g. "rz_cuda_graphs_built_total"
  const char* help = "";
  uint64_t value = 0;
};

class Executor {
 public:
  virtual ~Executor() = default;
  virtual const ModelConfig& config() const = 0;
  virtual int max_slots() const = 0;
  virtual int max_context() const = 0;  // tokens one slot can hold (prompt + generated)
  // The paged KV cache: kv_blocks() blocks of kv_block_size() tokens, shared by all slots.
  virtual int kv_block_size() const = 0;
  virtual int64_t kv_blocks() const = 0;

  // Runs one step: appends each entry's tokens to its slot's history, computes their KV into the
  // blocks and, for entries with `sample`, samples one token from the last token's logits.
  // Returns one token per sampling entry, in entry order. Throws rz::Error before doing any work
  // when an entry is malformed (model/executor_checks.hpp); when a step fails part way, the
  // slots of its entries are released before the error propagates.
  virtual std::vector<int32_t> step(std::span<const StepSeq> seqs) = 0;

  // The log-probabilities of the last step()'s sampled tokens: one per sampling entry, in entry
  // order, `present` for the entries whose sampling asks for them (SamplingParams::logprobs >= 0);
  // empty when none of them asked. Valid until the next step(). (An executor that computes
  // none, such as a test double, keeps this default.)
  virtual std::span<const TokenLogprobs> step_logprobs() const { return {}; }

  // Frees a slot (no-op for a free one). The KV blocks are not the executor's: nothing else
  // changes.
  virtual void release(int slot) = 0;
  virtual bool slot_active(int slot) const = 0;
  virtual int slot_length(int slot) const = 0;  // tokens in the slot's history (and KV cache)

  // When enabled, the logits each step sampled from are kept per slot and readable until the
  // slot's next sampling step (tests and tools; costs a copy of n_vocab floats per slot and step).
  virtual void set_keep_logits(bool keep) = 0;
  virtual std::span<const float> last_logits(int slot) const = 0;

  // The executor's own counters (the CUDA executor's graph builds and replays), read by its
  // owner after each step for /metrics; none by default.
  virtual std::vector<ExecutorCounter> counters() const { return {}; }
};

}  // namespace rz
