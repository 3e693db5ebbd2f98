// The CPU executor: a fp32 Llama-family forward pass over weights left in their stored format
// (dequantized block by block inside the matrix products), a paged fp32 KV cache shared by all
// slots, threads over all cores. A step (model/executor.hpp) mixes decode tokens and prompt
// chunks of any number of slots: every token of every entry goes through each weight matrix
// together, so each weight row is read once per step; each token attends to positions 0..p of its
// own entry's block table; only the entries that sample get the final norm, the output matrix
// and a sampler call.
//
// Bit-exactness: a token's numbers do not depend on the block table or on the other entries'
// attention, but the matrix products work on groups of 8 tokens of the step and a group of 1-2
// or 3-4 tokens (the last one of a step) sums in a different order than one of 5-8
// (cpu/cpu_matmul.cpp). A prompt split into chunks whose sizes (the last one's aside) are
// multiples of 8 therefore gives exactly the logits of the whole prompt in one step; other splits
// and mixes agree to rounding.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "formats/model_file.hpp"
#include "model/executor.hpp"
#include "model/executor_checks.hpp"
#include "model/model_weights.hpp"
#include "model/sampling.hpp"

namespace rz {

class ThreadPool;
struct RopeFreqs;

struct CpuExecutorOptions {
  int slots = 1;
  int max_context = 0;    // tokens per slot; 0: default_context(config) (model/executor.hpp)
  int threads = 0;        // 0: all cores
  int kv_block_size = 0;  // tokens per KV cache block; 0: kDefaultKvBlockSize
  // KV cache blocks shared by all slots; 0: slots * ceil(max_context / kv_block_size), a full
  // context for every slot.
  int64_t kv_blocks = 0;
};

class CpuExecutor final : public Executor {
 public:
  // Throws rz::Error for bad options or weights the executor cannot use.
  CpuExecutor(std::shared_ptr<const ModelFile> file, const CpuExecutorOptions& opt = {});
  ~CpuExecutor() override;

  const ModelConfig& config() const override { return cfg_; }
  int max_slots() const override { return static_cast<int>(slots_.size()); }
  int max_context() const override { return max_ctx_; }
  int kv_block_size() const override { return block_size_; }
  int64_t kv_blocks() const override { return n_blocks_; }
  std::vector<int32_t> step(std::span<const StepSeq> seqs) override;
  void release(int slot) override;
  bool slot_active(int slot) const override;
  int slot_length(int slot) const override;
  void set_keep_logits(bool keep) override { keep_logits_ = keep; }
  std::span<const float> last_logits(int slot) const override;
  std::span<const TokenLogprobs> step_logprobs() const override { return step_logprobs_; }

  int threads() const;
  const ModelWeights& weights() const { return w_; }

 private:
  struct Slot {
    bool active = false;
    std::vector<int32_t> history;  // cached + computed tokens; size() == positions in the cache
    Sampler sampler;
    int prompt_len = -1;        // history length at the first sampling (-1: none yet)
    std::vector<float> logits;  // kept logits (keep_logits_)
  };

  SlotView slot_view() const;  // for the shared request checks (model/executor_checks.hpp)
  // The forward pass over the tokens of every entry (already appended to the histories) and one
  // sampled token per sampling entry.
  std::vector<int32_t> forward(std::span<const StepSeq> seqs);
  float* k_cache(int layer) const;
  float* v_cache(int layer) const;
  void ensure_buffers(int n_tok, int n_sample);

  std::shared_ptr<const ModelFile> file_;
  ModelConfig cfg_;
  ModelWeights w_;
  int max_ctx_ = 0;
  int block_size_ = 0;
  int64_t n_blocks_ = 0;
  int64_t q_dim_ = 0, kv_dim_ = 0;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<RopeFreqs> rope_;
  std::unique_ptr<RopeFreqs> rope_swa_;  // the sliding layers' own (rope_theta_swa), or null
  std::vector<Slot> slots_;
  // The paged KV cache, for K and for V:
  //   [n_layer][n_blocks_ * block_size_][n_head_kv * head_dim] fp32
  // Token p of a step entry is row blocks[p / block_size_] * block_size_ + p % block_size_ of each
  // layer. Allocated uninitialised, so the OS commits pages only as rows get written.
  std::unique_ptr<float[]> k_cache_, v_cache_;
  bool keep_logits_ = false;
  std::vector<TokenLogprobs> step_logprobs_;  // of the last step (step_logprobs())

  // Step buffers, grown as needed (N = tokens in the step, S = sampling entries).
  std::vector<float> x_;            // [N][n_embd] residual stream
  std::vector<float> xn_;           // [N][n_embd] normalised input of a block
  std::vector<float> q_;            // [N][n_head * head_dim]
  std::vector<float> k_, v_;        // [N][n_head_kv * head_dim]
  std::vector<float> att_;          // [N][n_head * head_dim] attention output
  std::vector<float> tmp_;          // [N][n_embd] block output before the residual add
  std::vector<float> gate_, up_;    // [N][n_ff]
  std::vector<float> rope_cs_;      // [N][n_rot] cos/sin pairs
  std::vector<float> rope_cs_swa_;  // the same with rope_swa_ (empty without)
  std::vector<float> last_;         // [S][n_embd] final hidden state of each entry's last token
  std::vector<float> logits_;       // [S][n_vocab]
  std::vector<std::vector<float>> scores_;  // per thread: [max_ctx] attention scores
};

}  // namespace rz
