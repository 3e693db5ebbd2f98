// The CUDA executor: the same Llama-family forward pass as the CPU executor (cpu/cpu_executor.hpp)
// on one GPU. Weights stay on the device in their stored GGUF types (F32 matrices become F16);
// activations are fp32, the KV cache fp16 in fixed-size blocks shared by all slots (device layout
// in kernels/kv_cache_shape.hpp). Which block holds which tokens is the caller's: every StepSeq
// carries its sequence's block table (model/executor.hpp); the executor keeps no block
// bookkeeping and only writes the rows of the positions a step computes.
//
// One step, N tokens of S sequences (decode tokens and prompt chunks, model/executor.hpp):
//   embedding gather -> per layer: RMSNorm, Q/K/V matmuls (+bias), RoPE, KV append, attention
//   (packed causal prefill over the cache, or paged decode), output matmul + residual, RMSNorm,
//   gate/up matmuls, SwiGLU, down matmul + residual -> last token of each sampling entry: RMSNorm,
//   output matmul -> sampling on the GPU (argmax, or penalty/top-k/top-p/min-p/temperature with
//   the slot's seeded stream drawn on the host) -> the sampled ids copied back.
// A step whose entries are all one token that samples is a decode step: paged decode attention,
// and a CUDA graph of the whole forward pass per (token count, context bound), captured the first
// time it occurs (the step's arguments are copied to fixed device addresses first; attention is
// launched for the longest context rounded up to a power of two, so the graph does not depend on
// the lengths; the token count is padded to a few sizes, gpu_executor_impl.hpp graph_tokens).
// Steps whose prompt chunks are short (at most row_chunk tokens) attend as decode rows and replay
// a graph of their layers the same way. Any other step runs in passes of at most max_step_tokens
// tokens, the longer chunks through the packed prefill attention, each piece attending to its
// sequence's earlier tokens in the cache.
// Matmuls pick gemv, qmm or cuBLAS per shape (gpu/matmul_path.hpp); cuBLAS multiplies fp16
// weights: F16 matrices as stored, quantized ones from their fp16 copies (fp16_copies) or
// dequantized into scratch per call (where qmm does not take the size: on sm_90 its wide kernel
// takes 65-256 tokens of the matrices without copies).
//
// Memory plan: weights + step scratch first, then the KV cache takes `kv_memory_fraction` of the
// free device memory left, at most slots x context blocks (or exactly `kv_blocks` blocks when
// given): kv_blocks() blocks of kv_block_size() tokens, which the scheduler hands out
// (sched/kv_block_manager.hpp).
//
// Any CUDA/cuBLAS failure inside a step throws gpu::CudaError (an rz::Error); the slots of that
// step's entries are left released, so the caller fails those requests and keeps going.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "formats/model_file.hpp"
#include "model/executor.hpp"

namespace rz::gpu {

struct GpuExecutorOptions {
  int device = 0;
  int slots = 16;                           // concurrent sequences
  int max_context = 0;                      // tokens per slot; 0: default_context(config)
  int kv_block_size = kDefaultKvBlockSize;  // tokens per KV block
  double kv_memory_fraction = 0.9;          // of the free memory left after weights and scratch
  int64_t kv_blocks = 0;       // > 0: exactly this many blocks (tests), ignoring the fraction
  int max_step_tokens = 4096;  // tokens of one forward pass (sizes the scratch buffers)
  bool cuda_graphs = true;     // decode steps replay a CUDA graph captured per batch size
  // With cuda_graphs: a pass whose graph does not exist yet runs as the smallest built graph
  // that holds it (a ladder of such covers is built at load and kept), or kernel by kernel
  // before any does; its own graph is recorded and instantiated on a helper thread
  // (gpu/graph_builder.hpp), to be replayed by the passes of its shape that come once it is
  // ready. false: captured, instantiated and launched at once, the step waiting 5-10 ms for it
  // (H200; deterministic: every pass after the first of its shape replays the graph, which tests
  // of the graphs rely on). `rz serve` turns it on: a new shape mid-serving then costs no step
  // more than a larger graph's launch.
  bool graphs_in_background = false;
  int64_t gemm_scratch_elems = int64_t{64}
                               << 20;  // dequantized weights per GEMM slice (tests: small)
  // Quantized matrices times up to 128 tokens on tensor cores without dequantizing them first
  // (kernels/qmm.hpp), where gpu/matmul_path.hpp's measured rule says it is faster; false: gemv
  // up to 16 tokens and dequantize + cuBLAS beyond, as before qmm (for comparison).
  bool qmm = true;
  // Opt-in: decode matmuls of 1-4 tokens quantize their activations to int8 per 32 elements and
  // use integer dot products (kernels/gemv_q8.hpp) where gpu/matmul_path.hpp's rule says so.
  // Faster where the step is bound by the 4-bit gemv (llama3.1-8b), but lossy: logits move by
  // ~1 % of their range (20x the fp32 path's error, kernels/GEMV.md), and since larger batches
  // keep fp16 activations, a request's greedy tokens alone and in a batch then differ at near-ties
  // more often than gpu_verify's batch check allows. Off by default for that reason.
  bool int8_activations = false;
  // Opt-in (`--weights fp8`): the layers' F16/BF16 matrices become FP8 (E4M3) rows with one
  // scale per row at load (kernels/fp8.hpp). Up to 8 tokens they multiply fp32 activations
  // (gemv_fp8); more tokens round the activations to FP8 per token and run cuBLASLt's FP8 GEMM.
  // Halves those matrices' memory and doubles the tensor cores' rate; lossy, and a request's
  // greedy tokens alone and in a batch may differ at near-ties (docs/gpu.md, "FP8 weights").
  // Needs compute capability 8.9+. Quantized GGUF matrices, the token embedding and the output
  // matrix keep their types.
  bool fp8_weights = false;
  // The GEMM path (from 17 tokens with the copies: prompt chunks, large batches) multiplies fp16
  // weights with cuBLAS. With fp16_copies the quantized matrices are dequantized once at load and
  // kept (when all the copies together take at most fp16_copies_max_share of the device's
  // memory); without, qmm takes those matmuls up to 64 tokens (on sm_90 to 128-256 with its wide
  // kernel, gpu/matmul_path.hpp) and the larger ones dequantize their matrix again into scratch
  // first. The GEMM's results are bit-identical either way; the copies trade memory (taken before
  // the KV cache is sized) for that work.
  bool fp16_copies = true;
  double fp16_copies_max_share = 0.25;
  // The kernels that produce a matmul's input (the RMSNorms, SwiGLU over fused rows) write the
  // forms its path reads (fp16 for cuBLAS, qmm's fp16 order, gemv_q8's int8 blocks) beside their
  // fp32 output, instead of a conversion kernel per input (kernels/act_forms.hpp). The results
  // are bit-identical; false runs the conversion kernels, for comparison (rz bench
  // --no-fused-forms).
  bool fused_input_forms = true;
  // Prompt chunks of at most this many tokens attend as decode-attention rows, each at its own
  // position (kernels/attention_decode.hpp: its split-context kernel keeps the device busy over a
  // long context); longer ones go through the prefill attention (kernels/attention_prefill.hpp).
  // 0: every prompt chunk of two or more tokens takes the prefill attention. Clamped to [0, 512].
  // 64 from measurement (H200, qwen2.5-1.5b, 32 decodes beside a chunk, gpu_mixed_step_bench
  // --row-chunk): a new prompt's 32 tokens as rows / packed 2.86 / 3.47 ms, 64 tokens 3.65 /
  // 3.63; at context 288, 32 tokens 3.02 / 3.51. Deep into a long prompt rows lose (each reads
  // its whole context: 16 / 32 / 64 tokens at context 1,024 cost 3.11 / 3.95 / 5.82 ms as rows,
  // 4.34 / 3.74 / 3.91 packed), which row_chunk_keys bounds.
  int row_chunk = 64;
  // ... and whose tokens times context (the keys its rows read) are at most this: each row reads
  // its whole context, so a short chunk deep into a long prompt goes to the prefill attention,
  // which reads each key once for all of them. From measurement (H200, qwen2.5-1.5b, 32 decodes
  // beside a chunk, gpu_mixed_step_bench --row-chunk-keys): 16 tokens as rows / packed 3.02 /
  // 3.55 ms at context 1,040, 3.45 / 3.67 at 1,552, 3.73 / 3.67 at 2,064, 4.44 / 3.76 at 3,088;
  // 8 tokens 3.15 / 3.61 at 2,056, 3.61 / 3.66 at 3,080: the two cross near 25,000.
  int row_chunk_keys = 16 * 1536;
  // At load, time cuBLAS's candidate kernels for every fp16 matrix the GEMM path multiplies, per
  // token bucket up to max_step_tokens (at most kGemmTuneMaxTokens), and keep the fastest
  // (Gemm::tune_x16): cublasGemmEx's own pick is up to 1.7x slower at some token counts. Costs a
  // fraction of a second at load; the choice comes from timing, so two processes may pick
  // different kernels, whose sums can differ in the last bits. false: cublasGemmEx throughout.
  bool tune_gemm = true;
  // A pass with both decode-attention rows and packed prompt chunks runs the two attentions side
  // by side on two streams (each a small, latency-bound grid); false: one after the other.
  bool attention_side_by_side = true;
};

// The most tokens tune_gemm measures; larger calls keep cublasGemmEx's choice.
inline constexpr int kGemmTuneMaxTokens = 1024;

// What the CUDA graphs cost so far (GpuExecutor::graph_stats).
struct GpuGraphStats {
  int captured = 0;     // graphs captured (each shape once, again after an eviction)
  int evicted = 0;      // destroyed to keep at most the cap of live graphs
  int64_t replays = 0;  // passes launched from a graph
  int64_t covered = 0;  // ... of them from a larger graph while their own was being built
  int64_t plain = 0;    // passes run kernel by kernel while no graph held them
  int building = 0;     // graphs_in_background: submitted, not yet taken back
  int failed = 0;       // failed to record or instantiate (their passes run without)
  std::string last_error;
  double capture_ms = 0;      // summed: recording the passes (the step thread)
  double instantiate_ms = 0;  // summed: instantiating (the builder's thread, in the background)
  double max_instantiate_ms = 0;
  std::string summary() const;  // one line: "12 graphs captured (1.1 ms each), ..."
};

// What went where, for `rz serve` to log and tests to check.
struct GpuMemoryPlan {
  std::string device_name;
  size_t total_bytes = 0;      // device memory
  size_t free_at_start = 0;    // free before the executor allocated anything
  size_t weight_bytes = 0;     // weights on the device
  int fp8_matrices = 0;        // layer matrices stored as FP8 rows (fp8_weights)
  size_t fp16_copy_bytes = 0;  // fp16 copies of the quantized matrices (fp16_copies)
  size_t scratch_bytes = 0;    // activations, workspaces, dequant scratch
  size_t kv_bytes = 0;         // K and V caches, all layers
  int64_t kv_blocks = 0;
  int kv_block_size = 0;
  int slots = 0;
  int max_context = 0;
  int gemm_tuned_buckets = 0;  // tune_gemm: (matrix shape, token bucket) pairs timed
  int gemm_tuned_lt = 0;       // ... of which a cuBLASLt kernel beat cublasGemmEx
  double gemm_tune_seconds = 0;
  std::string summary() const;  // one line: "weights 1.2 GiB, KV 100.3 GiB = 3000 blocks x 16 ..."
};

class GpuExecutor final : public Executor {
 public:
  // Loads the weights onto the device and plans memory. Throws rz::Error when there is no usable
  // device, a tensor type has no GPU kernel, or memory does not suffice for one full-context slot.
  GpuExecutor(std::shared_ptr<const ModelFile> file, const GpuExecutorOptions& opt = {});
  ~GpuExecutor() override;

  const ModelConfig& config() const override;
  int max_slots() const override;
  int max_context() const override;
  int kv_block_size() const override;
  int64_t kv_blocks() const override;
  std::vector<int32_t> step(std::span<const StepSeq> seqs) override;
  void release(int slot) override;
  bool slot_active(int slot) const override;
  int slot_length(int slot) const override;
  void set_keep_logits(bool keep) override;
  std::span<const float> last_logits(int slot) const override;
  std::span<const TokenLogprobs> step_logprobs() const override;

  // graph_stats() as /metrics counters: rz_cuda_graphs_built_total, rz_cuda_graph_replays_total,
  // rz_cuda_graph_cover_replays_total, rz_cuda_plain_passes_total, rz_cuda_graph_evictions_total,
  // rz_cuda_graph_build_failures_total.
  std::vector<ExecutorCounter> counters() const override;

  const GpuMemoryPlan& memory_plan() const;
  GpuGraphStats graph_stats() const;
  // graphs_in_background: blocks until the graphs submitted so far are built, and takes them in
  // (the next pass of their shapes replays them). Tests and benchmarks; a no-op otherwise.
  void finish_graphs();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rz::gpu
