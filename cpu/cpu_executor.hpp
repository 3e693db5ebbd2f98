// The CPU executor: a fp32 Llama-family forward pass over weights left in their stored format
// (dequantized block by block inside the matrix products), one fp32 KV cache per slot, threads
// over all cores. Prefill and decode are one internal step: every token of every sequence in the
// step goes through each weight matrix together, so each weight row is read once per step.
#pragma once
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
  int max_context = 0;  // tokens per slot; 0: default_context(config) (model/executor.hpp)
  int threads = 0;      // 0: all cores
};

class CpuExecutor final : public Executor {
 public:
  // Throws rz::Error for bad options or weights the executor cannot use.
  CpuExecutor(std::shared_ptr<const ModelFile> file, const CpuExecutorOptions& opt = {});
  ~CpuExecutor() override;

  const ModelConfig& config() const override { return cfg_; }
  int max_slots() const override { return static_cast<int>(slots_.size()); }
  int max_context() const override { return max_ctx_; }
  std::vector<int32_t> prefill(std::span<const PrefillRequest> reqs) override;
  std::vector<int32_t> decode(std::span<const DecodeRequest> reqs) override;
  void release(int slot) override;
  bool slot_active(int slot) const override;
  int slot_length(int slot) const override;
  void set_keep_logits(bool keep) override { keep_logits_ = keep; }
  std::span<const float> last_logits(int slot) const override;

  int threads() const;
  const ModelWeights& weights() const { return w_; }

 private:
  struct Slot {
    bool active = false;
    std::vector<int32_t> history;  // prompt + appended tokens; size() == tokens in the cache
    Sampler sampler;
    std::vector<float> logits;  // kept logits (keep_logits_)
  };
  // A run of new tokens of one slot, appended at positions history.size() - n ... - 1.
  struct Seq {
    int slot;
    int n_new;
  };

  SlotView slot_view() const;  // for the shared request checks (model/executor_checks.hpp)
  // Runs the forward pass for the last n_new tokens of each sequence's history (already
  // appended) and samples one token per sequence.
  std::vector<int32_t> step(const std::vector<Seq>& seqs);
  float* k_cache(int slot, int layer) const;
  float* v_cache(int slot, int layer) const;
  void ensure_buffers(int n_tok, int n_seq);

  std::shared_ptr<const ModelFile> file_;
  ModelConfig cfg_;
  ModelWeights w_;
  int max_ctx_ = 0;
  int64_t q_dim_ = 0, kv_dim_ = 0;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<RopeFreqs> rope_;
  std::vector<Slot> slots_;
  // KV cache of each slot: [n_layer][max_ctx][n_head_kv * head_dim] fp32, for K and for V.
  // Allocated uninitialised, so the OS commits pages only as positions get written.
  std::vector<std::unique_ptr<float[]>> k_cache_, v_cache_;
  bool keep_logits_ = false;

  // Step buffers, grown as needed (N = tokens in the step, S = sequences).
  std::vector<float> x_;          // [N][n_embd] residual stream
  std::vector<float> xn_;         // [N][n_embd] normalised input of a block
  std::vector<float> q_;          // [N][n_head * head_dim]
  std::vector<float> k_, v_;      // [N][n_head_kv * head_dim]
  std::vector<float> att_;        // [N][n_head * head_dim] attention output
  std::vector<float> tmp_;        // [N][n_embd] block output before the residual add
  std::vector<float> gate_, up_;  // [N][n_ff]
  std::vector<float> rope_cs_;    // [N][n_rot] cos/sin pairs
  std::vector<float> last_;       // [S][n_embd] final hidden state of each sequence's last token
  std::vector<float> logits_;     // [S][n_vocab]
  std::vector<std::vector<float>> scores_;  // per thread: [max_ctx] attention scores
};

}  // namespace rz
